"""CDV evaluation, baselines, classifier, DPO export and the success audit, on scripted models."""

import json
from dataclasses import replace

import numpy as np

from stressprobe.cdv.baselines import baseline_questions
from stressprobe.cdv.classifier import (
    filter_effect,
    fit_logit,
    outcome_labels,
    precision_recall_f,
    predict_logit,
    prompt_probabilities,
    split_keys,
)
from stressprobe.cdv.dpo import preference_pairs, split_pairs
from stressprobe.cdv.evaluate import accuracy_by_condition, eval_items, evaluate, paired_original_accuracy
from stressprobe.cdv.search import (
    SearchSettings,
    perturbed_records,
    run_search,
    search_records,
    wrong_answer,
)
from stressprobe.cdv.search_calls import audit_successes
from stressprobe.llm import Response
from tests.support.cdv_scripted import ScriptedModel, make_item

SETTINGS = SearchSettings(samples=3, limits="authors_code", max_expansions=2, max_candidates=None)


def searched(model, items):
    states = run_search(items, {"proxy": model, "semantic": model, "victim": model}, SETTINGS)
    return states, search_records(states)


def test_audit_passes_for_consistent_victim_and_fails_when_greedy_disagrees():
    model = ScriptedModel(correct=lambda contexts, q: 0 if "C" in contexts else 3)
    items = [make_item("q1"), make_item("q2")]
    _, records = searched(model, items)
    assert any(r["status"] == "success" for r in records)
    assert audit_successes(records, items, model, SETTINGS) == []
    # A victim that now answers every question right greedily: the audit must report every success.
    honest = ScriptedModel(correct=lambda contexts, q: 3, greedy_correct=lambda c, q: True)
    failures = audit_successes(records, items, honest, SETTINGS)
    assert {f["node_id"] for f in failures} == {r["node_id"] for r in records if r["status"] == "success"}


def test_audit_after_the_search_reports_what_the_in_search_audit_recorded():
    # Greedy answers right on the questions of q1 only: under the paper's rule those are successes too.
    model = ScriptedModel(
        correct=lambda contexts, q: 0 if "C" in contexts else 3, greedy_correct=lambda c, q: "q1" in q
    )
    items = [make_item("q1"), make_item("q2")]
    settings = replace(SETTINGS, greedy_audit=True)
    states = run_search(items, {"proxy": model, "semantic": model, "victim": model}, settings)
    records = search_records(states)
    right = {r["node_id"] for r in records if r["greedy_audit"] == "right"}
    assert right and all(r["qid"] == "q1" for r in records if r["node_id"] in right)
    assert {r["status"] for r in records if r["node_id"] in right} == {"success"}
    assert {f["node_id"] for f in audit_successes(records, items, model, settings)} == right


def test_evaluate_counts_unparsed_as_wrong_and_leaves_failed_calls_unscored():
    class Replies:
        def generate(self, requests):
            out = []
            for r in requests:
                text = r.messages[-1][1]
                if "broken" in text:
                    out.append(Response.failure("down"))
                elif "vague" in text:
                    out.append(Response(texts=["I am not sure."]))
                elif "long" in text:
                    out.append(Response(texts=["First, consider"], completion_tokens=r.max_tokens))
                else:
                    out.append(Response(texts=["So. Answer: A"]))
            return out

    questions = [
        make_item("q1"),
        make_item("q2", question="a vague one?"),
        make_item("q3", question="broken?"),
        make_item("q4", question="a long one?"),
    ]
    perturbed = [{**questions[0], "node_id": "q1:2", "question": "ctx\n\n" + questions[0]["question"]}]
    baselines = [
        {"qid": "q1", "kind": "elaborated", "question": "Longer q1?", "status": "ok"},
        {"qid": "q1", "kind": "prompt_only", "question": None, "status": "unparsed"},
    ]
    items = eval_items(questions, perturbed, baselines)
    assert [i["condition"] for i in items] == ["original"] * 4 + ["perturbed", "elaborated"]
    records = evaluate(Replies(), items, 32, 0, temperature=0.001)
    assert [r["status"] for r in records[:4]] == ["ok", "unparsed", "error", "truncated"]
    accuracy = accuracy_by_condition(records)
    # q3's call failed: out of n and the denominator, in `unanswered`; q2 (unparsed) and q4 (truncated)
    # were answered and count as wrong.
    assert accuracy["original"] == {
        "n": 3,
        "correct": 1,
        "unparsed": 2,
        "truncated": 1,
        "unanswered": 1,
        "accuracy": 1 / 3,
    }
    assert paired_original_accuracy(records) == 1.0
    mitigated = evaluate(Replies(), items[:1], 32, 0, mitigation=True)
    assert mitigated[0]["mitigation"] is True


def test_evaluate_reads_a_prefilled_answer_with_its_prefix():
    class Continues:
        def generate(self, requests):
            assert all(r.prefill == "Answer:" for r in requests)
            return [Response(texts=[" A"]) for _ in requests]

    (record,) = evaluate(Continues(), eval_items([make_item("q1")], [], []), 4, 0, prefill="Answer:")
    assert (record["answer"], record["correct"], record["raw"]) == ("A", True, "Answer: A")


def test_baselines_record_unusable_rewrites():
    class Rewriter:
        def generate(self, requests):
            return [
                Response(texts=["" if "Rewrite" in r.messages[-1][1] else "Some trivia."]) for r in requests
            ]

    records = baseline_questions(Rewriter(), [make_item("q1")], 32, 0.7, 0)
    by_kind = {r["kind"]: r for r in records}
    assert by_kind["elaborated"]["status"] == "unparsed" and by_kind["elaborated"]["question"] is None
    assert by_kind["prompt_only"]["question"].endswith(make_item("q1")["question"])


def test_outcome_labels_skip_unsearched_questions():
    model = ScriptedModel(correct=lambda contexts, q: 0 if ("B" in contexts or "fails" in q) else 3)
    items = [make_item("q1"), make_item("q2", question="This one fails?")]
    _, records = searched(model, items)
    assert outcome_labels(records) == {"q1": 1}
    # The authors' labels: q2's original, already failed, is easy to perturb (merge_data.py's Yes).
    assert outcome_labels(records, "positive") == {"q1": 1, "q2": 1}


def test_prompt_classifier_unclear_never_filters():
    class Classifier:
        def generate(self, requests):
            return [
                Response(
                    texts=[{"q1": "No.", "q2": "Yes", "q3": "Hmm"}[r.messages[-1][1].split("for ")[1][:2]]]
                )
                for r in requests
            ]

    p = prompt_probabilities(Classifier(), [make_item("q1"), make_item("q2"), make_item("q3")], 0)
    assert p == {"q1": 0.0, "q2": 1.0, "q3": 1.0}


def test_logit_learns_a_separable_direction_and_metrics():
    rng = np.random.default_rng(0)
    labels = np.array([0, 1] * 20)
    features = rng.normal(size=(40, 16)) + labels[:, None] * 3.0
    model = fit_logit(features, labels, max_components=4)
    p = predict_logit(model, features)
    assert ((p >= 0.5) == labels.astype(bool)).mean() > 0.9
    constant = fit_logit(features[:5], np.zeros(5, dtype=int))
    assert list(predict_logit(constant, features[:2])) == [0.0, 0.0]
    m = precision_recall_f([1, 1, 0, 0], [1, 0, 1, 0])
    assert m["precision"] == 0.5 and m["recall"] == 0.5 and abs(m["f_beta"] - 0.5) < 1e-12
    assert precision_recall_f([0, 0], [0, 0])["precision"] is None


def test_split_keys_is_seeded_and_disjoint():
    keys = [f"k{i}" for i in range(10)]
    train, test = split_keys(keys, 0.3, 1)
    assert set(train).isdisjoint(test) and sorted(train + test) == sorted(keys) and len(test) == 3
    assert split_keys(keys, 0.3, 1) == (train, test)


def test_filter_effect_counts_only_kept_questions():
    model = ScriptedModel(correct=lambda contexts, q: 0 if "C" in contexts else 3)
    _, records = searched(model, [make_item("q1"), make_item("q2")])
    effect = filter_effect(records, {"q1"}, {})
    assert effect["without_filter"]["questions"] == 2 and effect["with_filter"]["questions"] == 1
    q1_requests = sum(u["requests"] for r in records if r["qid"] == "q1" for u in r["tokens"].values())
    assert effect["with_filter"]["requests_total"] == q1_requests


def test_dpo_pairs_are_trl_shaped_and_split_by_question(tmp_path):
    model = ScriptedModel(correct=lambda contexts, q: 0 if contexts else 3)
    items = [make_item(f"q{i}") for i in range(6)]
    states, records = searched(model, items)
    perturbed = perturbed_records(states)
    greedy = {r["node_id"]: wrong_answer(r) for r in records if r["status"] == "success"}
    pairs = preference_pairs("demo", perturbed, [], greedy)
    assert len(pairs) == len(perturbed)
    train, test = split_pairs(pairs, 0.34, 0)
    assert train and test
    for pair in train + test:
        assert set(pair) == {"prompt", "chosen", "rejected"}
        assert pair["chosen"][0]["role"] == "assistant" and "Answer: A" in pair["chosen"][0]["content"]
        assert "Answer: B" in pair["rejected"][0]["content"]
        json.dumps(pair)

    def question_of(pair):
        return pair["prompt"][-1]["content"].split("\n\nA. ")[0].rsplit("\n\n", 1)[-1]

    assert {question_of(p) for p in train}.isdisjoint({question_of(p) for p in test})


def test_scripted_search_records_have_the_issue_fields():
    model = ScriptedModel(correct=lambda contexts, q: 1)
    _, records = searched(model, [make_item("q1")])
    required = {
        "qid",
        "node_id",
        "parent_id",
        "depth",
        "question",
        "target_option",
        "semantic_ok",
        "length_ratio",
        "success_rate",
        "answers",
        "value",
        "status",
        "tokens",
    }
    assert all(required <= set(r) for r in records)


def test_prompt_only_is_the_search_prompt_applied_once_or_the_projects_own():
    from stressprobe.cdv.baselines import prompt_only_target
    from stressprobe.cdv.prompts import PROXY_SYSTEM, proxy_messages

    class Recorder:
        def __init__(self):
            self.requests = []

        def generate(self, requests):
            self.requests += requests
            return [Response(texts=["Some trivia."]) for _ in requests]

    item = make_item("q1")
    paper = Recorder()
    (_, prompt_only) = baseline_questions(paper, [item], 32, 0.7, 5)
    target = prompt_only_target(item, 5)
    assert target != item["answer_index"] and prompt_only["target_option"] == "ABCD"[target]
    expected = proxy_messages(item["question"], item["choices"], item["answer_index"], target)
    assert paper.requests[1].messages == expected and paper.requests[1].temperature == 0.7
    own = Recorder()
    baseline_questions(own, [item], 32, 0.7, 5, prompt_only="own")
    assert own.requests[1].messages[0] == ("system", PROXY_SYSTEM)
    assert own.requests[1].messages != expected and "irrelevant background" in own.requests[1].messages[1][1]
