"""Writing a table as CSV, Markdown and LaTeX, deterministically (same frame → byte-identical files); and
rows of a dataclass (the bill's: stressprobe.cost, bill, overlap) as CSV and a plain Markdown table."""

from __future__ import annotations

import csv
import io
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd

from stressprobe.io import atomic_write

DEFAULT_DECIMALS = 3
CSV_FORMAT = ".6g"
# Unicode in column names → LaTeX math; the barred Δ (Δ + combining macron) must be replaced before Δ.
_LATEX_SYMBOLS = (
    ("Δ̄", r"$\bar{\Delta}$"),
    ("Δ", r"$\Delta$"),
    ("κ", r"$\kappa$"),
    ("τ", r"$\tau$"),
    ("φ", r"$\varphi$"),
    ("−", "-"),
)
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def format_cell(value, decimals: int, float_format: str | None = None) -> str:
    """A cell as text: blank if missing, integers as is, floats with `decimals` (or `float_format`)."""
    if _is_missing(value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        text = format(float(value), float_format or f".{decimals}f")
        return "0" + text[2:] if text.startswith("-0") and float(text) == 0 else text  # no "-0.000"
    return str(value)


def formatted(
    frame: pd.DataFrame, decimals: Mapping[str, int] | None = None, float_format: str | None = None
) -> list[list[str]]:
    """The frame's cells as text, row by row, with per-column `decimals` (default 3)."""
    decimals = decimals or {}
    return [
        [
            format_cell(value, decimals.get(column, DEFAULT_DECIMALS), float_format)
            for column, value in zip(frame.columns, row, strict=True)
        ]
        for row in frame.itertuples(index=False, name=None)
    ]


def _numeric_columns(frame: pd.DataFrame) -> list[bool]:
    return [
        pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
        for c in frame.columns
    ]


def render_csv(frame: pd.DataFrame) -> str:
    """CSV with a header, `\\n` line ends and floats to 6 significant digits."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([str(c) for c in frame.columns])
    writer.writerows(formatted(frame, float_format=CSV_FORMAT))
    return buffer.getvalue()


def _pipe_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(
    frame: pd.DataFrame, decimals: Mapping[str, int] | None = None, bold: pd.DataFrame | None = None
) -> str:
    """A pipe table; numeric columns right-aligned; cells where `bold` is True in **bold**."""
    cells = _emphasize(formatted(frame, decimals), bold, "**{}**")
    escape = lambda text: text.replace("|", r"\|")  # noqa: E731
    lines = [
        _pipe_row(escape(str(c)) for c in frame.columns),
        "|" + "|".join("---:" if numeric else ":---" for numeric in _numeric_columns(frame)) + "|",
    ]
    lines += [_pipe_row(escape(cell) for cell in row) for row in cells]
    return "\n".join(lines) + "\n"


def records_csv(kind: type, rows: Iterable[Any]) -> str:
    """Rows of the dataclass `kind` as CSV: a header of its fields, each value as Python prints it (None
    as an empty cell), `\\n` line ends."""
    names = [f.name for f in fields(kind)]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    writer.writerows([getattr(row, name) for name in names] for row in rows)
    return buffer.getvalue()


def records_markdown(kind: type, rows: Iterable[Any], formats: Mapping[str, str] | None = None) -> str:
    """Rows of the dataclass `kind` as a plain pipe table: each value as Python prints it, or, in a column
    of `formats`, with that format spec (`-` where the value is None)."""
    names = [f.name for f in fields(kind)]
    formats = formats or {}

    def cell(name: str, value: Any) -> str:
        if name not in formats:
            return str(value)
        return "-" if value is None else format(value, formats[name])

    lines = [_pipe_row(names), "|" + "---|" * len(names)]
    lines += [_pipe_row(cell(name, getattr(row, name)) for name in names) for row in rows]
    return "\n".join(lines) + "\n"


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters, then turn the Greek letters used in headers into math."""
    text = "".join(_LATEX_SPECIAL.get(char, char) for char in text)
    for symbol, replacement in _LATEX_SYMBOLS:
        text = text.replace(symbol, replacement)
    return text


def render_latex(
    frame: pd.DataFrame, decimals: Mapping[str, int] | None = None, bold: pd.DataFrame | None = None
) -> str:
    """A booktabs `tabular` (no float environment, so the paper decides placement and caption)."""
    cells = [[latex_escape(cell) for cell in row] for row in formatted(frame, decimals)]
    cells = _emphasize(cells, bold, r"\textbf{{{}}}")
    spec = "".join("r" if numeric else "l" for numeric in _numeric_columns(frame))
    lines = [
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(latex_escape(str(c)) for c in frame.columns) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(row) + r" \\" for row in cells]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def _emphasize(cells: list[list[str]], mask: pd.DataFrame | None, template: str) -> list[list[str]]:
    if mask is None:
        return cells
    flags = mask.to_numpy(dtype=bool)
    return [
        [template.format(cell) if flag and cell else cell for cell, flag in zip(row, row_flags, strict=True)]
        for row, row_flags in zip(cells, flags, strict=True)
    ]


def best_in_rows(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Mask of the largest value among `columns` in each row (every one of them when tied)."""
    mask = pd.DataFrame(False, index=frame.index, columns=frame.columns)
    values = frame[list(columns)].astype(float)
    best = values.max(axis=1)
    mask[list(columns)] = values.eq(best, axis=0) & best.notna().to_numpy()[:, None]
    return mask


def table_paths(stem: str | Path) -> dict[str, Path]:
    """The three files of a table: `<stem>.csv`, `<stem>.md`, `<stem>.tex`."""
    stem = Path(stem)
    return {ext: stem.with_name(stem.name + f".{ext}") for ext in ("csv", "md", "tex")}


# Columns whose values name models of the registry (a row's judge, evaluated model, proxy or victim).
MODEL_COLUMNS = ("model", "judge", "summarizer", "proxy", "victim")
# The run's model registry, set once per job from its config (snakemake_io.begin_job): every table a job
# writes marks its rows computed with a substitute without each table builder passing the registry along.
_registry: dict[str, Mapping] = {}


def set_model_registry(models: Mapping[str, Mapping] | None) -> None:
    _registry.clear()
    _registry.update(models or {})


def mark_substitutes(frame: pd.DataFrame, models: Mapping[str, Mapping]) -> pd.DataFrame:
    """`frame` with `model_paper` and `model_run` after its model columns when a model it names ran as a
    `substitute`: per row, the ids the paper used and the ids actually run ("; " between a row's models).
    Unchanged when no model of the frame has a substitute, so tables of the paper's own models stay as
    they are."""
    if not any((entry or {}).get("substitute") for entry in models.values()):
        return frame
    present = [c for c in MODEL_COLUMNS if c in frame.columns]
    named = {v for c in present for v in frame[c].dropna().unique() if isinstance(v, str)}
    if not any((models.get(name) or {}).get("substitute") for name in named):
        return frame

    def ids(row, key) -> str:
        names = dict.fromkeys(row[c] for c in present if isinstance(row[c], str) and row[c] in models)
        values = [str(models[n].get(key) or models[n].get("model") or n) for n in names]
        return "; ".join(dict.fromkeys(values))

    marked = frame.copy()
    at = max(list(frame.columns).index(c) for c in present) + 1
    marked.insert(at, "model_paper", [ids(r, "model") for _, r in frame.iterrows()])
    marked.insert(at + 1, "model_run", [ids(r, "substitute") for _, r in frame.iterrows()])
    return marked


def write_table(
    frame: pd.DataFrame,
    stem: str | Path,
    decimals: Mapping[str, int] | None = None,
    bold: pd.DataFrame | None = None,
) -> None:
    """Write `<stem>.csv`, `<stem>.md` and `<stem>.tex` atomically; `bold` applies to Markdown and LaTeX.

    Rows computed with a substituted model say so (`mark_substitutes`, with the job's registry)."""
    frame = mark_substitutes(frame, _registry)
    if bold is not None:
        bold = bold.reindex(columns=frame.columns, fill_value=False)
    paths = table_paths(stem)
    atomic_write(paths["csv"], render_csv(frame))
    atomic_write(paths["md"], render_markdown(frame, decimals, bold))
    atomic_write(paths["tex"], render_latex(frame, decimals, bold))


def stem(path: str | Path) -> str:
    """A table file's path without its extension (`results/tables/x.csv` → `results/tables/x`)."""
    return str(path)[: -len(Path(path).suffix) or None]
