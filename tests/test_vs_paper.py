"""The published values file and the vs_paper scorecard: the shipped file's transcription checks, one-line
errors for bad lines, and a run's values beside a test-written values file, cell by cell."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from stressprobe.errors import StressprobeError
from stressprobe.persona import analysis, metrics, vs_paper
from tests.support.helpers import ROOT
from tests.test_analysis import DELTA, systems_frame
from tests.test_metrics import tau_b_by_definition
from tests.test_paper_layouts import kappa_frame

SHIPPED = ROOT / "resources" / "paper" / "persona_values.tsv"
HEADER = "\t".join(vs_paper.COLUMNS)
TITLE = "Persona Conditioning as an Assessor-Sensitivity Probe for LLM-Based IR Evaluation"


def test_shipped_values_are_printed_numbers_only_each_naming_where():
    values = vs_paper.read_paper_values(SHIPPED)
    # T3: 2 datasets × 6 models × 8 conditions × 2; T4: 2 × 2 metrics × 6 × 9; T5: 2 × 8 × 3; T6: 2 × 6 × 2;
    # T7: 2 × 4; the text: 54 and 86 queries, κ 0.86, 7 of 472 pairs and none on RAG24, −4.17 and −4.83.
    counts = values.groupby("table").size().to_dict()
    assert counts == {"table3": 192, "table4": 216, "table5": 48, "table6": 24, "table7": 8, "text": 8}
    # Figure 1's values are not printed in the text (only its caption): no line may claim them.
    assert "figure1" not in counts
    # The paper is cited as printed: title, authors, venue (it names no preprint identifier).
    header = " ".join(line.lstrip("# ") for line in SHIPPED.read_text().splitlines() if line.startswith("#"))
    assert f'"{TITLE}", CIKM 2026' in header, header
    assert "Mohtadi, Bernardelle, Mackenzie, Demartini" in header and "arXiv" not in header
    for table, source in zip(values["table"], values["source"], strict=True):
        where = "§" if table == "text" else f"Table {table.removeprefix('table')}"
        assert source.startswith(f"CIKM 2026 {where}"), (table, source)
    text = values[values["table"] == "text"].set_index(["dataset", "condition", "systems", "metric"])
    assert text.loc[("dl20", "", "", "queries"), "value"] == 54
    assert text.loc[("rag24", "", "", "queries"), "value"] == 86
    assert text.loc[("", "", "", "annotator_kappa"), "source"] == "CIKM 2026 §3.2.1"
    assert text.loc[("dl20", "", "", "system_condition_pairs"), "value"] == 59 * 8  # 59 runs × 8 personas
    orthogonal = ("dl20", "uspersona/orthogonal", "fr_pass_roberta", "mean_delta_rank")
    assert text.loc[orthogonal, "value"] == -4.83


def test_shipped_values_pass_the_transcription_checks():
    values = vs_paper.read_paper_values(SHIPPED)
    # W% is a share of the dataset's queries (DL20: 54, RAG24: 86), printed to one decimal.
    w = values[values["metric"] == "win_rate"]
    for dataset, queries in (("dl20", 54), ("rag24", 86)):
        wins = w.loc[w["dataset"] == dataset, "value"].to_numpy() * queries / 100
        assert np.abs(wins - np.rint(wins)).max() < 0.05 * queries / 100 + 1e-9, dataset
    t6 = values[(values["table"] == "table6") & (values["metric"] == "mean_abs_rank")]
    assert len(t6) == 12 and ((t6["ci_low"] <= t6["value"]) & (t6["value"] <= t6["ci_high"])).all()
    cells = values.set_index(["table", "dataset", "condition", "metric"])["value"]
    # The cell quoted in issue 12: RAG24 PersonaHub-Domain, 0.000 with mean |Δr| 1.96 (headed and described
    # as the mean of absolute nDCG@10 shifts, so compared with that one).
    assert cells[("table5", "rag24", "personahub/domain", "mean_abs_ndcg")] == 0.0
    assert cells[("table5", "rag24", "personahub/domain", "mean_abs_rank")] == 1.96
    t4 = values[values["table"] == "table4"]
    assert t4["value"].between(0, 1).all()


def test_paper_config_lists_the_representative_systems_of_the_published_table7():
    values = vs_paper.read_paper_values(SHIPPED)
    published = values[values["table"] == "table7"].drop_duplicates("dataset").set_index("dataset")["systems"]
    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    configured = config["analysis"]["representative_systems"]
    assert {d: " ".join(entries) for d, entries in configured.items()} == published.to_dict()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("table9\td\tm\tc\t\twin_rate\t1\t\t\ts", "table 'table9' is not one of"),
        ("table3\td\tm\tc\t\ttau\t1\t\t\ts", "metric 'tau' is not one of table3's"),
        ("table3\td\t\tc\t\twin_rate\t1\t\t\ts", "table3 win_rate needs the 'model' field"),
        ("table5\td\tm\tc\t\tmean_abs_rank\t1\t\t\ts", "table5 mean_abs_rank leaves blank the 'model' field"),
        ("table3\td\tm\tc\t\twin_rate\tabc\t\t\ts", "value 'abc' is not a number"),
        ("table6\td\tm\t\t\tmean_abs_rank\t1\t0.5\t\ts", "give both ci_low and ci_high"),
        ("table3\td\tm\tc\t\twin_rate\t1\t\ts", "expected 10 tab-separated fields, got 9"),
        ("table3\td\tm\tc\t\twin_rate\t2\t\t\ts", "the same cell as line 3"),
        ("text\td\t\t\t\tqueries\t54\t\t\t", "no source; name where the value is printed"),
        ("text\td\t\tc\t\tqueries\t54\t\t\ts", "text queries leaves blank the 'condition' field"),
    ],
)
def test_bad_lines_are_one_line_errors_naming_the_line(tmp_path, line, expected):
    path = tmp_path / "values.tsv"
    path.write_text(f"# comment\n{HEADER}\ntable3\td\tm\tc\t\twin_rate\t1\t\t\ts\n{line}\n")
    with pytest.raises(StressprobeError, match=expected) as info:
        vs_paper.read_paper_values(path)
    assert f"{path}:4:" in str(info.value) and "\n" not in str(info.value)


def test_a_missing_header_is_an_error(tmp_path):
    path = tmp_path / "values.tsv"
    path.write_text("table3\td\tm\tc\t\twin_rate\t1\t\t\ts\n")
    with pytest.raises(StressprobeError, match=":1: expected the header"):
        vs_paper.read_paper_values(path)


def write_values(path, rows):
    path.write_text(HEADER + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))
    return path


def test_vs_paper_sets_the_run_beside_each_published_cell(tmp_path):
    systems, scores = systems_frame()
    kappa = kappa_frame()
    against_umbrela = [
        ("d", "m1", "fixed/gap", "umbrela", f"q{i}", 3, 0, k) for i, k in enumerate((0.2, 0.4, 0.6))
    ]
    kappa = analysis.categorize(
        pd.concat([kappa, pd.DataFrame(against_umbrela, columns=kappa.columns)], ignore_index=True),
        {
            "dataset": ["d"],
            "model": ["m1", "m2"],
            "condition": ["baseline/umbrela", "fixed/evidence", "fixed/gap"],
        },
    )
    # Run names d, m1 appear in the file as dl20, gpt-4o (analysis.vs_paper.names).
    names = {"d": "dl20", "m1": "gpt-4o"}
    values = write_values(
        tmp_path / "values.tsv",
        [
            ("figure1", "dl20", "gpt-4o", "fixed/gap", "", "kappa_umbrela", 0.5, "", "", "f1"),
            ("table3", "dl20", "gpt-4o", "fixed/evidence", "", "win_rate", 90.0, "", "", "t3"),
            ("table3", "dl20", "gpt-4o", "fixed/evidence", "", "mean_shift", 0.05, "", "", "t3"),
            ("table4", "dl20", "gpt-4o", "fixed/gap", "", "tau", 0.5, "", "", "t4"),
            ("table5", "dl20", "", "fixed/gap", "", "abs_mean_ndcg", 0.0, "", "", "t5"),
            ("table5", "dl20", "", "fixed/gap", "", "mean_abs_ndcg", 0.0, "", "", "t5"),
            ("text", "dl20", "", "", "", "queries", 54, "", "", "s3.1"),
            ("text", "dl20", "", "", "", "consistent_pairs", 7, "", "", "s4.4.2"),
            ("text", "dl20", "", "", "", "system_condition_pairs", 472, "", "", "s4.4.2"),
            ("text", "dl20", "", "fixed/gap", "a", "mean_delta_rank", -4.17, "", "", "s4.4.2"),
            ("text", "", "", "", "", "annotator_kappa", 0.86, "", "", "s3.2.1"),
            ("table6", "dl20", "gpt-4o", "", "", "mean_abs_rank", 1.2, 0.9, 1.5, "t6"),
            ("table6", "dl20", "m2", "", "", "max_abs_rank", 3, "", "", "t6"),
            ("table7", "dl20", "", "", "a b*", "mean_abs_rank_max", 2.0, "", "", "t7"),
            ("table7", "dl20", "", "", "a b*", "max_abs_rank_min", 1, "", "", "t7"),
            ("table3", "rag24", "gpt-4o", "fixed/gap", "", "win_rate", 50.0, "", "", "not in the run"),
            ("table4", "dl20", "gpt-4o", "uspersona/query", "", "rbo", 0.7, "", "", "not in the run"),
        ],
    )
    bootstrap = {"resamples": 300, "seed": 5, "level": 0.95}
    paper = vs_paper.read_paper_values(values)
    run = vs_paper.run_values(kappa, systems, 0.9, bootstrap, paper, names)
    table = vs_paper.vs_paper_table(paper.drop(columns="source"), run)
    got = table.set_index(["table", "dataset", "model", "condition", "systems", "metric"])

    def cell(*key):
        return got.loc[key]

    # Figure 1: the mean per-query κ of m1's gap labels with its UMBRELA labels, (0.2 + 0.4 + 0.6) / 3.
    assert cell("figure1", "dl20", "gpt-4o", "fixed/gap", "", "kappa_umbrela")["difference"] == pytest.approx(
        0.4 - 0.5
    )
    row = cell("table3", "dl20", "gpt-4o", "fixed/evidence", "", "win_rate")
    assert (row["run"], row["difference"]) == pytest.approx((100.0, 10.0))
    assert cell("table3", "dl20", "gpt-4o", "fixed/evidence", "", "mean_shift")["run"] == pytest.approx(0.1)
    human, gap = scores[("human", "human/human")], scores[("m1", "fixed/gap")]
    runs = sorted(human)
    tau = tau_b_by_definition([gap[r] for r in runs], [human[r] for r in runs])
    assert cell("table4", "dl20", "gpt-4o", "fixed/gap", "", "tau")["difference"] == pytest.approx(tau - 0.5)
    shifts = [
        scores[(m, "fixed/gap")][r] - scores[(m, "baseline/umbrela")][r] for m in ("m1", "m2") for r in "abcd"
    ]
    assert cell("table5", "dl20", "", "fixed/gap", "", "abs_mean_ndcg")["run"] == pytest.approx(
        abs(np.mean(shifts))
    )
    assert cell("table5", "dl20", "", "fixed/gap", "", "mean_abs_ndcg")["run"] == pytest.approx(
        np.mean(np.abs(shifts))
    )
    # The text's numbers: 10 queries; a (Δr +2, +1) and b (−0.5, −1) move the same way under both models,
    # c and d do not; a's mean Δr under gap over the two models is 1.5; no run value for the annotators' κ.
    assert cell("text", "dl20", "", "", "", "queries")["run"] == 10
    assert cell("text", "dl20", "", "", "", "consistent_pairs")["run"] == 2
    assert cell("text", "dl20", "", "", "", "system_condition_pairs")["run"] == 4
    assert cell("text", "dl20", "", "fixed/gap", "a", "mean_delta_rank")["run"] == pytest.approx(1.5)
    assert math.isnan(cell("text", "", "", "", "", "annotator_kappa")["run"])
    t6 = cell("table6", "dl20", "gpt-4o", "", "", "mean_abs_rank")
    sensitivity = np.abs(list(DELTA["m1"].values()))
    low, high = metrics.bootstrap_mean_ci(sensitivity, 300, 5, 0.95)
    assert (t6["run"], t6["run CI low"], t6["run CI high"]) == pytest.approx((1.0, low, high))
    assert t6["paper in run CI"] == (low <= 1.2 <= high)
    assert t6["run in paper CI"] is True  # 1.0 in [0.9, 1.5]
    assert cell("table6", "dl20", "m2", "", "", "max_abs_rank")["run"] == 1  # m2 is not renamed
    # Table 7 over a and the family b*: sensitivity a 1.5, b 0.75; max |Δr| a 2, b 1.
    assert cell("table7", "dl20", "", "", "a b*", "mean_abs_rank_max")["run"] == pytest.approx(1.5)
    assert cell("table7", "dl20", "", "", "a b*", "max_abs_rank_min")["run"] == 1
    for key in (
        ("table3", "rag24", "gpt-4o", "fixed/gap", "", "win_rate"),
        ("table4", "dl20", "gpt-4o", "uspersona/query", "", "rbo"),
    ):
        row = cell(*key)
        assert math.isnan(row["run"]) and math.isnan(row["difference"]) and row["paper in run CI"] is None
        assert row["why"].startswith(f"not in this run: {key[0]} has no dataset={key[1]}, model=gpt-4o"), row[
            "why"
        ]
    assert table["paper"].tolist() == paper["value"].tolist()  # every paper cell, in file order
    # Every blank row says why; a value the run computed as undefined (NaN) says so, a table the run
    # did not compute at all says that.
    assert (table["run"].isna() == (table["why"] != "")).all()
    undefined = run.assign(value=run["value"].where(run["metric"] != "tau"))
    again = vs_paper.vs_paper_table(paper.drop(columns="source"), undefined[undefined["table"] != "table7"])
    why = again.set_index(["table", "metric"])["why"]
    assert why[("table4", "tau")].startswith("undefined in this run: table4 dataset=dl20, model=gpt-4o")
    assert why[("table7", "max_abs_rank_min")] == (
        "not in this run: no table7 values (off in this config, or its table is empty)"
    )


def test_write_vs_paper_writes_the_scorecard_and_its_summary(tmp_path):
    systems, _ = systems_frame()
    values = write_values(
        tmp_path / "values.tsv",
        [
            ("table6", "d", "m1", "", "", "mean_abs_rank", 1.2, 0.9, 1.5, "t6"),
            ("table6", "d", "m2", "", "", "mean_abs_rank", 0.4, "", "", "t6"),
            ("table6", "x", "m2", "", "", "mean_abs_rank", 0.4, "", "", "t6"),
        ],
    )
    bootstrap = {"resamples": 200, "seed": 1, "level": 0.95}
    vs_paper.write_vs_paper(
        values, kappa_frame(), systems, 0.9, bootstrap, {}, str(tmp_path / "vs"), str(tmp_path / "sum")
    )
    table = pd.read_csv(tmp_path / "vs.csv", keep_default_na=False)
    assert table["source"].tolist() == ["t6", "t6", "t6"]
    assert table["run"].tolist()[2] == ""  # dataset x is not in the run
    summary = pd.read_csv(tmp_path / "sum.csv").iloc[0]
    assert (summary["paper cells"], summary["covered"], summary["with run CI"]) == (3, 2, 2)
    assert summary["mean |difference|"] == pytest.approx((0.2 + 0.1) / 2)
    for ext in ("md", "tex"):
        assert (tmp_path / f"vs.{ext}").stat().st_size > 0


def test_each_printed_table2_persona_is_a_scorecard_row_counted_in_the_summary(tmp_path):
    systems, _ = systems_frame()
    values = write_values(
        tmp_path / "values.tsv", [("table6", "d", "m1", "", "", "mean_abs_rank", 1.2, 0.9, 1.5, "t6")]
    )
    sources, roles = ["hub"] * 3 + ["us"] * 3, ["query", "domain", "orthogonal"] * 2
    check = pd.DataFrame(
        {
            "source": sources,
            "role": roles,
            "match": ["selected", "candidate 2", "no", "selected", "no", "no"],
            "printed sha256": [f"{i}" * 64 for i in range(6)],
        }
    )
    bootstrap = {"resamples": 50, "seed": 1, "level": 0.95}
    vs_paper.write_vs_paper(
        values,
        kappa_frame(),
        systems,
        0.9,
        bootstrap,
        {"rag": "RAG24"},
        str(tmp_path / "vs"),
        str(tmp_path / "sum"),
        table2=(check, "rag", "2024-121840"),
    )
    table = pd.read_csv(tmp_path / "vs.csv", keep_default_na=False)
    rows = table[table["table"] == "table2"].set_index(["condition", "metric"])
    assert len(rows) == 12 and set(rows["dataset"]) == {"RAG24"}
    assert rows.loc[("hub/domain", "persona_selected"), ["paper", "run", "difference"]].tolist() == [1, 0, -1]
    assert rows.loc[("hub/domain", "persona_in_top_k"), ["paper", "run", "difference"]].tolist() == [1, 1, 0]
    assert rows.loc[("us/orthogonal", "persona_in_top_k"), "run"] == 0
    assert rows.loc[("hub/query", "persona_selected"), "source"] == (
        "Table 2, query 2024-121840, hub query persona (sha256 000000000000…; run: selected)"
    )
    summary = pd.read_csv(tmp_path / "sum.csv").set_index(["table", "metric"])
    assert summary.loc[("table2", "persona_selected"), ["paper cells", "covered", "matched"]].tolist() == [
        6,
        6,
        2,
    ]
    assert summary.loc[("table2", "persona_in_top_k"), "matched"] == 3
    assert pd.isna(summary.loc[("table6", "mean_abs_rank"), "matched"])
