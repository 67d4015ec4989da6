"""What the CDV tree search writes: one record per node (search.jsonl), the successful perturbations
(perturbed.jsonl) and the cell's summary (the method: stressprobe.cdv.search)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from stressprobe.cdv.prompts import letter
from stressprobe.cdv.search_tree import EXTRACT, USAGE_ROLES, Node, QuestionState
from stressprobe.llm.usage import cost_usd
from stressprobe.scoring import UNANSWERED, is_unanswered


def node_record(node: Node, item: dict[str, Any]) -> dict[str, Any]:
    """One line of search.jsonl."""
    letters = [None if a is None else letter(a) for a in node.answers]
    return {
        "qid": node.qid,
        "node_id": node.node_id,
        "parent_id": node.parent_id,
        "depth": node.depth,
        "question": node.question,
        "added_context": node.contexts[-1] if node.contexts and node.depth else None,
        "added_side": node.sides[-1] if node.sides and node.depth else None,
        "target_option": None if node.target_index is None else letter(node.target_index),
        "correct_option": letter(item["answer_index"]),
        "semantic_ok": node.semantic_ok,
        "semantic_verdict": node.semantic_verdict,
        "length_ratio": round(node.length_ratio, 4),
        "success_rate": node.success_rate,
        "answers": letters,
        "unparsed": node.unparsed,
        "truncated": node.truncated,
        "greedy_answer": None if node.greedy_answer is None else letter(node.greedy_answer),
        "greedy_raw": node.greedy_raw,
        "greedy_audit": node.greedy_audit,
        "wrong_raw": node.wrong_raw,
        "attempts": node.attempts,
        "stop_reason": node.stop_reason,
        "calls": node.calls,
        "value": node.value,
        "status": node.status,
        "flag": node.flag,
        "proxy_raw": node.proxy_raw,
        "error": node.error,
        "tokens": node.tokens,
    }


def wrong_answer(record: dict[str, Any]) -> str | None:
    """A success's wrong answer text: the greedy audit's when that was wrong, else a sampled one."""
    if record.get("greedy_audit") == "wrong":
        return record["greedy_raw"]
    return record.get("wrong_raw")


def search_records(states: list[QuestionState]) -> list[dict[str, Any]]:
    """Every node of every question, in question order then creation order."""
    return [node_record(node, state.item) for state in states for node in state.nodes]


def perturbed_records(
    states: list[QuestionState], evaluated: str = "every_success", failed_originals: str = "leave_out"
) -> list[dict[str, Any]]:
    """The successful perturbations: L without the depth-0 roots (unperturbed originals the victim already
    fails) unless `failed_originals` is `include`; every success, or with `evaluated: first_success` only
    the first to join L (the authors' eval.py:23 evaluates good_questions[:1])."""
    records = []
    for state in states:
        item = state.item
        kept = [n for n in state.candidates if n.depth > 0 or failed_originals == "include"]
        for node in kept[:1] if evaluated == "first_success" else kept:
            records.append(
                {
                    "qid": item["qid"],
                    "node_id": node.node_id,
                    "depth": node.depth,
                    "question": node.question,
                    "original_question": item["question"],
                    "choices": item["choices"],
                    "answer_index": item["answer_index"],
                    "answer": item["answer"],
                    # An original the victim already fails (failed_originals: include) targets no option.
                    "target_option": None if node.target_index is None else letter(node.target_index),
                    "length_ratio": round(node.length_ratio, 4),
                    **({"subject": item["subject"]} if item.get("subject") else {}),
                }
            )
    return records


def summarize_search(records: list[dict[str, Any]], prices: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Counts per status, requests and tokens per role, and the cost per successful perturbation.

    `prices` maps role -> {prompt_per_1m, completion_per_1m} in USD (the `extract` calls, answers read by a
    second call, cost the extraction model's: the `extract` role's price, else the victim's). A
    "successful perturbation" is a
    `success` node at depth >= 1; `flagged_original_fails` counts the depth-0 successes separately (the
    `*_with_originals` keys count them in). Unparsed and truncated answers (and the successes that have
    one), re-prompts, the greedy audit's verdicts and why each question stopped are counted too, and so are
    the questions whose original got no answer (`unanswered`; no success rate counts them).
    """
    status = Counter(r["status"] for r in records)
    perturbations = [r for r in records if r["status"] == "success" and r["depth"] > 0]
    per_role = {role: {"requests": 0, "prompt": 0, "completion": 0} for role in USAGE_ROLES}
    for record in records:
        for role, usage in record["tokens"].items():
            for key in ("requests", "prompt", "completion"):
                per_role[role][key] += usage[key]
    # Answers are extracted by the `extract` role's model (the search job's roles name it), else the victim's.
    extract_price = prices.get(EXTRACT, prices.get("victim"))
    cost = sum(
        cost_usd(u["prompt"], u["completion"], extract_price if role == EXTRACT else prices.get(role))
        for role, u in per_role.items()
    )
    requests = sum(u["requests"] for u in per_role.values())
    tokens = sum(u["prompt"] + u["completion"] for u in per_role.values())
    n_success = len(perturbations)
    n_with_originals = sum(1 for r in records if r["status"] == "success")
    qids = {r["qid"] for r in records}
    roots = [r for r in records if r["depth"] == 0]
    audits = Counter(r.get("greedy_audit") for r in records if r["status"] == "success")
    return {
        "questions": len(qids),
        "questions_with_success": len({r["qid"] for r in perturbations}),
        "questions_with_success_with_originals": len({r["qid"] for r in records if r["status"] == "success"}),
        "successes_with_originals": n_with_originals,
        "stop_reasons": dict(
            sorted(Counter(r.get("stop_reason") for r in roots if r.get("stop_reason")).items())
        ),
        "call_cap_hit": sum(1 for r in roots if r.get("stop_reason") == "call_cap"),
        "unparsed_answers": sum(r.get("unparsed", 0) for r in records),
        "truncated_answers": sum(r.get("truncated", 0) for r in records),
        "unparsed_nodes": status.get("unparsed", 0),
        # Successes with an unread answer among their n (possible under the Eq. 5 rule only).
        "successes_with_unread": sum(1 for r in records if r["status"] == "success" and r.get("unparsed")),
        "reprompts": sum(max(0, len(r.get("attempts") or []) - 1) for r in records),
        "greedy_audit": {k: v for k, v in sorted(audits.items()) if k is not None},
        "flagged_original_fails": sum(1 for r in records if r["flag"] == "victim_fails_original"),
        "classifier_filtered": sum(1 for r in records if r["flag"] == "classifier_filtered"),
        # Questions whose original got no answer (the root call failed): never searched, never scored.
        UNANSWERED: sum(1 for r in roots if is_unanswered(r)),
        "successful_perturbations": n_success,
        "nodes": len(records),
        "expansions": len({r["parent_id"] for r in records if r["parent_id"]}),
        "status_counts": dict(sorted(status.items())),
        "requests": per_role,
        "requests_total": requests,
        "tokens_total": tokens,
        "cost_usd": cost,
        "requests_per_success": requests / n_success if n_success else None,
        "tokens_per_success": tokens / n_success if n_success else None,
        "cost_per_perturbed_question_usd": cost / n_success if n_success else None,
        "cost_per_success_with_originals_usd": cost / n_with_originals if n_with_originals else None,
    }
