"""The CDV tree search on a scripted model: values, queue, early stopping, budgets, bad replies."""

import math
from dataclasses import replace

import pytest
import yaml

from stressprobe.cdv.prompt_file import OwnPrompts
from stressprobe.cdv.search import (
    SearchSettings,
    is_monotone,
    node_value,
    perturbed_records,
    run_search,
    search_records,
    summarize_search,
)
from stressprobe.config import validate_config
from stressprobe.errors import StressprobeError
from tests.support.cdv_scripted import CONTEXT, ScriptedModel, make_item
from tests.support.helpers import ROOT

# The authors'-code limits keep these trees small; the paper's loop (until the queue is empty) has its own tests.
SETTINGS = SearchSettings(
    samples=5, limits="authors_code", max_expansions=10, max_candidates=None, monotone_levels=3
)
PAPER = SearchSettings()


def search(model, items, settings=SETTINGS, perturbability=None):
    states = run_search(items, {"proxy": model, "semantic": model, "victim": model}, settings, perturbability)
    return search_records(states), states


def by_id(records):
    return {r["node_id"]: r for r in records}


def test_node_value_formula():
    assert node_value(0.4, 2, 2.0, 1.0) == math.exp(2.0 / 0.4) / 2
    assert node_value(1.0, 1, 3.0, 2.0) == math.exp(3.0)
    assert node_value(0.2, 1, 2, 1) > node_value(0.4, 1, 2, 1) > node_value(0.4, 2, 2, 1)


def test_values_recorded_and_r_measured_on_the_nodes_own_question():
    # Context toward C halves the victim's accuracy, toward B/D it does nothing: siblings must differ.
    def correct(contexts, question):
        return 5 - 2 * contexts.count("C")

    model = ScriptedModel(correct=correct)
    records, _ = search(model, [make_item("q1")], replace(SETTINGS, max_expansions=2))
    for record in records:
        expected_r = correct(CONTEXT.findall(record["question"]), record["question"]) / 5
        assert record["success_rate"] == expected_r, record["node_id"]
        if record["depth"] and record["success_rate"]:
            assert record["value"] == math.exp(2 / expected_r) * record["depth"] ** -1
    root = records[0]
    assert root["status"] == "root" and root["success_rate"] == 1.0 and root["value"] is None


def test_a_prefilled_victim_searches_the_same_tree():
    def correct(contexts, question):
        return 5 - 2 * contexts.count("C")

    plain, _ = search(ScriptedModel(correct=correct), [make_item("q1")], replace(SETTINGS, max_expansions=2))
    model = ScriptedModel(correct=correct)
    prefilled, _ = search(
        model, [make_item("q1")], replace(SETTINGS, max_expansions=2, victim_prefill="Answer:")
    )
    assert all(r.prefill == "Answer:" for r in model.requests_of("victim"))
    keys = ("node_id", "status", "success_rate", "answers")
    assert [[r[k] for k in keys] for r in prefilled] == [[r[k] for k in keys] for r in plain]


def test_queue_expands_the_highest_value_node_next():
    # r depends on the target of the last context: C < D < B, so C's child is expanded second.
    rates = {"B": 4, "C": 1, "D": 3}

    def correct(contexts, question):
        return rates[contexts[-1]] if contexts else 5

    model = ScriptedModel(correct=correct)
    records, _ = search(model, [make_item("q1")], replace(SETTINGS, max_expansions=4, monotone_levels=99))
    depth1 = {r["target_option"]: r for r in records if r["depth"] == 1}
    expansion_order = list(dict.fromkeys(r["parent_id"] for r in records if r["parent_id"]))
    assert expansion_order[1] == depth1["C"]["node_id"]
    # Replay the queue: at every expansion the chosen node has the highest value among the queued ones.
    queueable = {r["node_id"]: r for r in records if r["status"] in ("queued", "expanded")}
    created_before = {nid: i for i, nid in enumerate(r["node_id"] for r in records)}
    first_child = {
        pid: min(created_before[r["node_id"]] for r in records if r["parent_id"] == pid)
        for pid in expansion_order
    }
    for step, chosen in enumerate(expansion_order[1:], start=1):
        waiting = [
            nid
            for nid in queueable
            if created_before[nid] < first_child[chosen] and nid not in expansion_order[:step]
        ]
        assert queueable[chosen]["value"] == max(queueable[nid]["value"] for nid in waiting)
    assert len(expansion_order) == 4


def test_diversity_limit_keeps_n1_shortest_successes_and_ends_the_branch():
    # Five choices: four children, all r = 0; the proxy writes contexts of different lengths.
    model = ScriptedModel(
        correct=lambda contexts, q: 0 if contexts else 5,
        proxy_text=lambda target, parent: f"[ctx {target}]" + " padding" * "BCDE".index(target),
    )
    records, states = search(model, [make_item("q1", n_choices=5)], replace(SETTINGS, diversity_n1=3))
    children = [r for r in records if r["depth"] == 1]
    assert len(children) == 4
    statuses = {r["target_option"]: r["status"] for r in children}
    assert statuses == {"B": "success", "C": "success", "D": "success", "E": "unexplored"}
    assert len(states[0].candidates) == 3
    assert not any(r["depth"] == 2 for r in records)


def test_prune_node_whose_children_are_all_correct():
    model = ScriptedModel(correct=lambda contexts, q: 5 if contexts else 4)
    records, _ = search(model, [make_item("q1")])
    children = [r for r in records if r["depth"] == 1]
    assert children and all(r["status"] == "pruned_all_correct" for r in children)
    assert max(r["depth"] for r in records) == 1


def test_monotone_branch_rule_prunes_after_l_increases():
    # r rises with depth: root 1/5, depth 1 2/5, depth 2 3/5, depth 3 4/5 (the sequence 0.2<0.4<0.6<0.8).
    model = ScriptedModel(correct=lambda contexts, q: min(1 + len(contexts), 5))
    records, _ = search(model, [make_item("q1")], replace(SETTINGS, monotone_levels=3, max_expansions=50))
    depth3 = [r for r in records if r["depth"] == 3]
    assert depth3 and all(r["status"] == "pruned_monotone" for r in depth3)
    assert all(r["status"] != "pruned_monotone" for r in records if r["depth"] < 3)
    assert max(r["depth"] for r in records) == 3
    # With l = 4 the same tree reaches depth 4 (where every child is correct: pruned_all_correct).
    records4, _ = search(model, [make_item("q1")], replace(SETTINGS, monotone_levels=4, max_expansions=50))
    assert any(r["depth"] == 4 for r in records4)
    assert not any(r["status"] == "pruned_monotone" for r in records4)


def test_is_monotone():
    assert is_monotone([0.2, 0.4, 0.6, 0.8], 3)
    assert not is_monotone([0.2, 0.4, 0.4, 0.8], 3)
    assert not is_monotone([0.4, 0.6, 0.8], 3)
    assert is_monotone([0.8, 0.2, 0.4], 1)


def test_budget_max_expansions():
    model = ScriptedModel(correct=lambda contexts, q: 3)
    records, states = search(
        model, [make_item("q1")], replace(SETTINGS, max_expansions=4, monotone_levels=99)
    )
    assert len({r["parent_id"] for r in records if r["parent_id"]}) == 4
    assert states[0].expansions == 4
    assert any(r["status"] == "queued" for r in records)


def test_budget_max_candidates_stops_the_question():
    # Only the context toward D succeeds; with max_candidates = 1 the search stops at the first success.
    model = ScriptedModel(correct=lambda contexts, q: 0 if "D" in contexts else 3)
    records, states = search(model, [make_item("q1")], replace(SETTINGS, max_candidates=1))
    assert len(states[0].candidates) == 1
    assert states[0].expansions == 1
    assert sum(r["status"] == "success" for r in records) == 1


def test_precheck_flags_questions_the_victim_already_fails():
    model = ScriptedModel(correct=lambda contexts, q: 0)
    records, states = search(model, [make_item("q1")])
    assert (
        len(records) == 1
        and records[0]["status"] == "success"
        and records[0]["flag"] == "victim_fails_original"
    )
    assert model.requests_of("proxy") == []
    assert perturbed_records(states) == []


def test_classifier_filter_skips_the_question_without_calls():
    model = ScriptedModel()
    records, _ = search(model, [make_item("q1"), make_item("q2")], perturbability={"q1": 0.2, "q2": 0.9})
    first = [r for r in records if r["qid"] == "q1"]
    assert len(first) == 1 and first[0]["flag"] == "classifier_filtered" and first[0]["success_rate"] is None
    assert all("q1" not in req.messages[-1][1] for req in model.requests_of("victim"))


def test_rounds_send_one_batch_per_kind_across_questions():
    model = ScriptedModel(correct=lambda contexts, q: 3)
    items = [make_item(f"q{i}") for i in range(3)]
    settings = replace(SETTINGS, max_expansions=2, monotone_levels=99)
    search(model, items, settings)
    kinds = [{r.messages[0][1][:20] for r in batch} for batch in model.batches if batch]
    assert all(len(k) == 1 for k in kinds)  # never two kinds in one batch
    proxy_batches = [b for b in model.batches if b and "background text" in b[0].messages[0][1]]
    assert len(proxy_batches) == 2  # two rounds, each one batch with every question's children
    assert all(len(b) == 3 * 3 for b in proxy_batches)


def test_victim_samples_use_n_and_no_greedy_request_without_the_audit():
    model = ScriptedModel(correct=lambda contexts, q: 0 if contexts == ["B"] else 2)
    records, _ = search(model, [make_item("q1")], replace(SETTINGS, max_expansions=1))
    victim = model.requests_of("victim")
    assert len(victim) == 4  # root + three children, all sampled
    assert all(r.n == 5 and r.temperature == SETTINGS.victim_temperature for r in victim)
    assert [r["status"] for r in records if r["depth"] == 1].count("success") == 1


def test_paper_rule_r0_with_a_right_greedy_answer_is_a_success_and_the_audit_only_reports():
    # Every sample wrong (r = 0) but the greedy answer right: the paper's rule counts the child a success.
    model = ScriptedModel(correct=lambda contexts, q: 0 if contexts else 5, greedy_correct=lambda c, q: True)
    records, _ = search(model, [make_item("q1")], PAPER)
    children = [r for r in records if r["depth"] == 1]
    assert len(children) == 3 and all(r["status"] == "success" and r["success_rate"] == 0 for r in children)
    assert all(r["greedy_audit"] is None for r in children)
    assert [r for r in model.requests_of("victim") if r.n == 1] == []
    # The opt-in audit asks each success once at the evaluation temperature and changes nothing else.
    audited = ScriptedModel(
        correct=lambda contexts, q: 0 if contexts else 5, greedy_correct=lambda c, q: True
    )
    with_audit, _ = search(audited, [make_item("q1")], replace(PAPER, greedy_audit=True))
    greedy = [r for r in audited.requests_of("victim") if r.n == 1]
    assert len(greedy) == 3 and all(r.temperature == PAPER.eval_temperature == 0.001 for r in greedy)
    assert [r["greedy_audit"] for r in with_audit if r["depth"] == 1] == ["right"] * 3
    keys = ("node_id", "status", "success_rate")
    assert [[r[k] for k in keys] for r in with_audit] == [[r[k] for k in keys] for r in records]
    summary = summarize_search(with_audit, {})
    assert summary["greedy_audit"] == {"right": 3} and summary["successful_perturbations"] == 3


def test_paper_loop_runs_until_the_queue_is_empty():
    # r = 0.8 down to depth 3, every depth-4 child right: 1 + 3 + 9 + 27 = 40 expansions, far past the
    # authors' code's 10, and the search stops only when nothing is left to expand.
    model = ScriptedModel(correct=lambda contexts, q: 4 if len(contexts) < 4 else 5)
    records, states = search(model, [make_item("q1")], PAPER)
    assert states[0].expansions == 40
    assert states[0].queue == [] and states[0].stop_reason == "queue_empty"
    assert not any(r["status"] == "queued" for r in records)
    assert {r["status"] for r in records if r["depth"] == 4} == {"pruned_all_correct"}
    assert records[0]["stop_reason"] == "queue_empty"
    assert records[0]["calls"] == sum(len(b) for b in model.batches)
    # The authors' code limits, as the named option, stop the same tree after 10 expansions.
    _, limited = search(model, [make_item("q1")], replace(PAPER, limits="authors_code"))
    assert limited[0].expansions == 10 and limited[0].stop_reason == "max_expansions"


def test_call_cap_stops_a_question_and_is_recorded():
    # r = 0.6 everywhere: no rule ever ends this tree, only the cap does.
    model = ScriptedModel(correct=lambda contexts, q: 3)
    cap = 50
    items = [make_item("q1"), make_item("q2")]
    records, states = search(model, items, replace(PAPER, max_calls_per_question=cap))
    for state in states:
        assert state.stop_reason == "call_cap" and state.queue
        # Checked before each expansion: the cap is passed by less than one expansion's calls (here 9).
        assert cap <= state.calls() < cap + PAPER.expansion_calls(4) and PAPER.expansion_calls(4) == 21
    summary = summarize_search(records, {})
    assert summary["call_cap_hit"] == 2 and summary["stop_reasons"] == {"call_cap": 2}


def test_reprompting_replaces_a_rejected_child_and_logs_every_try():
    tries: dict[str, int] = {}

    def proxy_text(target, parent):
        tries[target] = tries.get(target, 0) + 1
        if target == "B" and tries[target] == 1:
            return "[ctx B]" + " long" * 400  # too long on the first try only
        return f"[ctx {target}] try {tries[target]}"

    def semantic_text(user):
        # C's first try changes the answer; D's context always does.
        return "yes" if "[ctx C] try 1" in user or "[ctx D]" in user else "no"

    def model():
        tries.clear()
        return ScriptedModel(
            correct=lambda contexts, q: 0 if contexts else 5,
            proxy_text=proxy_text,
            semantic_text=semantic_text,
        )

    victim = model()
    records, _ = search(victim, [make_item("q1")], replace(PAPER, proxy_tries=3))
    child = {r["target_option"]: r for r in records if r["depth"] == 1}
    assert child["B"]["status"] == "success" and child["B"]["added_context"] == "[ctx B] try 2"
    assert [a["status"] for a in child["B"]["attempts"]] == ["discarded_length", "kept"]
    assert child["C"]["status"] == "success" and child["C"]["added_context"] == "[ctx C] try 2"
    assert [a["status"] for a in child["C"]["attempts"]] == ["discarded_semantic", "kept"]
    assert child["D"]["status"] == "discarded_semantic"
    assert [a["status"] for a in child["D"]["attempts"]] == ["discarded_semantic"] * 3
    assert [a["proxy_raw"] for a in child["D"]["attempts"]] == [f"[ctx D] try {i}" for i in (1, 2, 3)]
    # Each re-prompt is a new request (another seed): a cache cannot hand back the rejected text.
    assert [r.seed for r in victim.requests_of("proxy")] == [42, 42, 42, 43, 43, 43, 44]
    assert summarize_search(records, {})["reprompts"] == 1 + 1 + 2
    # One try only: the rejected children stay rejected.
    once, _ = search(model(), [make_item("q1")], replace(PAPER, proxy_tries=1))
    statuses = [r["status"] for r in once if r["depth"] == 1]
    assert statuses == ["discarded_length", "discarded_semantic", "discarded_semantic"]


def _unread_model():
    def victim_text(contexts, question):
        return "Reasoning that never ends" if contexts == ["B"] else None  # no answer line

    return ScriptedModel(correct=lambda contexts, q: 0 if contexts else 5, victim_text=victim_text)


def test_an_unread_answer_is_a_wrong_answer_by_default_as_in_eq5():
    records, states = search(_unread_model(), [make_item("q1")], replace(PAPER, victim_max_tokens=3))
    child = {r["target_option"]: r for r in records if r["depth"] == 1}
    # Scripted replies count 3 tokens per sample: with max_tokens 3 every unparsed sample was cut off.
    assert child["B"]["status"] == "success" and child["B"]["success_rate"] == 0
    assert child["B"]["unparsed"] == 5 and child["B"]["truncated"] == 5
    assert child["B"]["node_id"] in {n.node_id for n in states[0].candidates}
    summary = summarize_search(records, {})
    assert summary["successful_perturbations"] == 3 and summary["successes_with_unread"] == 1
    assert summary["unparsed_answers"] == 5 and summary["truncated_answers"] == 5
    assert summary["unparsed_nodes"] == 0


def test_under_the_strict_rule_unread_answers_never_make_a_success():
    strict = replace(PAPER, unread_answers="never_success")
    records, states = search(_unread_model(), [make_item("q1")], replace(strict, victim_max_tokens=3))
    child = {r["target_option"]: r for r in records if r["depth"] == 1}
    assert child["B"]["status"] == "unparsed" and child["B"]["unparsed"] == 5 and child["B"]["truncated"] == 5
    assert child["C"]["status"] == "success" and child["C"]["unparsed"] == 0
    assert child["B"]["node_id"] not in {n.node_id for n in states[0].candidates}
    summary = summarize_search(records, {})
    assert summary["unparsed_nodes"] == 1 and summary["truncated_answers"] == 5
    assert summary["unparsed_answers"] == 5 and summary["successful_perturbations"] == 2
    assert summary["successes_with_unread"] == 0
    # With a larger limit the same replies are unparsed, not truncated.
    records, _ = search(_unread_model(), [make_item("q1")], replace(strict, victim_max_tokens=64))
    b = next(r for r in records if r["target_option"] == "B")
    assert b["status"] == "unparsed" and b["unparsed"] == 5 and b["truncated"] == 0


def test_value_variants_of_the_ablation():
    assert node_value(0.4, 2, 2.0, 1.0, "gamma0") == math.exp(2.0 / 0.4)
    assert node_value(0.4, 2, 2.0, 1.0, "no_r") == 0.5
    assert node_value(0.2, 2, 2.0, 1.0, "no_r") == node_value(0.8, 2, 2.0, 1.0, "no_r")
    # Without r the queue no longer prefers the most promising child: expansion order follows creation.
    rates = {"B": 4, "C": 1, "D": 3}

    def correct(contexts, question):
        return rates[contexts[-1]] if contexts else 5

    orders = {}
    for variant in ("paper", "no_r"):
        records, _ = search(
            ScriptedModel(correct=correct),
            [make_item("q1")],
            replace(SETTINGS, max_expansions=2, monotone_levels=99, value=variant),
        )
        second = list(dict.fromkeys(r["parent_id"] for r in records if r["parent_id"]))[1]
        orders[variant] = next(r["target_option"] for r in records if r["node_id"] == second)
    assert orders == {"paper": "C", "no_r": "B"}


def test_bad_proxy_and_semantic_replies_are_counted_never_successes():
    def proxy_text(target, parent):
        return {"B": "", "C": "A. one\nB. two\nAnswer: B", "D": "[ctx D]"}[target]

    model = ScriptedModel(
        correct=lambda contexts, q: 0 if contexts else 5,
        proxy_text=proxy_text,
        semantic_text=lambda q: "Maybe.",
    )
    records, states = search(model, [make_item("q1")], replace(SETTINGS, max_expansions=1))
    status = {r["target_option"]: r for r in records if r["depth"] == 1}
    assert status["B"]["status"] == "discarded_proxy" and status["C"]["status"] == "discarded_proxy"
    assert status["D"]["status"] == "discarded_semantic" and status["D"]["semantic_ok"] is None
    assert status["D"]["semantic_verdict"] == "unclear"
    assert states[0].candidates == []
    summary = summarize_search(records, {})
    assert summary["status_counts"]["discarded_proxy"] == 2
    assert summary["status_counts"]["discarded_semantic"] == 1
    assert summary["successful_perturbations"] == 0


def test_semantic_no_and_length_bound_discard():
    model = ScriptedModel(
        correct=lambda contexts, q: 0 if contexts else 5,
        proxy_text=lambda target, parent: f"[ctx {target}]" + (" long" * 400 if target == "B" else ""),
        semantic_text=lambda user: "Yes, it changes." if "[ctx C]" in user else "no",
    )
    records, _ = search(model, [make_item("q1")], replace(SETTINGS, max_expansions=1))
    status = {r["target_option"]: r for r in records if r["depth"] == 1}
    assert status["B"]["status"] == "discarded_length" and status["B"]["length_ratio"] > 10
    assert status["C"]["status"] == "discarded_semantic" and status["C"]["semantic_ok"] is False
    assert status["D"]["status"] == "success" and status["D"]["semantic_ok"] is True
    # The length bound is checked before the semantic call: B never reached the semantic model.
    assert not any("long long" in r.messages[-1][1] for r in model.requests_of("semantic"))


def test_failed_calls_are_errors_not_successes():
    model = ScriptedModel(
        correct=lambda contexts, q: 0 if contexts else 5,
        fail=lambda request: request.n == 5 and "[ctx" in request.messages[-1][1],
    )
    records, states = search(model, [make_item("q1")], replace(SETTINGS, max_expansions=1))
    children = [r for r in records if r["depth"] == 1]
    assert children and all(r["status"] == "error" for r in children)
    assert states[0].candidates == []


def test_summary_counts_every_request_sent():
    model = ScriptedModel(correct=lambda contexts, q: 0 if contexts == ["C"] else 3)
    records, _ = search(model, [make_item("q1"), make_item("q2")], replace(SETTINGS, max_expansions=2))
    summary = summarize_search(records, {"victim": {"prompt_per_1m": 1.0, "completion_per_1m": 2.0}})
    sent = sum(len(b) for b in model.batches)
    assert summary["requests_total"] == sent
    victim = [r for b in model.batches for r in b if r.messages[0][1].startswith("You answer")]
    expected_cost = sum(10 * 1.0 / 1e6 + 3 * r.n * 2.0 / 1e6 for r in victim)
    assert math.isclose(summary["cost_usd"], expected_cost)
    assert summary["successful_perturbations"] == sum(1 for r in records if r["status"] == "success")


def _placed_search(position, seed=42):
    # Distinct texts per parent, so that each distraction gets its own draw; three levels deep.
    model = ScriptedModel(
        correct=lambda contexts, question: 4, proxy_text=lambda t, parent: f"[ctx {t}] {len(parent)}."
    )
    settings = replace(SETTINGS, max_expansions=4, seed=seed, prompts=OwnPrompts(position=position))
    records, _ = search(model, [make_item("q1")], settings)
    return records, model


@pytest.mark.parametrize("position", ["before", "after", "random"])
def test_a_nodes_distractions_accumulate_on_their_sides_around_the_verbatim_question(position):
    records, model = _placed_search(position)
    nodes, original = by_id(records), records[0]["question"]
    children = [r for r in records if r["depth"] and r["added_context"]]
    assert max(r["depth"] for r in children) >= 2
    for child in children:
        parent, added = nodes[child["parent_id"]]["question"], child["added_context"]
        assert child["question"].count(original) == 1
        # The parent's question is kept whole; the new distraction sits next to the original question on its
        # side (before: after the older ones put before it; after: at the end).
        if child["added_side"] == "before":
            assert child["question"] == parent.replace(original, f"{added}\n\n{original}")
        else:
            assert child["question"] == f"{parent}\n\n{added}"
    sides = {r["added_side"] for r in children}
    assert sides == ({"before", "after"} if position == "random" else {position})
    # The victim was asked exactly the recorded questions.
    asked = {r.messages[-1][1].split("\n\nA. ")[0] for r in model.requests_of("victim")}
    assert asked == {r["question"] for r in records if r["success_rate"] is not None}


def test_random_sides_are_the_same_on_a_rerun_and_follow_the_seed():
    first, again = _placed_search("random")[0], _placed_search("random")[0]
    assert [r["question"] for r in first] == [r["question"] for r in again]
    other = _placed_search("random", seed=7)[0]
    assert [r["added_side"] for r in first] != [r["added_side"] for r in other]


def test_the_schema_defaults_are_the_papers_search():
    config = validate_config({}, ROOT / "workflow" / "schemas" / "config.schema.yaml")["cdv"]
    settings = SearchSettings(**config["search"])  # what the search job builds from its params
    assert settings == SearchSettings()
    assert (settings.limits, settings.samples, settings.victim_max_tokens) == ("paper", 5, 1024)
    assert (settings.proxy_temperature, settings.greedy_audit) == (0.7, False)
    assert settings.unread_answers == "wrong"  # Eq. 5: an answer that is not the ground truth is wrong
    assert (config["eval"]["temperature"], config["eval"]["max_tokens"]) == (0.001, 1024)
    assert config["value_variants"] == []


def test_bad_search_settings_are_one_line_errors():
    for bad in ({"limits": "forever"}, {"value": "no_gamma"}, {"proxy_tries": 0}, {"unread_answers": "x"}):
        with pytest.raises(StressprobeError, match=r"^config cdv\."):
            SearchSettings(**bad)


def test_the_paper_config_searches_with_the_authors_limits_and_runs_the_ablation():
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text(encoding="utf-8"))
    cdv = validate_config(paper, ROOT / "workflow" / "schemas" / "config.schema.yaml")["cdv"]
    settings = SearchSettings(**cdv["search"])
    # Table 3: 175 / 59 and 236 / 82 perturbations per successful question, i.e. a stop at 3 successes.
    assert (settings.limits, settings.max_expansions, settings.max_candidates) == ("authors_code", 10, 3)
    assert settings.unread_answers == "wrong" and (settings.alpha, settings.gamma) == (2.0, 1.0)
    assert (settings.samples, settings.length_ratio_max, settings.diversity_n1) == (5, 10.0, 3)
    assert cdv["value_variants"] == ["gamma0", "no_r"] and cdv["value_variant_cells"] == "cost_random"


def test_root_depth_one_counts_depth_as_the_authors_code_and_expands_another_node():
    # Ten samples: C's child of the root has r = 0.4 and is expanded second; its own children have r = 0.5
    # at depth 2, B's sibling r = 0.6 at depth 1. V by hand (alpha 2, gamma 1): root at depth 0,
    # sibling e^(2/0.6) / 1 = 28.03 > grandchild e^(2/0.5) / 2 = 27.30; root at depth 1 (the authors'),
    # sibling e^(2/0.6) / 2 = 14.01 < grandchild e^(2/0.5) / 3 = 18.20. So the third expansion differs.
    rates = {"B": 6, "C": 4, "D": 9}

    def correct(contexts, question):
        if not contexts:
            return 10
        return rates[contexts[0]] if len(contexts) == 1 else 5

    third = {}
    for root_depth in (0, 1):
        settings = replace(SETTINGS, samples=10, max_expansions=3, monotone_levels=99, root_depth=root_depth)
        records, _ = search(ScriptedModel(correct=correct), [make_item("q1")], settings)
        order = list(dict.fromkeys(r["parent_id"] for r in records if r["parent_id"]))
        third[root_depth] = by_id(records)[order[2]]
        sibling = next(r for r in records if r["depth"] == 1 and r["target_option"] == "B")
        assert sibling["value"] == pytest.approx(math.exp(2 / 0.6) / (1 + root_depth), rel=1e-12)
        assert sibling["depth"] == 1  # the recorded depth keeps the root at 0 either way
    assert (third[0]["depth"], third[0]["target_option"]) == (1, "B")
    assert third[1]["depth"] == 2 and third[1]["value"] == pytest.approx(math.exp(2 / 0.5) / 3, rel=1e-12)


def test_evaluated_successes_every_one_or_the_first_and_failed_originals_included():
    # Contexts toward B and C succeed at depth 1 (two members of L); q2's original is already failed.
    model = ScriptedModel(correct=lambda contexts, q: 0 if contexts or "q2" in q else 5)
    items = [make_item("q1"), make_item("q2")]
    _, states = search(model, items, replace(SETTINGS, max_expansions=1))
    first_two = [n.node_id for n in states[0].candidates]
    assert len(first_two) == 3  # B, C and D all reach r = 0
    every = perturbed_records(states)
    assert [r["node_id"] for r in every] == first_two
    first = perturbed_records(states, evaluated="first_success")
    assert [r["node_id"] for r in first] == first_two[:1]
    included = perturbed_records(states, "first_success", "include")
    assert [r["node_id"] for r in included] == [first_two[0], "q2:0"]
    original = included[1]
    assert original["question"] == items[1]["question"] and original["depth"] == 0
    assert original["target_option"] is None


def test_bad_evaluated_or_root_depth_is_a_one_line_error():
    with pytest.raises(StressprobeError, match=r"cdv.search.evaluated: must be one of"):
        SearchSettings(evaluated="first")
    with pytest.raises(StressprobeError, match=r"cdv.search.root_depth: must be one of 0, 1"):
        SearchSettings(root_depth=2)
