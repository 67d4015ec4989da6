"""The model calls of the CDV tree search: the proxy's children (with re-prompting), the semantic check, the
victim's sampled answers that measure r, and the greedy audit (the method: stressprobe.cdv.search)."""

from __future__ import annotations

from typing import Any

from stressprobe.cdv.answers import read_answers
from stressprobe.cdv.search_tree import Generator, Node, QuestionState, SearchSettings
from stressprobe.llm import Request, Response


def victim_request(question: str, choices: list[str], settings: SearchSettings, greedy: bool) -> Request:
    """The victim's sampled (or greedy audit) request; the search and the audit must ask exactly the same."""
    return Request(
        messages=settings.prompts.victim(question, choices, prefill=settings.victim_prefill),
        max_tokens=settings.victim_max_tokens,
        temperature=settings.eval_temperature if greedy else settings.victim_temperature,
        n=1 if greedy else settings.samples,
        seed=settings.seed,
    )


def truncated_samples(response: Response, max_tokens: int) -> int:
    """How many of a response's samples certainly stopped at `max_tokens`.

    The LLM layer reports completion tokens summed over the samples, so a cut-off is certain only when the
    sum reaches the limit for every sample; otherwise an unfinished answer counts as unparsed.
    """
    texts = len(response.texts)
    return texts if texts and response.completion_tokens >= max_tokens * texts else 0


def answer_status(answer: int | None, correct: int, truncated: bool) -> str:
    """One answer's audit verdict: right, wrong, truncated (cut off at the token limit) or unparsed."""
    if answer is not None:
        return "right" if answer == correct else "wrong"
    return "truncated" if truncated else "unparsed"


def measure_success(
    pairs: list[tuple[Node, dict[str, Any]]],
    victim: Generator,
    settings: SearchSettings,
    extractor: Generator | None = None,
) -> None:
    """Set r, answers and the unparsed/truncated counts of each node on its own question.

    One batch of sampled requests. A failed call or fewer texts than samples marks the node `error` (never
    a success). An unparsed or truncated answer is not correct; under `unread_answers: never_success` a node
    with r = 0 and such an answer is `unparsed` instead (terminal, never a success). With extraction, each
    sample is read by `extractor` (the extraction model's client; None: the victim's own).
    """
    responses = victim.generate(
        [victim_request(node.question, item["choices"], settings, greedy=False) for node, item in pairs]
    )
    answered = []
    for (node, item), response in zip(pairs, responses, strict=True):
        node.charge("victim", response)
        if response.error or len(response.texts) != settings.samples:
            node.status, node.error = "error", response.error or f"victim gave {len(response.texts)} samples"
        else:
            answered.append((node, item, response))
    answers, extractions = read_answers(
        extractor or victim,
        settings.prompts,
        [(node.question, item["choices"], response.texts) for node, item, response in answered],
        settings.victim_prefill,
        settings.seed,
        settings.extract_temperature,
    )
    for (node, item, response), node_answers, extracted in zip(answered, answers, extractions, strict=True):
        for reply in extracted:
            node.charge("extract", reply)
        node.answers = node_answers
        node.unparsed = sum(a is None for a in node.answers)
        node.truncated = min(node.unparsed, truncated_samples(response, settings.victim_max_tokens))
        node.success_rate = sum(a == item["answer_index"] for a in node.answers) / settings.samples
        if node.success_rate == 0 and node.unparsed and settings.unread_answers == "never_success":
            node.status = "unparsed"
        elif node.success_rate == 0:
            # One of its wrong answers, as the victim wrote it (the rejected side of a DPO pair): a read one
            # when there is one.
            read = [text for text, a in zip(response.texts, node.answers, strict=True) if a is not None]
            node.wrong_raw = (settings.victim_prefill or "") + (read or response.texts)[0]


def audit_greedy(
    nodes: list[tuple[Node, dict[str, Any]]],
    victim: Generator,
    settings: SearchSettings,
    extractor: Generator | None = None,
) -> None:
    """The opt-in greedy audit: one request at the evaluation temperature per success; reports only."""
    responses = victim.generate(
        [victim_request(node.question, item["choices"], settings, greedy=True) for node, item in nodes]
    )
    answered = []
    for (node, item), response in zip(nodes, responses, strict=True):
        node.charge("victim", response)
        if response.error or not response.texts:
            node.greedy_audit = "error"
        else:
            answered.append((node, item, response))
    answers, extractions = read_answers(
        extractor or victim,
        settings.prompts,
        [(node.question, item["choices"], [response.text]) for node, item, response in answered],
        settings.victim_prefill,
        settings.seed,
        settings.extract_temperature,
    )
    for (node, item, response), [answer], extracted in zip(answered, answers, extractions, strict=True):
        for reply in extracted:
            node.charge("extract", reply)
        node.greedy_raw = (settings.victim_prefill or "") + response.text
        node.greedy_answer = answer
        cut = truncated_samples(response, settings.victim_max_tokens) > 0
        node.greedy_audit = answer_status(node.greedy_answer, item["answer_index"], cut)


def _proxy_request(
    node: Node, parent: Node, item: dict[str, Any], settings: SearchSettings, attempt: int = 0
) -> Request:
    # A re-prompt differs by its seed only: a new request, so neither the cache nor a deterministic
    # backend hands back the rejected text.
    return Request(
        messages=settings.prompts.proxy(
            parent.question, item["choices"], item["answer_index"], node.target_index, item["question"]
        ),
        max_tokens=settings.proxy_max_tokens,
        temperature=settings.proxy_temperature,
        seed=settings.seed + attempt,
    )


def _semantic_request(node: Node, item: dict[str, Any], settings: SearchSettings) -> Request:
    return Request(
        messages=settings.prompts.semantic(
            item["question"], node.question, item["choices"], item["answer_index"]
        ),
        max_tokens=settings.semantic_max_tokens,
        temperature=0.0,
        seed=settings.seed,
    )


def generate_children(
    expansions: list[tuple[QuestionState, Node]], clients: dict[str, Generator], settings: SearchSettings
) -> list[tuple[QuestionState, Node, list[Node]]]:
    """Create and evaluate the children of every popped node: proxy, length and semantic batches per try
    (rejected children are re-prompted up to `proxy_tries` tries), then one victim batch."""
    groups = []
    for state, parent in expansions:
        item = state.item
        targets = [i for i in range(len(item["choices"])) if i != item["answer_index"]]
        groups.append((state, parent, [state.new_node(parent, [], target) for target in targets]))
    pending = [(state, parent, child) for state, parent, children in groups for child in children]
    kept = []
    for attempt in range(settings.proxy_tries):
        if not pending:
            break
        pending = _try_children(pending, attempt, clients, settings, kept)
    measure_success(
        [(child, state.item) for state, child in kept], clients["victim"], settings, clients.get("extract")
    )
    return groups


def _try_children(
    pending: list[tuple[QuestionState, Node, Node]],
    attempt: int,
    clients: dict[str, Generator],
    settings: SearchSettings,
    kept: list[tuple[QuestionState, Node]],
) -> list[tuple[QuestionState, Node, Node]]:
    """One try for every pending child; appends the accepted ones to `kept`, returns the rejected ones."""
    proxy_responses = clients["proxy"].generate(
        [_proxy_request(c, p, s.item, settings, attempt) for s, p, c in pending]
    )
    rejected, passed_length = [], []
    for (state, parent, child), response in zip(pending, proxy_responses, strict=True):
        child.charge("proxy", response)
        child.proxy_raw = response.text
        child.status, child.error, child.semantic_ok, child.semantic_verdict = "new", None, None, None
        context = None if response.error else settings.prompts.context(response.text)
        if context is None:
            child.status, child.error = "discarded_proxy", response.error or "empty or off-format proxy reply"
            state.set_contexts(child, list(parent.contexts))
        else:
            state.set_contexts(child, [*parent.contexts, context])
            if child.length_ratio > settings.length_ratio_max:
                child.status = "discarded_length"
        if child.status == "new":
            passed_length.append((state, parent, child))
        else:
            _log_attempt(child, attempt)
            rejected.append((state, parent, child))

    semantic_responses = clients["semantic"].generate(
        [_semantic_request(c, s.item, settings) for s, _, c in passed_length]
    )
    for (state, parent, child), response in zip(passed_length, semantic_responses, strict=True):
        child.charge("semantic", response)
        child.semantic_verdict = (
            "error" if response.error else (settings.prompts.verdict(response.text) or "unclear")
        )
        keep = settings.prompts.keep_verdict
        child.semantic_ok = {keep: True, {"yes": "no", "no": "yes"}[keep]: False}.get(child.semantic_verdict)
        if child.semantic_ok is not True:
            # "unclear" and "error" count as failing the check: never a silent pass.
            child.status, child.error = "discarded_semantic", response.error
            rejected.append((state, parent, child))
        else:
            kept.append((state, child))
        _log_attempt(child, attempt)
    return rejected


def _log_attempt(child: Node, attempt: int) -> None:
    """One try of a child in its search-log entry (the proxy's text and what the checks said)."""
    child.attempts.append(
        {
            "try": attempt + 1,
            "status": "kept" if child.status == "new" else child.status,
            "proxy_raw": child.proxy_raw,
            "length_ratio": round(child.length_ratio, 4),
            "semantic_verdict": child.semantic_verdict,
            "error": child.error,
        }
    )


def audit_successes(
    records: list[dict[str, Any]],
    questions: list[dict[str, Any]],
    victim: Generator,
    settings: SearchSettings,
    extractor: Generator | None = None,
) -> list[dict[str, Any]]:
    """Ask the victim every `success` node's question again as the greedy audit does; return those it
    gets right (a report: under the paper's rule a success may well have a right greedy answer).

    With `greedy_audit` on in the search, the returned node ids are exactly those the search log marks
    `greedy_audit: right` when the victim decodes deterministically. Run it with a fresh response cache so
    that the answers are recomputed rather than read back.
    """
    by_qid = {q["qid"]: q for q in questions}
    successes = [r for r in records if r["status"] == "success"]
    requests = [
        victim_request(r["question"], by_qid[r["qid"]]["choices"], settings, greedy=True) for r in successes
    ]
    responses = victim.generate(requests)
    asked = [
        (r["question"], by_qid[r["qid"]]["choices"], [x.text])
        for r, x in zip(successes, responses, strict=True)
    ]
    answers, _ = read_answers(
        extractor or victim,
        settings.prompts,
        asked,
        settings.victim_prefill,
        settings.seed,
        settings.extract_temperature,
    )
    failures = []
    for record, response, [answer] in zip(successes, responses, answers, strict=True):
        if response.error or answer == by_qid[record["qid"]]["answer_index"]:
            failures.append({"node_id": record["node_id"], "answer": answer, "error": response.error})
    return failures
