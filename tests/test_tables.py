"""Table rendering: CSV / Markdown / LaTeX, bolding of the best value per row, deterministic bytes."""

from __future__ import annotations

import csv
import dataclasses
import io
import math

import numpy as np
import pandas as pd
import pytest

from stressprobe import tables


@pytest.fixture
def frame():
    return pd.DataFrame(
        {
            "dataset": ["dl_20", "rag"],
            "model": ["m1", "m2"],
            "W% a": [61.25, 40.0],
            "W% b": [55.0, 40.0],
            "κ": [0.123456, np.nan],
            "n": [54, 86],
        }
    )


def test_format_cell():
    assert tables.format_cell(np.nan, 3) == ""
    assert tables.format_cell(None, 3) == ""
    assert tables.format_cell(np.int64(7), 3) == "7"
    assert tables.format_cell(0.12345, 2) == "0.12"
    assert tables.format_cell(-0.0001, 3) == "0.000"  # never "-0.000"
    assert tables.format_cell(-0.5, 1) == "-0.5"
    assert tables.format_cell(1.23456789e-7, 3, ".6g") == "1.23457e-07"
    assert tables.format_cell("text", 3) == "text"


def test_best_in_rows_marks_every_maximum_and_ignores_other_columns(frame):
    mask = tables.best_in_rows(frame, ["W% a", "W% b"])
    assert mask.loc[0].to_dict() == {
        "dataset": False,
        "model": False,
        "W% a": True,
        "W% b": False,
        "κ": False,
        "n": False,
    }
    assert mask.loc[1, "W% a"] and mask.loc[1, "W% b"]  # a tie: both bold
    empty = pd.DataFrame({"x": [np.nan], "y": [np.nan]})
    assert not tables.best_in_rows(empty, ["x", "y"]).to_numpy().any()


def test_markdown_has_the_values_and_bolds_the_mask(frame):
    text = tables.render_markdown(
        frame, {"W% a": 1, "W% b": 1}, bold=tables.best_in_rows(frame, ["W% a", "W% b"])
    )
    lines = text.splitlines()
    assert lines[0] == "| dataset | model | W% a | W% b | κ | n |"
    assert lines[1] == "|:---|:---|---:|---:|---:|---:|"
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells == ["dl_20", "m1", f"**{61.25:.1f}**", f"{55.0:.1f}", f"{0.123456:.3f}", "54"]
    cells = [c.strip() for c in lines[3].strip("|").split("|")]
    assert cells[2:4] == ["**40.0**", "**40.0**"] and cells[4] == ""


def test_latex_escapes_and_bolds(frame):
    text = tables.render_latex(frame, bold=tables.best_in_rows(frame, ["W% a", "W% b"]))
    assert text.startswith("\\begin{tabular}{llrrrr}\n\\toprule\n")
    assert r"W\% a & W\% b & $\kappa$ & n \\" in text
    assert r"dl\_20 & m1 & \textbf{61.250} & 55.000 & 0.123 & 54 \\" in text
    assert text.rstrip().endswith("\\end{tabular}")
    assert tables.latex_escape("Δ̄ & Δr_1 τ-b") == r"$\bar{\Delta}$ \& $\Delta$r\_1 $\tau$-b"


def test_csv_round_trips_to_six_significant_digits(frame, tmp_path):
    tables.write_table(frame, tmp_path / "t")
    back = pd.read_csv(tmp_path / "t.csv")
    assert list(back.columns) == list(frame.columns)
    np.testing.assert_allclose(back["W% a"], frame["W% a"], rtol=1e-6)
    assert back["κ"][0] == pytest.approx(frame["κ"][0], rel=1e-5) and math.isnan(back["κ"][1])
    assert back["n"].tolist() == [54, 86]


def test_write_table_is_byte_identical_on_rerun(frame, tmp_path):
    bold = tables.best_in_rows(frame, ["W% a", "W% b"])
    tables.write_table(frame, tmp_path / "a" / "t", {"W% a": 1}, bold)
    tables.write_table(frame.copy(), tmp_path / "b" / "t", {"W% a": 1}, bold)
    for ext in ("csv", "md", "tex"):
        assert (tmp_path / "a" / f"t.{ext}").read_bytes() == (tmp_path / "b" / f"t.{ext}").read_bytes()


def test_stem_and_paths():
    assert tables.stem("results/tables/table3_win_rate.csv") == "results/tables/table3_win_rate"
    assert {k: str(v) for k, v in tables.table_paths("out/x").items()} == {
        "csv": "out/x.csv",
        "md": "out/x.md",
        "tex": "out/x.tex",
    }


def test_markdown_escapes_pipes():
    text = tables.render_markdown(pd.DataFrame({"a|b": ["x|y"]}))
    assert "a\\|b" in text and "x\\|y" in text


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    calls: int
    usd: float | None


def test_records_csv_writes_values_as_python_prints_them_and_none_empty():
    rows = [Row("a, b", 3, 0.125), Row("c", 0, None)]
    text = tables.records_csv(Row, rows)
    assert text == 'name,calls,usd\n"a, b",3,0.125\nc,0,\n'
    assert list(csv.DictReader(io.StringIO(tables.records_csv(Row, [])))) == []


def test_records_markdown_formats_only_the_named_columns():
    rows = [Row("a", 3, 0.125), Row("b", 10**6, None)]
    assert tables.records_markdown(Row, rows) == (
        "| name | calls | usd |\n|---|---|---|\n| a | 3 | 0.125 |\n| b | 1000000 | None |\n"
    )
    money = tables.records_markdown(Row, rows, {"usd": ".2f"})
    assert money.splitlines()[2:] == ["| a | 3 | 0.12 |", "| b | 1000000 | - |"]
