"""The Contextual Distraction Vulnerability (CDV) study: questions, prompts, search, evaluation, DPO."""

from __future__ import annotations

from pathlib import Path


def cell_of(path: str | Path, levels_up: int) -> dict[str, str]:
    """dataset, proxy and victim from a path `levels_up` levels inside `results/cdv/{dataset}/{proxy}/{victim}/`.

    Here rather than in report.py so that scripts can parse cell paths without importing matplotlib.
    """
    cell = Path(path).parents[levels_up - 1]
    return {"dataset": cell.parts[-3], "proxy": cell.parts[-2], "victim": cell.parts[-1]}
