"""The search's own tables and figures (value-function ablation, Figure 4 agreement, Figure 7 depths) from
search logs that a scripted search wrote."""

import json
from dataclasses import replace

import pytest

from stressprobe.cdv.search import SearchSettings, run_search, search_records, summarize_search
from stressprobe.cdv.search_report import (
    accuracy_with_originals,
    agreement_figure,
    agreement_table,
    depth_counts,
    depth_figure,
    mean_pairwise_agreement,
    perturbable_sets,
    search_quality_columns,
    value_ablation_table,
)
from stressprobe.io import write_jsonl
from tests.support.cdv_scripted import ScriptedModel, make_item

SETTINGS = SearchSettings(samples=5, limits="authors_code", max_expansions=3, max_candidates=None)
OPTIONS = {"figure_width_in": 3.5, "font_size": 7, "panel_columns": 2, "dpi": 100}
ITEMS = [make_item(f"q{i}") for i in range(4)]


def write_cell(root, dataset, victim, correct, settings=SETTINGS, variant=None):
    """Search ITEMS with a scripted victim; write its log (and summary) where the workflow would."""
    model = ScriptedModel(correct=correct)
    records = search_records(
        run_search(ITEMS, {"proxy": model, "semantic": model, "victim": model}, settings)
    )
    cell = root / "results" / "cdv" / dataset / "p" / victim
    folder = cell / "value" / variant if variant else cell
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "search.jsonl", records)
    summary = {"value": settings.value, **summarize_search(records, {})}
    (folder / "search.summary.json").write_text(json.dumps(summary))
    return folder


def number(question):
    return int(question.split("for q")[1].split("?")[0])


# v1 is distracted on q0 and q1 (toward C), v2 on q1 and q2; v2 already fails q3's original.
def v1(contexts, question):
    return 0 if number(question) in (0, 1) and "C" in contexts else 3


def v2(contexts, question):
    if number(question) == 3:
        return 0
    return 0 if number(question) in (1, 2) and "C" in contexts else 3


def test_agreement_of_perturbable_questions_between_victims(tmp_path):
    paths = [str(write_cell(tmp_path, "D", v, f) / "search.jsonl") for v, f in (("v1", v1), ("v2", v2))]
    sets = perturbable_sets(paths)
    assert sets[("D", "p", "v1")]["perturbable"] == {"q0", "q1"}
    assert sets[("D", "p", "v2")] == {"searched": {"q0", "q1", "q2"}, "perturbable": {"q1", "q2"}}
    table = agreement_table(paths).set_index(["cell_a", "cell_b"])
    # Over q0-q2 (both searched): v1 {q0, q1}, v2 {q1, q2}: Jaccard 1/3, agree on q1 only.
    pair = table.loc[("v1", "v2")]
    assert pair["common"] == 3 and pair["jaccard"] == pytest.approx(1 / 3)
    assert pair["agreement"] == pytest.approx(1 / 3)
    # Figure 4's cells: A=1 B=1 (q1), A=1 B=0 (q0), A=0 B=1 (q2), A=0 B=0 (none), in percent
    confusion = [pair[f"pct_{c}"] for c in ("both", "a_only", "b_only", "neither")]
    assert confusion == pytest.approx([100 / 3, 100 / 3, 100 / 3, 0.0])
    assert pair["pct_both"] + pair["pct_neither"] == pytest.approx(100 * pair["agreement"])
    assert mean_pairwise_agreement(agreement_table(paths)) == pytest.approx(1 / 3)  # the one distinct pair
    assert table.loc[("v1", "v1"), "jaccard"] == 1.0
    # With the originals the victim already fails, v2's q3 counts as perturbable and searched.
    with_originals = perturbable_sets(paths, with_originals=True)
    assert with_originals[("D", "p", "v2")]["perturbable"] == {"q1", "q2", "q3"}
    fig = agreement_figure(paths, OPTIONS)
    assert fig.get_size_inches()[0] == pytest.approx(3.5)


def test_depth_counts_and_figure(tmp_path):
    paths = [str(write_cell(tmp_path, "D", v, f) / "search.jsonl") for v, f in (("v1", v1), ("v2", v2))]
    counts = depth_counts(paths).set_index("depth")["successes"].to_dict()
    # Per victim and perturbable question: the child toward C at depth 1, then the two other children (B, D;
    # r = 0.6) are expanded and their C children succeed at depth 2. v2's failed original is at depth 0.
    assert counts == {0: 1, 1: 2 * 2, 2: 2 * 2 * 2}
    fig = depth_figure(paths, {**OPTIONS, "figure_width_in": 5.0})
    assert fig.get_size_inches()[0] == pytest.approx(5.0)


def test_value_ablation_table_has_a_row_per_variant(tmp_path):
    default = write_cell(tmp_path, "D", "v1", v1)
    variants = [
        write_cell(tmp_path, "D", "v1", v1, replace(SETTINGS, value=name), variant=name)
        for name in ("no_r", "gamma0")
    ]
    table = value_ablation_table([str(f / "search.summary.json") for f in [default, *variants]])
    assert list(table["value"]) == ["paper", "gamma0", "no_r"]
    assert set(table["victim"]) == {"v1"} and set(table["dataset"]) == {"D"}
    for row in table.itertuples():
        summary = json.loads(
            (default if row.value == "paper" else default / "value" / row.value)
            .joinpath("search.summary.json")
            .read_text()
        )
        assert row.success_rate == summary["questions_with_success"] / 4
        assert row.usd_per_success == summary["cost_per_perturbed_question_usd"]
        assert row.requests_per_success == summary["requests_total"] / summary["successful_perturbations"]


def test_accuracy_with_the_originals_the_victim_already_fails(tmp_path):
    folder = write_cell(tmp_path, "D", "v2", v2)  # v2 already fails q3's original
    (folder / "eval").mkdir()
    evals = [
        {"qid": "q3", "condition": "original", "correct": False},
        {"qid": "q0", "condition": "original", "correct": True},
        {"qid": "q1", "condition": "perturbed", "correct": False},
        {"qid": "q2", "condition": "perturbed", "correct": True},
    ]
    write_jsonl(folder / "eval" / "m.jsonl", evals)
    (row,) = accuracy_with_originals(
        [str(folder / "eval" / "m.jsonl")], [str(folder / "search.jsonl")]
    ).to_dict("records")
    assert row["model"] == "m" and row["n_failed_originals"] == 1
    # Perturbed q1 (wrong) and q2 (right), plus q3's original (wrong): 1 of 3.
    assert row["n_perturbed_with_originals"] == 3
    assert row["acc_perturbed_with_originals"] == pytest.approx(1 / 3)
    # Evaluated as a perturbed record already (cdv.search.failed_originals: include): counted once.
    write_jsonl(
        folder / "eval" / "m.jsonl", [*evals, {**evals[0], "condition": "perturbed", "node_id": "q3:0"}]
    )
    (row,) = accuracy_with_originals(
        [str(folder / "eval" / "m.jsonl")], [str(folder / "search.jsonl")]
    ).to_dict("records")
    assert row["n_perturbed_with_originals"] == 3
    assert row["acc_perturbed_with_originals"] == pytest.approx(1 / 3)


def test_search_columns_show_the_audit_only_when_it_ran():
    base = {"questions": 4, "flagged_original_fails": 1, "questions_with_success": 2, "unanswered": 0}
    assert search_quality_columns({**base, "greedy_audit": {}})["greedy_audit_right"] is None
    assert search_quality_columns({**base, "greedy_audit": {"wrong": 2}})["greedy_audit_right"] == 0
    columns = search_quality_columns({**base, "questions_with_success_with_originals": 3})
    assert columns["success_rate"] == 2 / 3 and columns["success_rate_with_originals"] == 3 / 4


def test_the_value_ablation_pools_its_datasets_as_section_4_4_does(tmp_path):
    folders = {
        (dataset, variant): write_cell(
            tmp_path, dataset, "v1", correct, replace(SETTINGS, value=variant or "paper"), variant=variant
        )
        for dataset, correct in (("D", v1), ("E", v2))
        for variant in (None, "no_r")
    }
    table = value_ablation_table([str(f / "search.summary.json") for f in folders.values()])
    pooled = table[table["dataset"] == "all"].set_index("value")
    assert list(table["dataset"]) == ["D", "D", "E", "E", "all", "all"]
    for variant, name in ((None, "paper"), ("no_r", "no_r")):
        summaries = [json.loads((folders[d, variant] / "search.summary.json").read_text()) for d in "DE"]
        searched = sum(s["questions"] - s["flagged_original_fails"] for s in summaries)
        assert (
            pooled.loc[name, "success_rate"] == sum(s["questions_with_success"] for s in summaries) / searched
        )
        assert pooled.loc[name, "questions"] == 8
        perturbations = sum(s["successful_perturbations"] for s in summaries)
        assert pooled.loc[name, "usd_per_success"] == sum(s["cost_usd"] for s in summaries) / perturbations


def test_the_scorecard_job_builds_the_value_ablation_from_its_variant_files(tmp_path):
    """The cdv_vs_paper job's value ablation under config/paper.yaml (input `variant_summaries`,
    cdv_variant_files, each cell's own summary and its variants'): it was once called with two lists and
    stopped (found by the rehearsal, tests/test_rehearsal.py)."""
    from stressprobe.cdv import study_tables

    default = write_cell(tmp_path, "D", "v1", v1)
    variants = [
        write_cell(tmp_path, "D", "v1", v1, replace(SETTINGS, value=name), variant=name)
        for name in ("no_r", "gamma0")
    ]
    files = [str(f / "search.summary.json") for f in [default, *variants]]
    table = study_tables.build("cdv_value_ablation", {"variant_summaries": files}, {})
    assert table.equals(value_ablation_table(files))
