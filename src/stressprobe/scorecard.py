"""Why a scorecard row (vs_paper, cdv_vs_paper) has no run value: the `why` column of both builders."""

from __future__ import annotations

import math


def why_blank(value: float | None, in_run: bool, part_in_run: bool, part: str, cell: str) -> str:
    """'' when the row has a run value; else whether the run computed the cell and found it undefined
    (`in_run`: a rate or mean over no items, e.g. at a rehearsal's sizes), computed `part` (a table or
    experiment) but not this cell, or computed nothing of `part` (off in the config, or its table empty)."""
    if value is not None and not (isinstance(value, float) and math.isnan(value)):
        return ""
    if in_run:
        return f"undefined in this run: {part} {cell} is over no items at this run's sizes"
    if part_in_run:
        return f"not in this run: {part} has no {cell} (that dataset, model or condition was not run)"
    return f"not in this run: no {part} values (off in this config, or its table is empty)"
