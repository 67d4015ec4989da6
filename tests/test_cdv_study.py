"""The CDV paper's experiments at toy scale: experiment cells and nested samples, the classifier study
(Table 7) and its cost experiment (Table 3), and the comparison with published values."""

from __future__ import annotations

import json
import pathlib
import re

import pandas as pd
import pytest

from stressprobe.cdv import paper_figures, paper_report
from stressprobe.cdv.classifier import NO_CLASSIFIER, TRAINED, run_classifier, study_splits
from stressprobe.cdv.experiments import cell_specs, experiment_qids, nested_sample, select_questions
from stressprobe.cdv.search import SearchSettings, run_search, search_records, summarize_search
from stressprobe.errors import StressprobeError
from tests.support.cdv_scripted import ScriptedModel, make_item
from tests.support.helpers import ROOT

SETTINGS = SearchSettings(samples=3, max_expansions=2, max_candidates=None)
PRICE = {"prompt_per_1m": 0.15, "completion_per_1m": 0.6}  # GPT-4o-mini's

FIGURE_OPTIONS = {"figure_width_in": 3.5, "font_size": 7, "panel_columns": 2, "dpi": 80}


def test_experiments_merge_into_cells_with_the_largest_sample_and_all_evaluators():
    cdv = {
        "cells": [{"proxy": "p", "victim": "v", "n": 5}],
        "eval_models": ["e1"],
        "experiments": {
            "self_search": {"n": 100, "eval_models": None, "cells": [{"proxy": "a", "victim": "a"}]},
            "scale_up": {"n": 300, "eval_models": ["e2"], "cells": [{"proxy": "a", "victim": "a"}]},
        },
    }
    specs = cell_specs(cdv)
    assert specs[("p", "v")] == {"n": 5, "eval_models": ["e1"], "experiments": ["cells"]}
    assert specs[("a", "a")]["n"] == 300
    assert specs[("a", "a")]["eval_models"] == ["e2", "e1"]
    assert sorted(specs[("a", "a")]["experiments"]) == ["scale_up", "self_search"]
    # a null n (all questions) wins over any number
    cdv["experiments"]["all"] = {"n": None, "eval_models": None, "cells": [{"proxy": "a", "victim": "a"}]}
    assert cell_specs(cdv)[("a", "a")]["n"] is None


def test_nested_samples_keep_file_order_and_the_small_one_is_inside_the_large_one():
    items = [{"qid": f"q{i:03d}"} for i in range(500)]
    small, large = nested_sample(items, 100, 42), nested_sample(items, 300, 42)
    assert len(small) == 100 and len(large) == 300
    assert {q["qid"] for q in small} <= {q["qid"] for q in large}
    assert [q["qid"] for q in large] == sorted(q["qid"] for q in large)
    assert nested_sample(items, 100, 42) == small and nested_sample(items, 100, 7) != small
    assert nested_sample(items, None, 42) == items and experiment_qids(items, 100, 42) == {
        q["qid"] for q in small
    }


def test_study_splits_are_80_10_10_and_disjoint():
    keys = [f"k{i}" for i in range(1200)]
    splits = study_splits(keys, 0.1, 0.1, 3)
    counts = {s: sum(v == s for v in splits.values()) for s in ("train", "validation", "test")}
    assert counts == {"train": 960, "validation": 120, "test": 120}
    assert study_splits(keys, 0.1, 0.1, 3) == splits


# A toy study: questions whose text says "fragile" are the perturbable ones (the scripted victim fails
# them once a distraction is added); the others resist every distraction.
def _items(n):
    return [
        make_item(f"q{i:02d}", question=f"{'A fragile' if i % 2 else 'A sturdy'} question number {i}?")
        for i in range(n)
    ]


def _victim():
    return ScriptedModel(correct=lambda contexts, q: 0 if contexts and "fragile" in q else 3)


def _embed(texts):
    # One informative feature and some noise: the logistic regression can learn "fragile".
    return [[1.0 if "fragile" in t else 0.0, (len(t) % 7) / 7.0, 0.5] for t in texts]


def _ask(model, questions):
    # A prompt classifier that is right about half of the questions: says yes to everything with an even digit.
    return {q["qid"]: 1.0 if int(q["qid"][-1]) % 2 == 0 else 0.0 for q in questions}


@pytest.fixture(scope="module")
def study():
    items = _items(40)
    labelled, pool = items[:30], items[30:]
    states = run_search(labelled, {r: _victim() for r in ("proxy", "semantic", "victim")}, SETTINGS)
    records = search_records(states)
    cell = {"dataset": "toy", "proxy": "p", "victim": "v"}
    summary = {"proxy": "p", "victim": "v", "semantic": "p"}
    settings = {
        "kind": "trained",
        "threshold": 0.5,
        "model": None,
        "test_fraction": 0.2,
        "validation_fraction": 0.1,
        "prompt_models": ["judge-a"],
    }
    questions = {q["qid"]: {**q, "dataset": "toy"} for q in items}
    rows, metrics, scored_pool = run_classifier(
        [(cell, records, summary)], questions, settings, 0, _embed, _ask, {}
    )
    return rows, metrics, scored_pool, records, pool


def test_classifier_study_reports_every_classifier_on_the_same_test_split(study):
    rows, metrics, _, _, _ = study
    labels = {r["qid"]: r["label"] for r in rows}
    assert labels == {q: int(int(q[1:]) % 2 == 1) for q in labels}  # fragile = odd = perturbable
    assert metrics["splits"] == {"train": 21, "validation": 3, "test": 6}
    study_metrics = metrics["study"]
    assert set(study_metrics) == {NO_CLASSIFIER, TRAINED, "prompt:judge-a"}
    test = [r for r in rows if r["split"] == "test"]
    base_rate = sum(r["label"] for r in test) / len(test)
    # No classifier keeps everything: recall 1, precision = the base rate of perturbable questions.
    assert study_metrics[NO_CLASSIFIER]["test"]["recall"] == 1.0
    assert study_metrics[NO_CLASSIFIER]["test"]["precision"] == pytest.approx(base_rate)
    # The trained classifier learned the informative feature; the even-digit prompt classifier is wrong on
    # every perturbable question (odd digits).
    assert study_metrics[TRAINED]["test"]["f_beta"] == 1.0
    assert study_metrics["prompt:judge-a"]["test"]["recall"] == 0.0
    # The configured classifier (trained) drives the old top-level metrics, on the same test split.
    assert metrics["n_test"] == 6 and metrics["f_beta"] == 1.0


def test_pool_is_every_question_the_classifier_did_not_train_on_and_selection_keeps_the_kept_ones(study):
    rows, _, pool, _, unlabelled = study
    held_out = {r["qid"] for r in rows if r["split"] != "train"}
    assert {r["qid"] for r in pool} == {q["qid"] for q in unlabelled} | held_out
    assert not held_out & {r["qid"] for r in rows if r["split"] == "train"}
    fragile = {r["qid"] for r in pool if int(r["qid"][1:]) % 2}
    assert {r["qid"] for r in pool if r["p"] >= 0.5} == fragile
    chosen = select_questions(pool, 3, 0.5, 1)
    assert len(chosen["selected"]) == 3 and set(chosen["selected"]) <= fragile
    assert len(chosen["random"]) == 3 and set(chosen["random"]) <= {r["qid"] for r in pool}
    # fewer kept than asked: all kept ones
    assert set(select_questions(pool, 50, 0.5, 1)["selected"]) == fragile


def _write_summary(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summarize_search(records, {})), encoding="utf-8")
    return str(path)


def test_filter_cost_table_compares_selected_with_random_questions(tmp_path):
    fragile = [q for q in _items(8) if "fragile" in q["question"]]
    mixed = _items(8)
    paths = []
    for selection, items in (("selected", fragile), ("random", mixed)):
        states = run_search(items, {r: _victim() for r in ("proxy", "semantic", "victim")}, SETTINGS)
        cell = tmp_path / f"results/cdv/toy.{selection}/p/v/search.summary.json"
        paths.append(_write_summary(cell, search_records(states)))
    table = paper_report.filter_cost_table(paths).set_index(["dataset", "selection"])
    assert table.loc[("toy", "with_filter"), "success_rate"] == 1.0
    assert table.loc[("toy", "without_filter"), "success_rate"] == 0.5
    assert table.loc[("all", "with_filter"), "questions"] == len(fragile)
    # Tokens per perturbed question recomputed from the selected questions' summary: all tokens / successes.
    summary = json.loads(pathlib.Path(paths[0]).read_text(encoding="utf-8"))
    assert table.loc[("toy", "with_filter"), "tokens_per_perturbed_question"] == pytest.approx(
        summary["tokens_total"] / summary["successful_perturbations"]
    )


def test_vs_paper_puts_the_run_beside_each_published_value_and_leaves_gaps_blank(tmp_path):
    values = tmp_path / "values.csv"
    values.write_text(
        "# a comment line\n"
        "table,experiment,dataset,model,column,value,value_high,source\n"
        "Table 3,filter_cost,all,with_filter,success_rate,0.82,,test value\n"
        "Table 1,scale_up,all,m,acc_perturbed,0.1,0.3,test range\n"
        "Table 7,classifier_study,all,trained,f0.5,0.7,,not in this run\n"
        "Table 4,mitigation,A,m,acc_perturbed_mitigated,0.5,,test value\n"
        "Figure 2,self_search[v2],B,m,acc_perturbed,0.5,,test value\n",
        encoding="utf-8",
    )
    built = {
        "cdv_filter_cost": pd.DataFrame(
            [{"dataset": "all", "selection": "with_filter", "success_rate": 0.75}]
        ),
        "cdv_experiments": pd.DataFrame(
            [
                {
                    "experiment": "scale_up",
                    "dataset": d,
                    "model": "m",
                    "acc_original": 0.9,
                    "acc_perturbed": a,
                }
                | {"acc_original_paired": 0.9, "delta": 0.9 - a}
                for d, a in (("A", 0.2), ("B", 0.3))
            ]
        ),
    }
    built["cdv_experiments"] = pd.concat(
        [
            built["cdv_experiments"].assign(proxy="p", victim="v"),
            pd.DataFrame(
                [
                    {"experiment": "self_search", "dataset": "B", "proxy": v, "victim": v, "model": "m"}
                    | {"acc_original": 0.9, "acc_original_paired": 0.9, "acc_perturbed": a, "delta": 0.9 - a}
                    for v, a in (("v1", 0.6), ("v2", 0.3))
                ]
            ),
        ]
    )
    built["cdv_mitigation"] = pd.DataFrame(
        [{"dataset": "A", "proxy": "p", "victim": "v", "model": "m", "acc_perturbed_mitigated": 0.4}]
    )
    table = paper_report.vs_paper_table(
        paper_report.read_paper_values(values), paper_report.run_values(built)
    ).set_index("table")
    assert table.loc["Table 3", "run"] == 0.75
    assert table.loc["Table 3", "run_minus_paper"] == pytest.approx(0.75 - 0.82)
    assert table.loc["Table 1", "run"] == pytest.approx(0.25)  # the mean over datasets
    assert bool(table.loc["Table 1", "within_range"]) is True
    assert pd.isna(table.loc["Table 7", "run"])
    assert table.loc["Table 4", "run"] == 0.4
    assert table.loc["Figure 2", "run"] == pytest.approx(0.3)  # victim v2's row, not v1's


def test_a_blank_scorecard_row_says_why(tmp_path):
    values = tmp_path / "values.csv"
    values.write_text(
        "table,experiment,dataset,model,column,value,source\n"
        "Table 3,filter_cost,all,with_filter,success_rate,0.82,t\n"
        "Table 3,filter_cost,all,without_filter,success_rate,0.59,t\n"
        "Table 3,filter_cost,MMLU,with_filter,success_rate,0.8,t\n"
        "Table 7,classifier_study,all,none,precision,0.5,t\n",
        encoding="utf-8",
    )
    # the run's cost table: a rate over no searched question is undefined (NaN), MMLU is not in it
    built = {
        "cdv_filter_cost": pd.DataFrame(
            [
                {"dataset": "all", "selection": "with_filter", "success_rate": 0.75},
                {"dataset": "all", "selection": "without_filter", "success_rate": float("nan")},
            ]
        )
    }
    table = paper_report.vs_paper_table(
        paper_report.read_paper_values(values), paper_report.run_values(built)
    ).set_index(["table", "dataset", "model"])
    assert table.loc[("Table 3", "all", "with_filter"), "why"] == ""
    assert table.loc[("Table 3", "all", "without_filter"), "why"].startswith(
        "undefined in this run: filter_cost"
    )
    assert table.loc[("Table 3", "MMLU", "with_filter"), "why"].startswith(
        "not in this run: filter_cost has no dataset=MMLU"
    )
    assert table.loc[("Table 7", "all", "none"), "why"].startswith(
        "not in this run: no classifier_study values"
    )


def test_each_published_row_of_a_small_run_gets_its_reason(study, tmp_path):
    """The published values file against a small run's results, built by the tables' own code: Table 3
    from two searches (the filtered questions all fail before the search, so that selection's rates are
    over no searched question), Table 7 from the toy classifier study (none of the paper's classifiers),
    and nothing else (no DPO, release, transfer, ... tables)."""
    paths = []
    for selection, victim in (
        ("selected", ScriptedModel(correct=lambda contexts, q: 0)),
        ("random", _victim()),
    ):
        states = run_search(_items(6), {r: victim for r in ("proxy", "semantic", "victim")}, SETTINGS)
        path = tmp_path / f"results/cdv/toy.{selection}/p/v/search.summary.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summarize_search(search_records(states), {"victim": PRICE})))
        paths.append(str(path))
    metrics = tmp_path / "classifier_metrics.json"
    metrics.write_text(json.dumps(study[1]), encoding="utf-8")
    built = {
        "cdv_filter_cost": paper_report.filter_cost_table(paths),
        "cdv_classifier_study": paper_report.classifier_study_table(str(metrics)),
    }
    paper = paper_report.read_paper_values(ROOT / "resources" / "cdv" / "paper_values.csv")
    table = paper_report.vs_paper_table(paper, paper_report.run_values(built))
    # The run's cells as the tables hold them: (dataset, selection or classifier) -> columns.
    study_test = built["cdv_classifier_study"].query("split == 'test'").assign(dataset="all")
    cells = {
        "filter_cost": built["cdv_filter_cost"].set_index(["dataset", "selection"]),
        "classifier_study": study_test.set_index(["dataset", "classifier"]),
    }

    def reason(row) -> str:
        cell = cells.get(row["experiment"])
        if cell is None:
            return f"not in this run: no {row['experiment']} values"
        if (row["dataset"], row["model"]) not in cell.index:
            return (
                f"not in this run: {row['experiment']} has no dataset={row['dataset']}, model={row['model']}"
            )
        if pd.isna(cell.loc[(row["dataset"], row["model"]), row["column"]]):
            return f"undefined in this run: {row['experiment']}"
        return ""

    for row in table.to_dict("records"):
        expected = reason(row)
        assert row["why"].startswith(expected) and (row["why"] == "") == (expected == ""), row
        assert pd.isna(row["run"]) == (expected != ""), row
    # Each reason occurs: Table 3's with-filter rates are undefined, its without-filter row is the run's;
    # Table 7's baseline (no classifier) is the run's, its named classifiers are not; Table 5 is not run.
    why = table.set_index(["experiment", "model", "column"])["why"]
    assert why[("filter_cost", "with_filter", "success_rate")].startswith("undefined in this run")
    assert why[("filter_cost", "without_filter", "success_rate")] == ""
    assert why[("classifier_study", NO_CLASSIFIER, "precision")] == ""
    assert (
        why[("classifier_study", "prompt:gpt-4o", "precision")]
        .iloc[0]
        .startswith("not in this run: classifier_study has no dataset=all, model=prompt:gpt-4o, precision")
    )
    assert why[("dpo", "google/gemma-2-2b-it", "accuracy_before")].startswith(
        "not in this run: no dpo values"
    )


def test_a_values_file_without_the_columns_is_a_one_line_error(tmp_path):
    bad = tmp_path / "values.csv"
    bad.write_text("table,value\nTable 1,0.5\n", encoding="utf-8")
    with pytest.raises(StressprobeError, match="missing column"):
        paper_report.read_paper_values(bad)


@pytest.mark.slow
def test_lora_classifier_trains_on_the_training_split_and_is_scored_like_the_others(study, tmp_path):
    pytest.importorskip("peft", reason="the `dpo` extra (peft, transformers) is not installed")
    from stressprobe.cdv.lora_classifier import lora_metrics, train_lora_classifier
    from tests.support.toy_hf import toy_model_and_tokenizer

    rows = study[0]
    questions = {q["qid"]: q for q in _items(40)}
    model, tokenizer = toy_model_and_tokenizer([q["question"] for q in questions.values()], classifier=True)
    settings = {"learning_rate": 1e-4, "epochs": 5, "rank": 4}
    scores = train_lora_classifier(
        model, tokenizer, rows, questions, settings, str(tmp_path), 0, max_steps=2, use_cpu=True
    )
    assert set(scores) == {r["qid"] for r in rows}
    # Each score is the trained (adapted) model's softmax p of label 1, recomputed here for two questions.
    import torch

    for qid in sorted(scores)[:2]:
        with torch.no_grad():
            logits = model(**tokenizer(questions[qid]["question"], return_tensors="pt")).logits[0]
        assert scores[qid] == pytest.approx(float(torch.softmax(logits.float(), dim=-1)[1]), rel=1e-5)
    metrics = lora_metrics(rows, scores, 0.5)
    assert set(metrics) == {"train", "validation", "test"} and metrics["test"]["n"] == 6
    test = [r for r in rows if r["split"] == "test"]
    kept = [scores[r["qid"]] >= 0.5 for r in test]
    hits = sum(k and r["label"] for k, r in zip(kept, test, strict=True))
    assert metrics["test"]["precision"] == (hits / sum(kept) if sum(kept) else None)
    assert metrics["test"]["recall"] == hits / sum(r["label"] for r in test)


def test_classifier_study_table_lists_lora_classifiers_beside_the_others(study, tmp_path):
    _, metrics, _, _, _ = study
    metrics_path, lora_path = tmp_path / "metrics.json", tmp_path / "lora.json"
    metrics_path.write_text(json.dumps(metrics), encoding="utf-8")
    lora = {
        "classifier": "lora:org/model",
        "study": {"test": {"n": 6, "positives": 3, "unanswered": 0} | _prf(0.5, 1.0)},
    }
    lora_path.write_text(json.dumps(lora), encoding="utf-8")
    table = paper_report.classifier_study_table(str(metrics_path), [str(lora_path)])
    test = table[table["split"] == "test"].set_index("classifier")
    assert set(test.index) == {NO_CLASSIFIER, TRAINED, "prompt:judge-a", "lora:org/model"}
    assert test.loc["lora:org/model", "precision"] == 0.5 and test.loc[TRAINED, "f0.5"] == 1.0


def _prf(precision, recall):
    return {
        "precision": precision,
        "recall": recall,
        "f_beta": 1.25 * precision * recall / (0.25 * precision + recall),
    }


def test_an_original_the_victim_already_fails_is_not_labelled_and_is_in_the_pool_as_never_trained_on():
    items = _items(6) + [make_item("doomed", question="A doomed question?")]
    victim = ScriptedModel(
        correct=lambda contexts, q: 0 if "doomed" in q or (contexts and "fragile" in q) else 3
    )
    states = run_search(items[3:], {r: victim for r in ("proxy", "semantic", "victim")}, SETTINGS)
    settings = {
        "kind": "trained",
        "threshold": 0.5,
        "model": None,
        "test_fraction": 0.3,
        "validation_fraction": 0,
        "prompt_models": [],
    }
    rows, _, pool = run_classifier(
        [
            (
                {"dataset": "toy", "proxy": "p", "victim": "v"},
                search_records(states),
                {"proxy": "p", "victim": "v", "semantic": "p"},
            )
        ],
        {q["qid"]: q for q in items},
        settings,
        0,
        _embed,
        _ask,
        {},
    )
    assert "doomed" not in {r["qid"] for r in rows}
    held_out = {r["qid"] for r in rows if r["split"] != "train"}
    assert {r["qid"] for r in pool} == {q["qid"] for q in items[:3]} | {"doomed"} | held_out


def test_the_cost_experiment_has_questions_to_draw_at_the_papers_shape():
    # config/paper.yaml as the rehearsal scales it: four datasets whose every question the scale-up's label
    # cell searches (the authors' 300-question files, n: null; 12 here), every original labelled
    # (failed_originals: positive), 9 % validation and 10 % test, n questions per selection and dataset.
    datasets = ["MMLU", "CommonsenseQA", "OpenbookQA", "TruthfulQA"]
    questions, cells = {}, []
    for dataset in datasets:
        items = [{**q, "qid": f"{dataset}-{q['qid']}", "dataset": dataset} for q in _items(12)]
        questions |= {q["qid"]: q for q in items}
        records = search_records(
            run_search(items, {r: _victim() for r in ("proxy", "semantic", "victim")}, SETTINGS)
        )
        cell = {"dataset": dataset, "proxy": "gpt-4o-mini", "victim": "gpt-4o-mini"}
        cells.append(
            (cell, records, {"proxy": "gpt-4o-mini", "victim": "gpt-4o-mini", "semantic": "gpt-4o-mini"})
        )
    settings = {
        "kind": "trained",
        "threshold": 0.5,
        "model": None,
        "validation_fraction": 0.09,
        "test_fraction": 0.1,
        "prompt_models": [],
        "failed_originals": "positive",
    }
    rows, _, pool = run_classifier(cells, questions, settings, 42, _embed, _ask, {})
    assert len({r["qid"] for r in rows}) == len(questions)  # the scale-up labelled every question
    trained_on = {r["qid"] for r in rows if r["split"] == "train"}
    assert pool and not trained_on & {r["qid"] for r in pool}
    for dataset in datasets:
        chosen = select_questions([r for r in pool if r["dataset"] == dataset], 1, 0.5, 42)
        assert len(chosen["random"]) == 1, dataset


def test_experiments_table_keeps_each_experiments_sample_and_prints_the_papers_delta(tmp_path):
    from stressprobe.io import write_jsonl

    questions = [make_item(f"q{i}") for i in range(4)]
    data = tmp_path / "results/cdv/data/toy.jsonl"
    data.parent.mkdir(parents=True)
    write_jsonl(data, questions)
    small = experiment_qids(questions, 2, 0)

    def record(qid, condition, correct):
        return {"qid": qid, "condition": condition, "correct": correct, "status": "ok"}

    # Every original right; a perturbed version of each question, wrong only for the small sample's ones;
    # Prompt-only wrong everywhere.
    records = [record(q["qid"], "original", True) for q in questions]
    records += [record(q["qid"], "perturbed", q["qid"] not in small) for q in questions]
    records += [record(q["qid"], "prompt_only", False) for q in questions]
    evals = tmp_path / "results/cdv/toy/a/a/eval/m.jsonl"
    evals.parent.mkdir(parents=True)
    write_jsonl(evals, records)
    cell = [{"proxy": "a", "victim": "a"}]
    experiments = {"small": {"n": 2, "cells": cell}, "large": {"n": 4, "cells": cell}}
    # Table 4: under the focus instruction every perturbed question is answered right
    mitigation = tmp_path / "results/cdv/toy/a/a/mitigation/m.jsonl"
    mitigation.parent.mkdir(parents=True)
    write_jsonl(mitigation, [record(q["qid"], "perturbed", True) for q in questions])
    table = paper_report.experiments_table(
        experiments, [str(evals)], [str(data)], 0, [str(mitigation)]
    ).set_index("experiment")
    assert (
        table.loc["small", "acc_perturbed_mitigated"] == 1.0 and table.loc["small", "mitigation_diff"] == 1.0
    )
    assert table.loc["large", "mitigation_diff"] == 0.5  # on the experiment's own sample
    assert table.loc["small", "n_original"] == 2 and table.loc["large", "n_original"] == 4
    assert table.loc["small", "acc_perturbed"] == 0.0 and table.loc["large", "acc_perturbed"] == 0.5
    assert table.loc["small", "delta"] == 1.0 and table.loc["large", "delta"] == 0.5  # original - perturbed
    assert table.loc["large", "acc_prompt_only"] == 0.0 and pd.isna(table.loc["large", "acc_elaborated"])


def test_study_figures_draw_from_their_tables(study, tmp_path):
    from stressprobe.plots import save_figure

    _, metrics, _, _, _ = study
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(metrics), encoding="utf-8")
    figure = paper_figures.classifier_study_figure(
        paper_report.classifier_study_table(str(path)), FIGURE_OPTIONS
    )
    assert len(figure.axes[0].patches) == 3 * 3  # three classifiers x precision, recall, F0.5
    table = pd.DataFrame(
        [
            {"experiment": "self_search", "dataset": d, "proxy": v, "victim": v, "model": m}
            | {"acc_original": 0.9, "acc_perturbed": 0.2}
            for d in ("A", "B")
            for v in ("v1", "v2")
            for m in ("m1", "m2", "m3")
        ]
    )
    scale_up = table[table["victim"] == "v1"].assign(experiment="scale_up")
    figure = paper_figures.experiments_figure(pd.concat([table, scale_up]), FIGURE_OPTIONS)
    # Figure 2: a panel per self-search cell; Figure 6: the one-cell scale-up pooled and per dataset
    titles = ["scale_up", "scale_up: A", "scale_up: B", "self_search[v1]", "self_search[v2]"]
    assert [ax.get_title() for ax in figure.axes] == titles
    assert len(figure.axes[0].patches) == 2 * 3
    save_figure(figure, tmp_path / "f.png", tmp_path / "f.pdf", dpi=50)
    assert (tmp_path / "f.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("cdv", "key"),
    [
        (
            {"experiments": {"x": {"n": 5, "cells": [{"proxy": "smollm2-135m", "victim": "nope"}]}}},
            "experiments.x.cells[0].victim",
        ),
        ({"classifier": {"prompt_models": ["nope"]}}, "classifier.prompt_models[0]"),
        ({"classifier": {"cost_study": {"enabled": True, "proxy": "nope"}}}, "classifier.cost_study.proxy"),
        ({"classifier": {"table2": {"victims": ["nope"]}}}, "classifier.table2.victims[0]"),
        ({"dpo": {"compare_models": ["nope"]}}, "dpo.compare_models[0]"),
        ({"benchmark": {"models": ["nope"]}}, "benchmark.models[0]"),
        ({"eval": {"model_max_tokens": {"nope": 10}}}, "eval.model_max_tokens.nope"),
    ],
)
def test_an_unknown_model_in_the_experiments_is_a_one_line_config_error(cdv, key):
    from stressprobe.config import validate_config
    from tests.support.helpers import ROOT

    config = {"cdv": cdv}  # the default registry: the demo model
    with pytest.raises(StressprobeError, match=rf"cdv\.{re.escape(key)}': model 'nope'"):
        validate_config(config, ROOT / "workflow" / "schemas" / "config.schema.yaml")


def test_table3_cost_is_per_perturbed_question_with_the_relative_changes(tmp_path):
    fragile = [q for q in _items(8) if "fragile" in q["question"]]
    paths = []
    for selection, items in (("selected", fragile), ("random", _items(8))):
        states = run_search(items, {r: _victim() for r in ("proxy", "semantic", "victim")}, SETTINGS)
        records = search_records(states)
        path = tmp_path / f"results/cdv/toy.{selection}/p/v/search.summary.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(summarize_search(records, {"proxy": PRICE, "semantic": PRICE, "victim": PRICE}))
        )
        paths.append(str(path))
    table = paper_report.filter_cost_table(paths).set_index(["dataset", "selection"])
    row, base = table.loc[("all", "with_filter")], table.loc[("all", "without_filter")]
    # the caption's Cost/Ques.: total cost / successfully perturbed questions (not / questions with one)
    assert row["perturbed_questions"] > row["with_success"]
    assert row["usd_per_perturbed_question"] == pytest.approx(row["usd"] / row["perturbed_questions"])
    expected = (row["input_tokens"] * 0.15 + row["output_tokens"] * 0.6) / 1e6
    assert row["usd"] == pytest.approx(expected)
    assert row["success_rate_relative_increase"] == pytest.approx(
        row["success_rate"] / base["success_rate"] - 1
    )
    assert pd.isna(base["success_rate_relative_increase"])


def test_table2_filters_other_victims_searches_with_the_classifiers_scores():
    from stressprobe.cdv.classifier import transfer_effect

    def root(qid, flag=None):
        return {"qid": qid, "depth": 0, "status": "root", "flag": flag}

    def success(qid):
        return {"qid": qid, "depth": 1, "status": "success", "flag": None}

    records = [
        root("a"),
        success("a"),
        root("b"),
        root("c"),
        success("c"),
        root("d"),
        root("e", "victim_fails_original"),
    ]
    scores = {"a": 0.9, "b": 0.2, "c": 0.6}  # d unscored: kept and counted
    (row,) = transfer_effect([({"dataset": "X", "proxy": "v", "victim": "v"}, records)], scores, 0.5)
    # Unseen questions only: a (trained on) and b left out; c a success kept, d unscored and kept.
    cell = {"dataset": "X", "proxy": "v", "victim": "v"}
    (unseen,) = transfer_effect([(cell, records)], scores, 0.5, {"a", "b"})
    assert [unseen[k] for k in ("searched", "successes", "kept", "kept_successes", "excluded")] == [
        2,
        1,
        2,
        1,
        2,
    ]
    assert unseen["success_rate_without_filter"] == 1 / 2 and unseen["success_rate_with_filter"] == 1 / 2
    assert (row["searched"], row["successes"], row["kept"], row["kept_successes"], row["unscored"]) == (
        4,
        2,
        3,
        2,
        1,
    )
    assert row["success_rate_without_filter"] == 0.5 and row["success_rate_with_filter"] == pytest.approx(
        2 / 3
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["classifier"].update(filter_with="lora:org/absent"),
            r"cdv\.classifier\.filter_with: lora:org/absent is not one of cdv\.classifier\.lora\.base_models",
        ),
        (
            lambda c: c["classifier"]["table2"].update(victims=["llama-3.1-8b"]),
            r"cdv\.classifier\.table2\.victims: llama-3\.1-8b has no self-search cell",
        ),
    ],
)
def test_a_filter_or_table2_the_grid_cannot_serve_is_a_one_line_error(tmp_path, change, message):
    import yaml

    from tests.support.paper_dag import PAPER_CONFIG, dry_run, make_paper_workdir

    config = yaml.safe_load(PAPER_CONFIG.read_text(encoding="utf-8"))
    change(config["cdv"])
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    proc, _, _ = dry_run(make_paper_workdir(tmp_path / "work"), config_path=path)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1 and re.search(message, errors[0]), proc.stderr[-2000:]


def test_vs_paper_maps_the_value_ablation_table2_table8_and_table4s_diff(tmp_path):
    values = tmp_path / "values.csv"
    values.write_text(
        "table,experiment,dataset,model,column,value,value_high,source\n"
        "Section 4.4,value_ablation,all,gamma0,success_rate,0.57,,test\n"
        "Table 2,classifier_transfer,all,gpt-4o,success_rate_with_filter,0.723,,test\n"
        "Table 8,human_eval,MMLU,all,semantic_equivalence,0.935,,test\n"
        "Table 4,mitigation,all,m,mitigation_diff,0.026,,test\n",
        encoding="utf-8",
    )
    built = {
        "cdv_value_ablation": pd.DataFrame(
            [{"value": "gamma0", "success_rate": r} for r in (0.4, 0.6)]
            + [{"value": "paper", "success_rate": 0.9}]
        ),
        "cdv_classifier_transfer": pd.DataFrame([{"victim": "gpt-4o", "success_rate_with_filter": 0.7}]),
        "cdv_human_eval": pd.DataFrame(
            [{"dataset": "MMLU", "semantic_equivalence": 90.0, "answer_consistency": 95.0}]
        ),
        "cdv_mitigation": pd.DataFrame(
            [
                {"dataset": d, "proxy": "p", "victim": "v", "model": "m"}
                | {"acc_perturbed": 0.2, "acc_perturbed_mitigated": 0.2 + diff}
                for d, diff in (("A", 0.02), ("B", 0.04))
            ]
        ),
    }
    table = paper_report.vs_paper_table(
        paper_report.read_paper_values(values), paper_report.run_values(built)
    ).set_index("table")
    assert table.loc["Section 4.4", "run"] == pytest.approx(0.5)  # the mean of the cells' rates
    assert table.loc["Table 2", "run"] == 0.7
    assert table.loc["Table 8", "run"] == pytest.approx(0.9)  # percent -> fraction
    assert table.loc["Table 4", "run"] == pytest.approx(0.03)  # Enh. - Orig., mean over datasets
