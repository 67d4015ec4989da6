"""The lines a finished run ends on: where its tables, figures, scorecards and report are."""

from __future__ import annotations

from stressprobe.run_summary import where_results_are


def test_names_the_folders_counts_and_scorecards_of_what_exists(tmp_path):
    tables, figures = tmp_path / "results/tables", tmp_path / "results/figures"
    tables.mkdir(parents=True)
    figures.mkdir(parents=True)
    built = [tables / "table3.csv", tables / "vs_paper.csv", tables / "vs_paper.md", figures / "fig2.png"]
    for path in built:
        path.write_text("x")
    missing = [tables / "cdv_vs_paper.csv", figures / "fig3.png"]
    lines = where_results_are([*map(str, built), *map(str, missing)])
    assert lines == [
        f"tables: 2 in {tables}/ (each also as .md and .tex)",
        f"figures: 1 in {figures}/ (each also as .pdf)",
        f"scorecards (the papers' numbers beside this run's): {tables / 'vs_paper.md'}",
        "report with every table and figure: snakemake --report report.html (same --configfile)",
    ]


def test_a_run_that_built_no_table_or_figure_says_nothing(tmp_path):
    data = tmp_path / "results/data/x.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text("{}")
    assert where_results_are([data, tmp_path / "results/tables/t.csv"]) == []
