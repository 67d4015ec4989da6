"""The analysis glue: reading the judging stage's files and building each table, on hand-built inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from stressprobe.errors import StressprobeError
from stressprobe.io import atomic_write, write_jsonl
from stressprobe.persona import analysis, figures, judgment_tables, metrics, system_tables
from stressprobe.persona.evaluation import format_ndcg_table, ndcg_table
from tests.support.analysis_fixtures import DatasetSpec, StudySpec, study_paths, write_study_files
from tests.support.helpers import shared_data
from tests.test_metrics import holm_by_hand, kappa_by_definition, rbo_ext_by_definition, tau_b_by_definition

ORDER = {"dataset": ["d"], "model": ["m1", "m2"], "condition": ["baseline/umbrela", "fixed/gap"]}


# ---- reading ----


def test_read_judgments_keeps_unparsed_as_nan(tmp_path):
    path = tmp_path / "j.jsonl"
    write_jsonl(
        path,
        [
            {"qid": "1", "docid": "a", "label": 2, "status": "ok"},
            {"qid": "1", "docid": "b", "label": None, "status": "unparsed"},
        ],
    )
    frame = analysis.read_judgments(path)
    assert frame["qid"].tolist() == ["1", "1"] and frame["label"][0] == 2.0 and math.isnan(frame["label"][1])


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"qid": "1", "docid": "a", "label": 5}', "record 2 has label 5"),
        ('{"qid": "1", "docid": "a", "label": "2"}', "record 2 lacks qid/docid or has label '2'"),
        ('{"qid": "1", "label": 1}', "record 2 lacks qid/docid"),
        ('{"qid": "1", "docid": ', ":2: not valid JSON"),
    ],
)
def test_read_judgments_bad_records_name_file_and_record(tmp_path, line, expected):
    path = tmp_path / "j.jsonl"
    atomic_write(path, json.dumps({"qid": "1", "docid": "z", "label": 0}) + "\n" + line + "\n")
    with pytest.raises(StressprobeError, match=expected) as info:
        analysis.read_judgments(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_system_scores_count_a_missing_query_as_zero_and_ignore_all_rows(tmp_path):
    path = tmp_path / "n.tsv"
    rows = [
        {"run": "r1", "qid": "q1", "ndcg_cut_10": 0.5},
        {"run": "r1", "qid": "q2", "ndcg_cut_10": 0.3},
        {"run": "r1", "qid": "all", "ndcg_cut_10": 0.99},
        {"run": "r2", "qid": "q1", "ndcg_cut_10": 0.8},
        {"run": "r2", "qid": "other", "ndcg_cut_10": 1.0},
    ]
    atomic_write(path, format_ndcg_table(rows))
    scores = analysis.system_scores(path, ["q1", "q2", "q3"])
    assert scores.to_dict() == pytest.approx({"r1": (0.5 + 0.3) / 3, "r2": 0.8 / 3})


# ---- judgment level ----


def labels(rows):
    return pd.DataFrame(rows, columns=["qid", "docid", "label"]).astype({"label": float})


def test_dataset_kappa_against_human_and_umbrela_with_unparsed_pairs():
    human = labels([("q1", "a", 0), ("q1", "b", 1), ("q1", "c", 3), ("q2", "a", 2), ("q2", "b", 2)])
    base = labels([("q1", "a", 0), ("q1", "b", 2), ("q1", "c", 3), ("q2", "a", 2), ("q2", "b", 1)])
    gap = labels([("q1", "a", 1), ("q1", "b", None), ("q1", "c", 3), ("q2", "a", 2), ("q2", "b", 2)])
    kappa = analysis.dataset_kappa("d", {("m", "baseline/umbrela"): base, ("m", "fixed/gap"): gap}, human)
    got = kappa.set_index(["condition", "reference", "qid"])["kappa"]
    assert got["fixed/gap", "human", "q1"] == pytest.approx(kappa_by_definition([1, 3], [0, 3]))
    assert math.isnan(got["fixed/gap", "human", "q2"])  # both raters give 2 to every pair
    assert got["baseline/umbrela", "human", "q2"] == pytest.approx(0.0)  # human constant, judge varies
    assert got["fixed/gap", "umbrela", "q1"] == pytest.approx(kappa_by_definition([1, 3], [0, 3]))
    assert ("baseline/umbrela", "umbrela", "q1") not in got.index
    gap["rule"] = ["final_score", "", "first_grade", "final_score", "final_score"]
    shift = analysis.dataset_label_shift("d", {("m", "baseline/umbrela"): base, ("m", "fixed/gap"): gap})
    rows = shift.set_index("condition")
    row = rows.loc["fixed/gap"]
    assert (row["pairs"], row["unparsed"], row["shift_1"], row["shift_0"], row["shift_-1"]) == (5, 1, 2, 2, 0)
    # How each answer was read (judging.answer_reader), per cell; UMBRELA's own row has only its counts.
    assert (row["read_final_score"], row["read_first_grade"], row["read_lone_grade"]) == (3, 1, 0)
    baseline = rows.loc["baseline/umbrela"]
    assert baseline["pairs"] == 5 and baseline[[f"shift_{s}" for s in analysis.SHIFTS]].sum() == 0
    table = judgment_tables.label_shift_table(shift).set_index("condition")
    assert table.loc["fixed/gap", "read_first_grade"] == 1 and table.loc["fixed/gap", "compared"] == 4
    assert math.isnan(table.loc["baseline/umbrela", "stricter"])


def kappa_rows(model, condition, values):
    return [("d", model, condition, "human", f"q{i}", 3, 0, v) for i, v in enumerate(values)]


def test_win_rate_table_and_holm_across_conditions():
    rng = np.random.default_rng(3)
    base = rng.uniform(0, 0.8, 20)
    rows = kappa_rows("m1", "baseline/umbrela", base)
    rows += kappa_rows("m1", "fixed/gap", base + rng.normal(0.1, 0.1, 20))
    evidence = base + rng.normal(-0.05, 0.1, 20)
    evidence[3] = np.nan  # an undefined κ: a tie over all 20 queries (or dropped, below)
    rows += kappa_rows("m1", "fixed/evidence", evidence)
    frame = analysis.categorize(
        pd.DataFrame(
            rows,
            columns=["dataset", "model", "condition", "reference", "qid", "pairs", "unanswered", "kappa"],
        ),
        {"dataset": ["d"], "model": ["m1"], "condition": ["baseline/umbrela", "fixed/evidence", "fixed/gap"]},
    )
    table = judgment_tables.mark_significant(judgment_tables.win_rate_significance_table(frame), alpha=0.05)
    assert table["condition"].astype(str).tolist() == ["fixed/evidence", "fixed/gap"]
    evidence_row = table.iloc[0]
    shift = (evidence - base)[~np.isnan(evidence)]
    assert evidence_row["queries"] == 20
    assert evidence_row["W%"] == pytest.approx(100 * (shift > 0).sum() / 20)
    assert evidence_row["Δ̄"] == pytest.approx(shift.sum() / 20)
    dropped = judgment_tables.win_rate_significance_table(frame, undefined="drop").iloc[0]
    assert dropped["queries"] == 19
    assert dropped["W%"] == pytest.approx(100 * (shift > 0).sum() / 19)
    assert dropped["Δ̄"] == pytest.approx(shift.mean())
    np.testing.assert_allclose(table["p_sign_holm"], holm_by_hand(table["p_sign"].to_numpy()))
    np.testing.assert_allclose(table["p_wilcoxon_holm"], holm_by_hand(table["p_wilcoxon"].to_numpy()))
    for _, row in table.iterrows():
        assert ("W%" in row["significant"].split()) == (row["p_sign_holm"] < 0.05)
    wide = judgment_tables.win_rate_wide_table(table)
    assert list(wide.columns) == ["dataset", "model", "fixed/evidence", "fixed/gap"]
    assert wide["fixed/gap"][0] == pytest.approx(table.iloc[1]["W%"])


# ---- system level ----


#: A label-shift frame without cells: no judging call failed (the system tables' `unanswered` columns are 0).
NO_FAILED_CALLS = analysis.dataset_label_shift("d", {})


def systems_frame():
    scores = {
        ("human", "human/human"): {"a": 0.7, "b": 0.9, "c": 0.6, "d": 0.5},
        ("m1", "baseline/umbrela"): {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6},
        ("m1", "fixed/gap"): {"a": 0.5, "b": 0.8, "c": 0.8, "d": 0.1},
        ("m2", "baseline/umbrela"): {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6},
        ("m2", "fixed/gap"): {"a": 0.85, "b": 0.9, "c": 0.6, "d": 0.5},
    }
    rows = [("d", m, c, run, s) for (m, c), runs in scores.items() for run, s in runs.items()]
    frame = pd.DataFrame(rows, columns=["dataset", "model", "condition", "run", "ndcg"])
    return analysis.categorize(frame, ORDER), scores


# Hand-derived displacements (rank 1 = best, ties averaged):
# m1: baseline a1 b2 c3 d4; gap b,c tied 1.5, a 3, d 4 → Δr a +2, b −0.5, c −1.5, d 0
# m2: baseline a1 b2 c3 d4; gap b1 a2 c3 d4         → Δr a +1, b −1,   c 0,    d 0
DELTA = {"m1": {"a": 2, "b": -0.5, "c": -1.5, "d": 0}, "m2": {"a": 1, "b": -1, "c": 0, "d": 0}}


def test_displacement_frame_matches_hand_derived_ranks():
    systems, _ = systems_frame()
    frame = system_tables.displacement_frame(systems)
    for model, expected in DELTA.items():
        got = frame[frame["model"] == model].set_index("run")["delta_rank"].to_dict()
        assert got == expected


def test_displacement_without_a_baseline_condition_is_empty_and_tables_accept_it(tmp_path):
    # `judging.conditions: [fixed/gap]` is valid config: no condition has a UMBRELA baseline to compare with.
    order = {"dataset": ["d"], "model": ["m1"], "condition": ["fixed/gap"]}
    rows = [
        ("d", m, c, r, s)
        for m, c in (("human", "human/human"), ("m1", "fixed/gap"))
        for r, s in (("a", 0.5), ("b", 0.4))
    ]
    systems = analysis.categorize(
        pd.DataFrame(rows, columns=["dataset", "model", "condition", "run", "ndcg"]), order
    )
    frame = system_tables.displacement_frame(systems)
    assert frame.empty
    assert list(frame.columns) == ["dataset", "model", "condition", "run", "delta_rank", "delta_ndcg"]
    system_tables.write_displacement_table(systems, tmp_path / "table5", NO_FAILED_CALLS)
    system_tables.write_displacement_ci(systems, 100, 42, 0.95, tmp_path / "table6", NO_FAILED_CALLS)
    system_tables.write_sensitive_systems(systems, {}, 3, tmp_path / "table7", NO_FAILED_CALLS)
    system_tables.write_direction_consistency(
        systems, tmp_path / "direction", tmp_path / "counts", NO_FAILED_CALLS
    )
    for stem in ("table5", "table6", "table7", "direction", "counts"):
        assert (tmp_path / f"{stem}.csv").is_file()


def test_table5_per_condition_averages_over_models():
    systems, scores = systems_frame()
    table = system_tables.displacement_by_condition_table(system_tables.displacement_frame(systems)).iloc[0]
    dn = {
        m: [scores[(m, "fixed/gap")][r] - scores[(m, "baseline/umbrela")][r] for r in "abcd"] for m in DELTA
    }
    assert table["mean |Δr|"] == pytest.approx(
        np.mean([np.mean(np.abs(list(d.values()))) for d in DELTA.values()])
    )
    assert table["max |Δr|"] == 2
    assert table["mean |ΔnDCG@10|"] == pytest.approx(np.mean([np.mean(np.abs(v)) for v in dn.values()]))
    assert table["affected systems"] == pytest.approx((3 + 2) / 2)
    assert table["mean ΔnDCG@10"] == pytest.approx(np.mean([np.mean(v) for v in dn.values()]))


def test_table4_against_independent_tau_and_rbo():
    systems, scores = systems_frame()
    table = system_tables.ranking_agreement_table(systems, phi=0.9).set_index(["model", "condition"])
    human = scores[("human", "human/human")]
    gap = scores[("m1", "fixed/gap")]
    runs = sorted(human)
    row = table.loc[("m1", "fixed/gap")]
    assert row["τ-b"] == pytest.approx(tau_b_by_definition([gap[r] for r in runs], [human[r] for r in runs]))
    # Tie rule: b and c are tied under m1/gap, ordered by name → b, c, a, d.
    assert row["RBO"] == pytest.approx(rbo_ext_by_definition(["b", "c", "a", "d"], ["b", "a", "c", "d"], 0.9))
    assert len(table) == 4 and (table["systems"] == 4).all()


def test_table6_bootstrap_uses_the_configured_seed():
    systems, _ = systems_frame()
    table = system_tables.displacement_ci_table(
        system_tables.displacement_frame(systems), 500, seed=7
    ).set_index("model")
    values = np.abs(list(DELTA["m1"].values()))
    assert table.loc["m1", "mean |Δr|"] == pytest.approx(values.mean())
    assert (table.loc["m1", "CI low"], table.loc["m1", "CI high"]) == pytest.approx(
        metrics.bootstrap_mean_ci(values, 500, seed=7)
    )
    assert table.loc["m1", "max |Δr|"] == 2


def test_table7_ranks_by_sensitivity_and_leaves_missing_types_blank():
    systems, _ = systems_frame()
    table = system_tables.sensitive_systems_table(
        system_tables.displacement_frame(systems), {"d": {"a": "dense"}}, top_k=2
    )
    # Sensitivity: a (2+1)/2 = 1.5; b and c 0.75 (c first: larger max |Δr|); d 0.
    assert table["run"].tolist() == ["a", "c"]
    assert table["mean |Δr|"].tolist() == pytest.approx([1.5, 0.75])
    assert table["max |Δr|"].tolist() == [2, 1.5]
    assert table["type"].tolist() == ["dense", ""]


def test_direction_consistency_across_models():
    systems, _ = systems_frame()
    listing, counts = system_tables.direction_consistency_tables(system_tables.displacement_frame(systems))
    assert listing[["run", "direction"]].values.tolist() == [["a", "down"], ["b", "up"]]
    assert listing["mean Δr"].tolist() == pytest.approx([1.5, -0.75])
    assert counts[["pairs", "consistent", "up", "down"]].iloc[0].tolist() == [4, 2, 1, 1]


def test_persona_sources_side_by_side():
    order = {
        "dataset": ["d"],
        "model": ["m"],
        "condition": ["baseline/umbrela", "personahub/query", "uspersona/query"],
    }
    rows = []
    for condition, value in (("baseline/umbrela", 0.5), ("personahub/query", 0.3), ("uspersona/query", 0.6)):
        rows += [("d", "m", condition, "human", "q1", 2, 0, value)]
        if condition != "baseline/umbrela":
            rows += [("d", "m", condition, "umbrela", "q1", 2, 0, value + 0.1)]
    kappa = analysis.categorize(
        pd.DataFrame(
            rows,
            columns=["dataset", "model", "condition", "reference", "qid", "pairs", "unanswered", "kappa"],
        ),
        order,
    )
    systems = []
    for condition in ("human/human", *order["condition"]):
        model = "human" if condition == "human/human" else "m"
        systems += [("d", model, condition, r, s) for r, s in (("x", 0.5), ("y", 0.4), ("z", 0.3))]
    systems = analysis.categorize(
        pd.DataFrame(systems, columns=["dataset", "model", "condition", "run", "ndcg"]), order
    )
    table = system_tables.persona_source_table(
        judgment_tables.kappa_agreement_table(kappa),
        judgment_tables.win_rate_significance_table(kappa),
        system_tables.ranking_agreement_table(systems, 0.9),
        system_tables.displacement_frame(systems),
    )
    row = table.iloc[0]
    assert (row["role"], row["κ vs UMBRELA PH"], row["κ vs UMBRELA US"]) == (
        "query",
        pytest.approx(0.4),
        pytest.approx(0.7),
    )
    assert (row["W% PH"], row["W% US"]) == (0.0, 100.0)
    assert (row["τ-b PH"], row["RBO US"], row["mean |Δr| PH"]) == (1.0, pytest.approx(1.0), 0.0)


# ---- every output from contract-format files ----


def build_everything(root, order):
    paths = study_paths(root, order)
    for ds, p in paths.items():
        analysis.write_judgment_frames(ds, p["labels"], p["label_cells"], p["human"], p["kappa"], p["shift"])
        analysis.write_system_frame(ds, p["ndcg"], p["ndcg_cells"], p["topics"], p["systems"])
    kappa = analysis.read_frames([p["kappa"] for p in paths.values()], order)
    shift = analysis.read_frames([p["shift"] for p in paths.values()], order)
    systems = analysis.read_frames([p["systems"] for p in paths.values()], order)
    t, f = root / "results" / "tables", root / "results" / "figures"
    options = {"figure_width_in": 3.5, "font_size": 7, "panel_columns": 2, "dpi": 60}
    judgment_tables.write_kappa_table(kappa, t / "kappa_agreement")
    figures.write_kappa_heatmap(kappa, (f / "f1.png", f / "f1.pdf"), order, options)
    judgment_tables.write_win_rate_tables(kappa, 0.05, t / "table3_win_rate", t / "table3_significance")
    judgment_tables.write_label_shift_table(shift, t / "label_shift")
    figures.write_label_shift_figure(shift, (f / "shift.png", f / "shift.pdf"), order, options)
    figures.write_ndcg_scatter(systems, (f / "f2.png", f / "f2.pdf"), order, options)
    system_tables.write_ranking_agreement(systems, 0.9, t / "table4", shift)
    system_tables.write_displacement_table(systems, t / "table5", shift)
    system_tables.write_displacement_ci(systems, 200, 42, 0.95, t / "table6", shift)
    run_types = analysis.read_run_types(order["dataset"], [p["run_metadata"] for p in paths.values()])
    system_tables.write_sensitive_systems(systems, run_types, 3, t / "table7", shift)
    system_tables.write_direction_consistency(systems, t / "direction", t / "direction_counts", shift)
    system_tables.write_persona_sources(kappa, systems, 0.9, t / "sources", shift)
    return sorted(
        p for p in (root / "results").rglob("*") if p.is_file() and p.parent.name in ("tables", "figures")
    )


def test_every_output_builds_from_contract_files_and_is_byte_identical(tmp_path):
    spec = StudySpec(datasets=[DatasetSpec("dl", 6, 7, 8), DatasetSpec("rag", 5, 6, 7)], models=["m1", "m2"])
    outputs = {}
    for run in ("a", "b"):
        order = write_study_files(tmp_path / run, spec)
        outputs[run] = build_everything(tmp_path / run, order)
    assert len(outputs["a"]) == 11 * 3 + 3 * 2  # 11 tables, 3 figures
    for first, second in zip(outputs["a"], outputs["b"], strict=True):
        assert first.read_bytes() == second.read_bytes(), first.name
    table3 = (tmp_path / "a" / "results" / "tables" / "table3_win_rate.md").read_text()
    assert table3.count("**") >= 2 * 4  # a bold best W% in each of the 4 dataset × model rows
    table7 = pd.read_csv(tmp_path / "a" / "results" / "tables" / "table7.csv", keep_default_na=False)
    assert set(table7["type"]) <= {"dense", "sparse", "rerank", ""}


# ---- real data ----


def test_real_dl20_condition_equal_to_human_gives_identical_rankings(tmp_path):
    from stressprobe.persona.data import read_qrels, read_runs_dir

    data = shared_data("dl20")
    qrels = read_qrels(data / "qrels.txt")
    runs = read_runs_dir(data / "runs")
    assert len(runs) == 39
    table = format_ndcg_table(ndcg_table(qrels, runs))
    qids = sorted(qrels)
    cells = [("human", "human/human"), ("m", "baseline/umbrela"), ("m", "fixed/gap")]
    paths = []
    for model, condition in cells:
        paths.append(tmp_path / model / f"{condition}.tsv")
        atomic_write(paths[-1], table)
    frame = analysis.dataset_system_scores("dl20", dict(zip(cells, paths, strict=True)), qids)
    systems = analysis.categorize(
        frame, {"dataset": ["dl20"], "model": ["m"], "condition": ["baseline/umbrela", "fixed/gap"]}
    )
    human = systems[systems["model"] == "human"].set_index("run")["ndcg"]
    assert human["bm25"] == pytest.approx(0.4796, abs=5e-5)  # the known trec_eval value
    assert metrics.ranked_systems(human)[-1] == "bm25"
    ranking = system_tables.ranking_agreement_table(systems, phi=0.9)
    assert (ranking["τ-b"] == 1.0).all() and ranking["RBO"].to_numpy() == pytest.approx(1.0)
    displacement = system_tables.displacement_frame(systems)
    assert len(displacement) == 39 and (displacement["delta_rank"] == 0).all()


def test_the_persona_source_table_of_no_cell_is_empty_with_its_columns():
    # Every answer unparsed leaves no κ and no ranking; the table is then empty, not a KeyError.
    kappa = pd.DataFrame(
        columns=["dataset", "model", "condition", "reference", "qid", "pairs", "unanswered", "kappa"]
    )
    systems = pd.DataFrame(columns=["dataset", "model", "condition", "run", "ndcg"])
    table = system_tables.persona_source_table(
        judgment_tables.kappa_agreement_table(kappa),
        judgment_tables.win_rate_significance_table(kappa),
        system_tables.ranking_agreement_table(systems, 0.9),
        system_tables.displacement_frame(systems),
    )
    assert table.empty
    assert list(table.columns[:4]) == ["dataset", "model", "role", "κ vs UMBRELA PH"]
