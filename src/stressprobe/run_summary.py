"""The few lines a finished run ends on: where its tables, figures, scorecards and report are.

Snakemake's own last lines say how many steps ran, not where their results are; a researcher who ran
the demo or the paper config should not have to read the README to find them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SCORECARDS = ("vs_paper", "cdv_vs_paper")


def where_results_are(outputs: Iterable[str | Path]) -> list[str]:
    """Lines naming the folders of the run's final tables and figures (with counts), its scorecards and
    the report command; only outputs that exist count (a targeted run that built none prints nothing)."""
    paths = [Path(p) for p in outputs if Path(p).exists()]
    tables = sorted({p for p in paths if p.suffix == ".csv" and p.parent.name == "tables"})
    figures = sorted({p for p in paths if p.suffix == ".png" and p.parent.name == "figures"})
    lines = []
    for kind, found in (("tables", tables), ("figures", figures)):
        if found:
            folders = ", ".join(sorted({f"{p.parent}/" for p in found}))
            lines.append(f"{kind}: {len(found)} in {folders} (each also as {_formats(kind)})")
    cards = [p.with_suffix(".md") for p in tables if p.stem in SCORECARDS]
    if cards:
        lines.append("scorecards (the papers' numbers beside this run's): " + ", ".join(map(str, cards)))
    if lines:
        lines.append("report with every table and figure: snakemake --report report.html (same --configfile)")
    return lines


def _formats(kind: str) -> str:
    return ".md and .tex" if kind == "tables" else ".pdf"
