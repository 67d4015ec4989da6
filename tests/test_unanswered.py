"""Issue 30: no table of either study scores a record without an answer (a failed call, status `error`).

Each test injects such records into one table's input and checks both that they are left out of the
value (recomputed here from the answered records alone) and that the table counts them (`unanswered`).
An answer that could not be parsed stays each study's own switch and is checked apart from them.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from stressprobe import scoring
from stressprobe.cdv import paper_report, report
from stressprobe.cdv.classifier import (
    classifier_metrics,
    filter_effect,
    prompt_answers,
    prompt_probabilities,
    run_classifier,
)
from stressprobe.cdv.evaluate import eval_items, evaluate
from stressprobe.cdv.search import SearchSettings, run_search, search_records, summarize_search
from stressprobe.cdv.search_report import accuracy_with_originals
from stressprobe.io import write_jsonl
from stressprobe.llm import Response
from stressprobe.persona import analysis, judgment_tables, system_tables
from stressprobe.persona.evaluation import MEASURE, ndcg_table
from stressprobe.persona.judging import judgment_qrels, unanswered_pairs
from tests.support.cdv_scripted import ScriptedModel, kind_of, make_item, question_of, user_text
from tests.test_analysis import ORDER, systems_frame
from tests.test_cdv_study import SETTINGS, _items, _victim
from tests.test_metrics import kappa_by_definition


def test_the_core_helper_splits_off_failed_calls_only():
    records = [{"status": "ok"}, {"status": "error"}, {"status": "unparsed"}, {"status": "truncated"}]
    kept, left_out = scoring.answered(records)
    assert kept == [records[0], records[2], records[3]] and left_out == 1
    assert [scoring.is_unanswered(r) for r in records] == [False, True, False, False]


# ---- CDV: accuracy (Table 1, Figure 3's baselines, Table 4, the experiments' table, benchmark, DPO) ----


class Victim:
    """Right (A) on "right" questions, wrong (B) on "wrong" ones, no answer line on "vague" ones, and a
    failed call on "broken" ones."""

    def generate(self, requests):
        out = []
        for request in requests:
            text = user_text(request)
            if "broken" in text:
                out.append(Response.failure("HTTP 404 model_not_found"))
            elif "vague" in text:
                out.append(Response(texts=["I cannot tell."], completion_tokens=4))
            else:
                out.append(Response(texts=["So. Answer: " + ("A" if "right" in text else "B")]))
        return out


QUESTIONS = [
    make_item("q1", question="a right one?"),
    make_item("q2", question="a wrong one?"),
    make_item("q3", question="a broken one?"),
    make_item("q4", question="a vague one?"),
]
PERTURBED = [
    {**QUESTIONS[0], "node_id": "q1:1", "question": "ctx. a right one?"},
    {**QUESTIONS[1], "node_id": "q2:1", "question": "ctx. a broken one?"},
    {**QUESTIONS[2], "node_id": "q3:1", "question": "ctx. a wrong one?"},
]
BASELINES = [
    {"qid": "q1", "kind": "elaborated", "question": "Longer, broken?", "status": "ok"},
    {"qid": "q2", "kind": "elaborated", "question": "Longer, right?", "status": "ok"},
    {"qid": "q2", "kind": "prompt_only", "question": "Shorter, wrong?", "status": "ok"},
]


def accuracy_by_hand(records, condition):
    """(accuracy over the answered records, answered, unanswered) of one condition, from the records."""
    mine = [r for r in records if r["condition"] == condition]
    answered = [r for r in mine if r["status"] != "error"]
    right = sum(r["answer"] == r["correct_option"] for r in answered)
    return (right / len(answered) if answered else None), len(answered), len(mine) - len(answered)


@pytest.fixture
def evals(tmp_path):
    cell = tmp_path / "results" / "cdv" / "D" / "p" / "v"
    items = eval_items(QUESTIONS, PERTURBED, BASELINES)
    plain, mitigated = evaluate(Victim(), items, 32, 0), evaluate(Victim(), items, 32, 0, mitigation=True)
    paths = {}
    for folder, records in (("eval", plain), ("mitigation", mitigated)):
        (cell / folder).mkdir(parents=True)
        write_jsonl(cell / folder / "m.jsonl", records)
        paths[folder] = str(cell / folder / "m.jsonl")
    return plain, paths


def test_table1_leaves_failed_calls_out_of_accuracy_and_counts_them(evals):
    records, paths = evals
    assert [r["status"] for r in records[:4]] == ["ok", "ok", "error", "unparsed"]
    (row,) = report.accuracy_table([paths["eval"]]).to_dict("records")
    acc, n, unanswered = accuracy_by_hand(records, "original")
    # q1 right, q2 wrong, q4 unparsed (wrong, the CDV's choice), q3's call failed: 1 of 3, not 1 of 4.
    assert (acc, n, unanswered) == (1 / 3, 3, 1)
    assert (row["acc_original"], row["n_original"], row["unanswered_original"]) == (acc, n, unanswered)
    assert row["unparsed_original"] == 1  # the vague answer only: a failed call is not "unparsed"
    acc, n, unanswered = accuracy_by_hand(records, "perturbed")
    assert (acc, n, unanswered) == (1 / 2, 2, 1)
    assert (row["acc_perturbed"], row["n_perturbed"], row["unanswered_perturbed"]) == (acc, n, unanswered)
    # The paired originals of q1, q2, q3: q3's failed original is not scored, so q1 and q2: 1 of 2.
    assert row["acc_original_paired"] == 1 / 2
    assert row["delta"] == pytest.approx(1 / 2 - 1 / 2)


def test_the_baselines_table_leaves_a_failed_rewrite_answer_out(evals):
    records, paths = evals
    (row,) = report.baselines_table([paths["eval"]]).to_dict("records")
    acc, _, unanswered = accuracy_by_hand(records, "elaborated")
    assert (acc, unanswered) == (1.0, 1)  # q2's elaborated is right; q1's call failed
    assert (row["acc_elaborated"], row["unanswered_elaborated"]) == (acc, unanswered)
    assert (row["acc_prompt_only"], row["unanswered_prompt_only"]) == (0.0, 0)


def test_the_mitigation_table_counts_failed_calls_with_and_without_the_instruction(evals):
    records, paths = evals
    (row,) = report.mitigation_table([paths["eval"]], [paths["mitigation"]]).to_dict("records")
    assert (row["acc_original_mitigated"], row["unanswered_original_mitigated"]) == (1 / 3, 1)
    assert (row["acc_perturbed_mitigated"], row["unanswered_perturbed_mitigated"]) == (1 / 2, 1)
    assert (row["unanswered_original"], row["unanswered_perturbed"]) == (1, 1)


def test_the_experiments_table_counts_failed_calls_beside_its_n(evals, tmp_path):
    records, paths = evals
    questions = tmp_path / "D.jsonl"
    write_jsonl(questions, QUESTIONS)
    experiments = {"table1": {"cells": [{"proxy": "p", "victim": "v"}], "n": None}}
    (row,) = paper_report.experiments_table(
        experiments, [paths["eval"]], [str(questions)], 0, [paths["mitigation"]]
    ).to_dict("records")
    assert (row["n_original"], row["unanswered_original"], row["acc_original"]) == (3, 1, 1 / 3)
    assert (row["n_perturbed"], row["unanswered_perturbed"], row["acc_perturbed"]) == (2, 1, 1 / 2)
    assert row["delta"] == pytest.approx(1 / 3 - 1 / 2)
    assert (row["acc_perturbed_mitigated"], row["unanswered_perturbed_mitigated"]) == (1 / 2, 1)


def test_the_benchmark_and_dpo_comparison_rows_leave_failed_calls_out(evals):
    records, paths = evals
    acc, n, unanswered = accuracy_by_hand(records, "perturbed")
    (row,) = paper_report.dpo_table([], [paths["eval"]]).to_dict("records")
    assert (row["accuracy"], row["n"], row["unanswered"]) == (acc, n, unanswered)
    pooled = paper_report.benchmark_table([paths["eval"]]).to_dict("records")[0]
    assert (pooled["accuracy"], pooled["n"], pooled["unanswered"]) == (acc, n, unanswered)


def test_accuracy_with_the_failed_originals_leaves_failed_calls_out(tmp_path):
    cell = tmp_path / "results" / "cdv" / "D" / "p" / "v"
    (cell / "eval").mkdir(parents=True)
    write_jsonl(cell / "search.jsonl", [{"qid": "q3", "flag": "victim_fails_original"}])
    evals = [
        {"qid": "q3", "condition": "original", "correct": False, "status": "ok"},
        {"qid": "q1", "condition": "perturbed", "correct": True, "status": "ok"},
        {"qid": "q2", "condition": "perturbed", "correct": False, "status": "error"},
    ]
    write_jsonl(cell / "eval" / "m.jsonl", evals)
    (row,) = accuracy_with_originals([str(cell / "eval" / "m.jsonl")], [str(cell / "search.jsonl")]).to_dict(
        "records"
    )
    assert (row["n_perturbed_with_originals"], row["acc_perturbed_with_originals"]) == (2, 1 / 2)
    assert row["unanswered"] == 1


# ---- CDV: search success rates (the search table, Table 3's filter cost) ----


def test_a_question_whose_original_got_no_answer_is_not_in_any_success_rate(tmp_path):
    # q0's victim calls fail; q1 and q2 are distracted (success); q3 never is.
    def failing(request):
        return kind_of(request) == "victim" and "for q0?" in question_of(request)

    def correct(contexts, question):
        return 0 if contexts and ("q1" in question or "q2" in question) else 3

    model = ScriptedModel(correct=correct, fail=failing)
    settings = SearchSettings(samples=5, limits="authors_code", max_expansions=3, max_candidates=None)
    items = [make_item(f"q{i}") for i in range(4)]
    records = search_records(
        run_search(items, {"proxy": model, "semantic": model, "victim": model}, settings)
    )
    summary = summarize_search(records, {})
    roots = [r for r in records if r["depth"] == 0]
    failed = {r["qid"] for r in roots if r["status"] == "error"}
    found = {r["qid"] for r in records if r["status"] == "success" and r["depth"] > 0}
    assert failed == {"q0"} and found == {"q1", "q2"}
    assert summary["unanswered"] == 1
    folder = tmp_path / "results" / "cdv" / "D.random" / "p" / "v"
    folder.mkdir(parents=True)
    (folder / "search.summary.json").write_text(json.dumps(summary))
    (row,) = report.search_table([str(folder / "search.summary.json")]).to_dict("records")
    # 2 of the 3 searched questions, not 2 of 4: q0 was never searched.
    assert (row["searched"], row["success_rate"], row["unanswered"]) == (3, 2 / 3, 1)
    assert row["success_rate_with_originals"] == 2 / 3
    (cost,) = (
        paper_report.filter_cost_table([str(folder / "search.summary.json")])
        .query("dataset == 'D'")
        .to_dict("records")
    )
    assert (cost["success_rate"], cost["unanswered"]) == (2 / 3, 1)
    # The classifier's filter effect (Tables 2-3): q0 has no label, so it is in neither rate.
    effect = filter_effect(records, {"q0", "q1"}, {})
    assert (effect["without_filter"]["success_rate"], effect["without_filter"]["unanswered"]) == (2 / 3, 1)
    assert (effect["with_filter"]["success_rate"], effect["with_filter"]["unanswered"]) == (1.0, 1)


# ---- CDV: classifier metrics (Tables 2-3 and 7) ----


def test_a_failed_classifier_call_keeps_the_question_but_is_not_scored():
    class Classifier:
        def generate(self, requests):
            replies = {"q1": "No", "q2": "Yes", "q3": None}
            texts = [replies[r.messages[-1][1].split("for ")[1][:2]] for r in requests]
            return [Response.failure("HTTP 500") if t is None else Response(texts=[t]) for t in texts]

    asked = [make_item("q1"), make_item("q2"), make_item("q3")]
    assert prompt_answers(Classifier(), asked, 0) == {"q1": 0.0, "q2": 1.0, "q3": None}
    # The search's filter never drops a question for a failed call.
    assert prompt_probabilities(Classifier(), asked, 0) == {"q1": 0.0, "q2": 1.0, "q3": 1.0}
    rows = [{"qid": q, "label": y, "split": "test"} for q, y in (("q1", 1), ("q2", 1), ("q3", 0))]
    (test,) = classifier_metrics(rows, prompt_answers(Classifier(), asked, 0), 0.5).values()
    # Scored on q1 (kept 0, label 1) and q2 (kept 1, label 1): precision 1, recall 1/2; q3 not at all.
    assert (test["n"], test["positives"], test["unanswered"]) == (2, 2, 1)
    assert (test["precision"], test["recall"]) == (1.0, 0.5)


def test_the_classifier_table_counts_the_unanswered_test_questions(tmp_path):
    metrics = {
        "kind": "prompt",
        "n_test": 2,
        "unanswered_test": 1,
        "precision": 1.0,
        "recall": 0.5,
        "f_beta": 1.25 * 0.5 / (0.25 + 0.5),
        "filter_effect": {
            "D/p/v": {
                side: {
                    "success_rate": 0.5,
                    "unanswered": 3,
                    "cost_per_perturbed_question_usd": 0.1,
                    "requests_per_success": 2,
                }
                for side in ("without_filter", "with_filter")
            }
        },
    }
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    (row,) = report.classifier_table(str(tmp_path / "metrics.json")).to_dict("records")
    assert (row["n_test"], row["unanswered_test"], row["unanswered_originals"]) == (2, 1, 3)


# ---- persona: label shift, κ, win rate, nDCG ----


def judgments(path, rows):
    """A judgments file of (qid, docid, label, status) rows."""
    write_jsonl(
        path,
        [
            {
                "qid": q,
                "docid": d,
                "label": label,
                "status": status,
                "label_rule": "answer" if label else None,
            }
            for q, d, label, status in rows
        ],
    )
    return path


BASE = [
    ("q1", "d1", 2, "ok"),
    ("q1", "d2", 1, "ok"),
    ("q1", "d3", None, "error"),
    ("q1", "d4", None, "unparsed"),
]
COND = [("q1", "d1", 3, "ok"), ("q1", "d2", None, "error"), ("q1", "d3", 1, "ok"), ("q1", "d4", 0, "ok")]


@pytest.mark.parametrize("unparsed", ["exclude", "zero"])
def test_the_label_shift_compares_answered_pairs_only(tmp_path, unparsed):
    cells = {
        ("m", "baseline/umbrela"): analysis.read_judgments(judgments(tmp_path / "b.jsonl", BASE), unparsed),
        ("m", "fixed/gap"): analysis.read_judgments(judgments(tmp_path / "c.jsonl", COND), unparsed),
    }
    shift = analysis.categorize(
        analysis.dataset_label_shift("d", cells),
        {"dataset": ["d"], "model": ["m"], "condition": ["baseline/umbrela", "fixed/gap"]},
    )
    table = judgment_tables.label_shift_table(shift).set_index("condition")
    # d2 and d3 each lack an answer on one side: never compared, never grade 0. d4's unparsed baseline
    # answer is the switch's: left out ("exclude") or graded 0 ("zero", then compared with 0: no shift).
    compared = {"exclude": [+1], "zero": [+1, 0]}[unparsed]
    row = table.loc["fixed/gap"]
    assert (row["compared"], row["unanswered"], row["unparsed"]) == (len(compared), 1, 0)
    assert row["+1"] == pytest.approx(100 * compared.count(1) / len(compared))
    baseline = table.loc["baseline/umbrela"]
    assert (baseline["unanswered"], baseline["unparsed"]) == (1, 1 if unparsed == "exclude" else 0)


def test_kappa_and_its_table_leave_failed_calls_out_and_count_them(tmp_path):
    human = analysis.qrels_frame({"q1": {"d1": 2, "d2": 0, "d3": 1, "d4": 3}})
    cells = {
        ("m", "baseline/umbrela"): analysis.read_judgments(judgments(tmp_path / "b.jsonl", BASE)),
        ("m", "fixed/gap"): analysis.read_judgments(judgments(tmp_path / "c.jsonl", COND)),
    }
    order = {"dataset": ["d"], "model": ["m"], "condition": ["baseline/umbrela", "fixed/gap"]}
    kappa = analysis.categorize(analysis.dataset_kappa("d", cells, human), order)
    vs_human = kappa[kappa["reference"] == "human"].set_index("condition")
    # fixed/gap answered d1, d3, d4 (its d2 call failed): κ over those three pairs only.
    assert vs_human.loc["fixed/gap", "kappa"] == pytest.approx(kappa_by_definition([3, 1, 0], [2, 1, 3]))
    assert vs_human.loc["fixed/gap", ["pairs", "unanswered"]].tolist() == [3, 1]
    table = judgment_tables.kappa_agreement_table(kappa).set_index("condition")
    assert table.loc["fixed/gap", "unanswered"] == 1 and table.loc["baseline/umbrela", "unanswered"] == 1


def test_a_query_without_answers_is_left_out_of_the_win_rate_not_a_tie():
    base = [0.2, 0.4, 0.6, 0.3, 0.5]
    cond = [0.3, 0.5, 0.5, 0.6, math.nan]  # q4: every fixed/gap call failed
    rows = [("d", "m", "baseline/umbrela", "human", f"q{i}", 3, 0, k) for i, k in enumerate(base)]
    rows += [
        ("d", "m", "fixed/gap", "human", f"q{i}", 0 if i == 4 else 3, 3 if i == 4 else 0, k)
        for i, k in enumerate(cond)
    ]
    columns = ["dataset", "model", "condition", "reference", "qid", "pairs", "unanswered", "kappa"]
    order = {"dataset": ["d"], "model": ["m"], "condition": ["baseline/umbrela", "fixed/gap"]}
    frame = analysis.categorize(pd.DataFrame(rows, columns=columns), order)
    (row,) = judgment_tables.win_rate_significance_table(frame).to_dict("records")
    shift = np.array(cond[:4]) - np.array(base[:4])
    assert (row["queries"], row["unanswered_queries"], row["unanswered"]) == (4, 1, 3)
    assert row["W%"] == pytest.approx(100 * (shift > 0).sum() / 4)
    assert row["Δ̄"] == pytest.approx(shift.mean())


def test_ndcg_takes_documents_without_an_answer_out_of_the_ranking():
    records = [
        {"qid": "q1", "docid": "d1", "label": 3, "status": "ok"},
        {"qid": "q1", "docid": "d2", "label": None, "status": "error"},
        {"qid": "q1", "docid": "d3", "label": None, "status": "unparsed"},
    ]
    qrels = judgment_qrels(records)
    assert qrels == {"q1": {"d1": 3}} and unanswered_pairs(records) == {"q1": {"d2"}}
    runs = {"r": {"q1": {"d2": 3.0, "d3": 2.0, "d1": 1.0}}}
    # Taken out, d2 leaves d3 (unparsed: unjudged, no gain) at rank 1 and d1 at rank 2.
    kept = ndcg_table(qrels, runs, unanswered=unanswered_pairs(records))
    assert kept[0][MEASURE] == pytest.approx((3 / math.log2(3)) / 3)
    # Left in, d2 would have been a non-relevant document at rank 1 (grade 0), d1 at rank 3.
    graded_zero = ndcg_table(qrels, runs)
    assert graded_zero[0][MEASURE] == pytest.approx((3 / math.log2(4)) / 3)


def test_the_system_tables_count_the_failed_calls_behind_their_rankings(tmp_path):
    systems, _ = systems_frame()
    failed = {("m1", "baseline/umbrela"): 1, ("m1", "fixed/gap"): 2, ("m2", "baseline/umbrela"): 0}
    failed[("m2", "fixed/gap")] = 3
    shift = analysis.dataset_label_shift("d", {})
    shift = pd.DataFrame(
        [
            {**dict.fromkeys(shift.columns, 0), "dataset": "d", "model": m, "condition": c, "unanswered": n}
            for (m, c), n in failed.items()
        ]  # fmt: skip
    )
    shift = analysis.categorize(shift, ORDER)
    system_tables.write_ranking_agreement(systems, 0.9, tmp_path / "t4", shift)
    ranking = pd.read_csv(tmp_path / "t4.csv").set_index(["model", "condition"])
    for cell, n in failed.items():
        assert ranking.loc[cell, "unanswered"] == n
    system_tables.write_displacement_table(systems, tmp_path / "t5", shift)
    (row,) = pd.read_csv(tmp_path / "t5.csv").to_dict("records")
    # fixed/gap over both models: their own failed calls (2 + 3) and their UMBRELA cells' (1 + 0).
    assert (row["condition"], row["unanswered"], row["unanswered_umbrela"]) == ("fixed/gap", 5, 1)


def test_the_configured_prompt_classifier_is_scored_on_its_answered_test_questions():
    items = _items(20)
    records = search_records(
        run_search(items, {r: _victim() for r in ("proxy", "semantic", "victim")}, SETTINGS)
    )
    cell = {"dataset": "toy", "proxy": "p", "victim": "v"}
    settings = {
        "kind": "prompt",
        "threshold": 0.5,
        "model": "judge",
        "test_fraction": 0.5,
        "validation_fraction": 0.0,
        "prompt_models": [],
    }

    def ask(model, asked):  # every call on a question number divisible by 3 fails; the rest say "no"
        return {q["qid"]: None if int(q["qid"][1:]) % 3 == 0 else 0.0 for q in asked}

    questions = {q["qid"]: {**q, "dataset": "toy"} for q in items}
    rows, metrics, _ = run_classifier(
        [(cell, records, {"proxy": "p", "victim": "v", "semantic": "p"})],
        questions,
        settings,
        0,
        None,
        ask,
        {},
    )
    test = [r for r in rows if r["split"] == "test"]
    failed = [r for r in test if int(r["qid"][1:]) % 3 == 0]
    answered = [r for r in test if int(r["qid"][1:]) % 3 != 0]
    assert failed and answered
    assert (metrics["n_test"], metrics["unanswered_test"]) == (len(answered), len(failed))
    assert metrics["positives_test"] == sum(r["label"] for r in answered)
    # The failed ones are kept by the filter (p = 1), the answered ones dropped ("no"): scored on the
    # answered alone, nothing is kept, so precision is undefined and recall 0 (with any positive).
    assert all(r["keep"] for r in failed) and not any(r["keep"] for r in answered)
    assert metrics["precision"] is None
    assert metrics["recall"] == (0.0 if metrics["positives_test"] else None)


# ---- persona: Tables 6-7, direction consistency and the persona sources, from judgments with failed calls ----

SOURCES = ("personahub/query", "uspersona/query")
SYSTEM_ORDER = {"dataset": ["d"], "model": ["m1", "m2"], "condition": ["baseline/umbrela", *SOURCES]}
SYSTEM_DOCS = [f"d{i}" for i in range(6)]
# Five runs ranking the six documents of one query; each judge cell grades them, some calls failing.
SYSTEM_RUNS = {
    f"r{i}": {"q1": {d: float(s) for d, s in zip(SYSTEM_DOCS, scores, strict=True)}}
    for i, scores in enumerate(
        [(6, 5, 4, 3, 2, 1), (1, 2, 3, 4, 5, 6), (3, 6, 1, 5, 2, 4), (5, 1, 6, 2, 4, 3)]
    )
}
SYSTEM_RUNS["r4"] = {"q1": {d: float(s) for d, s in zip(SYSTEM_DOCS, (2, 4, 6, 1, 3, 5), strict=True)}}
HUMAN_GRADES = {"d0": 3, "d1": 0, "d2": 2, "d3": 1, "d4": 0, "d5": 2}
# (grades of d0..d5, None = the call failed) per cell
SYSTEM_CELLS = {
    ("m1", "baseline/umbrela"): (3, 1, 2, None, 0, 2),
    ("m1", "personahub/query"): (None, 1, 3, 2, 0, None),
    ("m1", "uspersona/query"): (2, 0, None, 1, 3, 2),
    ("m2", "baseline/umbrela"): (3, 0, 2, 1, 0, 2),
    ("m2", "personahub/query"): (0, None, 3, 2, 1, 3),
    ("m2", "uspersona/query"): (None, None, 2, 3, 0, 1),
}


def cell_records(grades):
    return [
        {
            "qid": "q1",
            "docid": d,
            "label": g,
            "status": "error" if g is None else "ok",
            "label_rule": "answer",
        }
        for d, g in zip(SYSTEM_DOCS, grades, strict=True)
    ]


def failed_in(model, conditions):
    return sum(g is None for c in conditions for g in SYSTEM_CELLS[(model, c)])


def hand_ndcg(grades, failed_graded_zero=False):
    """nDCG@10 of every run by the textbook formula, from the cell's answered grades alone: a failed call's
    document is taken out of each ranking (or, to show the difference, left in as not relevant)."""
    from tests.test_evaluation import reference_ndcg10

    answered = {d: g for d, g in zip(SYSTEM_DOCS, grades, strict=True) if g is not None}
    return {
        run: reference_ndcg10(
            answered, {d: s for d, s in ranked["q1"].items() if failed_graded_zero or d in answered}
        )
        for run, ranked in SYSTEM_RUNS.items()
    }


def hand_displacement(failed_graded_zero=False):
    """(model, condition) -> run -> Δr vs the model's UMBRELA ranking (rank 1 = best, ties averaged)."""
    from scipy.stats import rankdata

    def ranks(grades):
        scores = hand_ndcg(grades, failed_graded_zero)
        return dict(zip(scores, rankdata([-round(s, 12) for s in scores.values()]), strict=True))

    out = {}
    for model in SYSTEM_ORDER["model"]:
        base = ranks(SYSTEM_CELLS[(model, "baseline/umbrela")])
        for condition in SOURCES:
            cond = ranks(SYSTEM_CELLS[(model, condition)])
            out[(model, condition)] = {run: cond[run] - base[run] for run in SYSTEM_RUNS}
    return out


@pytest.fixture
def system_study(tmp_path):
    """The frames the workflow builds from the cells' judgments: nDCG@10 with the failed pairs' documents
    taken out (write_qrels), κ and the label shift (write_judgment_frames)."""
    rows, labels = [], {}
    for (model, condition), grades in SYSTEM_CELLS.items():
        records = cell_records(grades)
        path = judgments(tmp_path / f"{model}-{condition.replace('/', '-')}.jsonl", [])
        write_jsonl(path, records)
        labels[(model, condition)] = analysis.read_judgments(path)
        table = ndcg_table(judgment_qrels(records), SYSTEM_RUNS, unanswered=unanswered_pairs(records))
        rows += [("d", model, condition, r["run"], r[MEASURE]) for r in table if r["qid"] == "all"]
    human = ndcg_table({"q1": HUMAN_GRADES}, SYSTEM_RUNS)
    rows += [("d", "human", "human/human", r["run"], r[MEASURE]) for r in human if r["qid"] == "all"]
    systems = analysis.categorize(
        pd.DataFrame(rows, columns=["dataset", "model", "condition", "run", "ndcg"]), SYSTEM_ORDER
    )
    human_labels = analysis.qrels_frame({"q1": HUMAN_GRADES})
    kappa = analysis.categorize(analysis.dataset_kappa("d", labels, human_labels), SYSTEM_ORDER)
    shift = analysis.categorize(analysis.dataset_label_shift("d", labels), SYSTEM_ORDER)
    return systems, kappa, shift


def test_the_test_cells_rank_differently_when_failed_calls_are_graded_zero():
    # Guard: the cells below would give other displacements if a failed call counted as not relevant.
    assert hand_displacement() != hand_displacement(failed_graded_zero=True)


def test_table6_is_computed_from_the_answered_pairs_and_counts_the_failed_calls(system_study, tmp_path):
    systems, _, shift = system_study
    system_tables.write_displacement_ci(systems, 200, 7, 0.95, tmp_path / "t6", shift)
    table = pd.read_csv(tmp_path / "t6.csv").set_index("model")
    delta = hand_displacement()
    for model in SYSTEM_ORDER["model"]:
        sensitivity = [np.mean([abs(delta[(model, c)][run]) for c in SOURCES]) for run in SYSTEM_RUNS]
        assert table.loc[model, "mean |Δr|"] == pytest.approx(np.mean(sensitivity), abs=0.005)
        assert table.loc[model, "unanswered"] == failed_in(model, SOURCES)
        assert table.loc[model, "unanswered_umbrela"] == failed_in(model, ["baseline/umbrela"])
    assert table["unanswered"].tolist() != [0, 0]


def test_table7_is_computed_from_the_answered_pairs_and_counts_the_failed_calls(system_study, tmp_path):
    systems, _, shift = system_study
    system_tables.write_sensitive_systems(systems, {}, len(SYSTEM_RUNS), tmp_path / "t7", shift)
    table = pd.read_csv(tmp_path / "t7.csv").set_index("run")
    delta = hand_displacement()
    for run in SYSTEM_RUNS:
        assert table.loc[run, "mean |Δr|"] == pytest.approx(
            np.mean([abs(d[run]) for d in delta.values()]), abs=0.005
        )
    models = SYSTEM_ORDER["model"]
    assert set(table["unanswered"]) == {sum(failed_in(m, SOURCES) for m in models)}
    assert set(table["unanswered_umbrela"]) == {sum(failed_in(m, ["baseline/umbrela"]) for m in models)}


def test_direction_consistency_is_computed_from_the_answered_pairs_and_counts_the_failed_calls(
    system_study, tmp_path
):
    systems, _, shift = system_study
    system_tables.write_direction_consistency(systems, tmp_path / "list", tmp_path / "counts", shift)
    listing = pd.read_csv(tmp_path / "list.csv")
    counts = pd.read_csv(tmp_path / "counts.csv").set_index("condition")
    delta = hand_displacement()
    models = SYSTEM_ORDER["model"]
    for condition in SOURCES:
        signs = {run: {np.sign(delta[(m, condition)][run]) for m in models} for run in SYSTEM_RUNS}
        expected = {(run, "up" if s == {-1} else "down") for run, s in signs.items() if s in ({-1}, {1})}
        mine = listing[listing["condition"] == condition]
        assert set(zip(mine["run"], mine["direction"], strict=True)) == expected
        failed = sum(failed_in(m, [condition]) for m in models)
        umbrela = sum(failed_in(m, ["baseline/umbrela"]) for m in models)
        assert (counts.loc[condition, "consistent"], counts.loc[condition, "unanswered"]) == (
            len(expected),
            failed,
        )
        assert counts.loc[condition, "unanswered_umbrela"] == umbrela
        assert set(mine["unanswered"]) <= {failed} and set(mine["unanswered_umbrela"]) <= {umbrela}


def test_persona_sources_are_computed_from_the_answered_pairs_and_count_each_sides_failed_calls(
    system_study, tmp_path
):
    systems, kappa, shift = system_study
    system_tables.write_persona_sources(kappa, systems, 0.9, tmp_path / "sources", shift)
    table = pd.read_csv(tmp_path / "sources.csv").set_index("model")
    delta = hand_displacement()
    for model in SYSTEM_ORDER["model"]:
        row = table.loc[model]
        for condition, short in zip(SOURCES, ("PH", "US"), strict=True):
            mean = np.mean([abs(v) for v in delta[(model, condition)].values()])
            assert row[f"mean |Δr| {short}"] == pytest.approx(mean, abs=0.005)
            assert row[f"unanswered {short}"] == failed_in(model, [condition])
        assert row["unanswered_umbrela"] == failed_in(model, ["baseline/umbrela"])
