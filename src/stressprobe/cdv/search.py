"""The CDV tree search: find added context that makes a victim fail a question it can answer.

Per question the search grows a tree whose root is the original question. Expanding a node P asks the proxy
for one child per incorrect option (error-guided): background text nudging toward that option, put before
P's question (the original question stays verbatim at the end, the choices never change). A child is kept
only if len(Q')/len(Q) <= lambda (characters of the question text, Q = the original) and the semantic check
answers "no" to "does the added text change the correct answer?"; an empty or off-format proxy reply, a
semantic reply that is neither yes nor no, and any failed call discard the child with a status saying so.

Success rate r: the victim answers a kept child's question with zero-shot CoT, n samples from ONE request
with `n` (genuinely separate samples), r = correct / n; an unparseable (or truncated) answer is not correct.
The paper's rule (section 3.4) makes a node with r = 0 a success (candidate list L) -- provided every one of
its n answers parsed: a node with r = 0 and an unparsed or truncated answer gets status `unparsed`, which is
terminal and never a success (the unread answer might have been right). With `greedy_audit` on, every
success also gets one victim request at the evaluation temperature whose answer is recorded
(`greedy_audit`: wrong / right / unparsed / truncated / error); the audit reports and never filters.

Value V = exp(alpha / r) * depth^(-gamma) for r > 0 (None for r = 0 and for discarded children); the
`value` setting selects the section 4.4 ablations: `gamma0` (V = exp(alpha / r)) and `no_r`
(V = depth^(-gamma): the victim's rate no longer steers the order). The queue holds kept children; the
highest value is expanded next (ties: the earlier child first).

Re-prompting (section 3.2): a child whose proxy reply is empty or off-format, too long (lambda) or fails
the semantic check is replaced by asking the proxy again (a new seed, so neither the cache nor a
deterministic backend returns the same text), up to `proxy_tries` tries in all; every try is listed in the
child's `attempts` in search.jsonl, and only the last rejection's status remains when all fail.

Early stopping, applied to the children of an expanded node P ("evaluated" = kept and answered):
- diversity limit: if more than n1 evaluated children have r = 0, the n1 with the smallest length ratio
  join L, and every other evaluated child (the extra successes too) becomes `unexplored`: the branch ends.
- all correct: if every evaluated child has r = 1, they are `pruned_all_correct` (P's subtree ends).
- monotone branch: the level minimum of a sibling group is min r over its evaluated children; a branch's
  sequence is r(root), then the level minimum of each group on the path down to the new group. If its last
  l + 1 entries are strictly increasing (l consecutive increases, l = `monotone_levels`), the new group's
  r > 0 children are `pruned_monotone` instead of queued. The earliest trigger is therefore at depth l.
Pre-checks: a root with r = 0 is a success at depth 0 (in L as in Algorithm 1), flagged
`victim_fails_original`, and not searched, so tables can count with and without these originals; a root
whose classifier probability is below tau is flagged `classifier_filtered` and not searched (no victim call).

Limits per question (`limits`): `paper` (Algorithm 1) searches until the queue is empty; a safety cap
`max_calls_per_question` stops a question once its calls reach the cap (checked before each expansion, so
it passes the cap by less than one expansion's calls, `expansion_calls`), and the root's `stop_reason`
says `call_cap` when it did. `authors_code` adds the limits of the authors'
public code: `max_expansions` expansions (the root's counts) and `max_candidates` in L (checked after each
expansion, so the last expansion's successes are all kept). Nodes still queued at the end keep status
`queued`; every root records why its question stopped (`stop_reason`) and the calls it used (`calls`).

Rounds: each round pops one node per active question and sends all proxy requests as one batch, then all
semantic checks (one proxy and one semantic batch per try), then all victim requests, whatever the number
of questions, so API concurrency and GPU batching are used; the audit's greedy requests are one batch at
the end.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from stressprobe.cdv.prompts import (
    clean_context,
    letter,
    parse_answer,
    parse_yes_no,
    proxy_messages,
    semantic_messages,
    victim_messages,
    with_context,
)
from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, Response
from stressprobe.llm.usage import cost_usd

ROLES = ("proxy", "semantic", "victim")
LIMITS = ("paper", "authors_code")
VALUES = ("paper", "gamma0", "no_r")


class Generator(Protocol):
    """What the search needs of a model client (the LLM layer's client, or a test double)."""

    def generate(self, requests: list[Request]) -> list[Response]: ...


@dataclass(frozen=True)
class SearchSettings:
    """The search's parameters (config `cdv.search`)."""

    samples: int = 5
    victim_temperature: float = 0.7
    proxy_temperature: float = 0.7
    alpha: float = 2.0
    gamma: float = 1.0
    length_ratio_max: float = 10.0
    diversity_n1: int = 3
    monotone_levels: int = 3
    limits: str = "paper"  # "paper": until the queue is empty; "authors_code": also the two limits below
    max_expansions: int = 10  # authors_code only
    max_candidates: int | None = 3  # authors_code only
    max_calls_per_question: int | None = 1000  # the safety cap (every limits mode); None = no cap
    proxy_tries: int = 3  # proxy requests per child: the first and the re-prompts after rejections
    value: str = "paper"  # "paper", "gamma0" or "no_r" (the section 4.4 ablations)
    greedy_audit: bool = False  # record a greedy answer for every success (never filters)
    eval_temperature: float = 0.001  # the paper's evaluation temperature (the audit's request)
    victim_max_tokens: int = 1024
    proxy_max_tokens: int = 128
    semantic_max_tokens: int = 8
    classifier_threshold: float = 0.5
    seed: int = 42
    victim_prefill: str | None = None  # the start of the victim's answer, for `answer_prefill` models

    def __post_init__(self) -> None:
        if self.limits not in LIMITS:
            raise StressprobeError(
                f"config cdv.search.limits: must be one of {', '.join(LIMITS)} (got {self.limits!r})"
            )
        if self.value not in VALUES:
            raise StressprobeError(
                f"config cdv.value_variants: a variant must be one of {', '.join(VALUES)} (got {self.value!r})"
            )
        if self.proxy_tries < 1:
            raise StressprobeError(f"config cdv.search.proxy_tries: must be >= 1 (got {self.proxy_tries})")

    def expansion_calls(self, n_choices: int) -> int:
        """The most requests one expansion can send: per child every proxy try and its semantic check,
        the victim's sampled request and (with the audit) its greedy one."""
        return (n_choices - 1) * (2 * self.proxy_tries + 1 + int(self.greedy_audit))


@dataclass
class Node:
    """One node of a question's search tree (written as one line of search.jsonl)."""

    qid: str
    seq: int
    node_id: str
    parent_id: str | None
    depth: int
    contexts: list[str]
    question: str
    target_index: int | None = None
    status: str = "new"
    flag: str | None = None
    semantic_ok: bool | None = None
    semantic_verdict: str | None = None
    length_ratio: float = 1.0
    success_rate: float | None = None
    answers: list[int | None] = field(default_factory=list)
    unparsed: int = 0
    truncated: int = 0
    greedy_answer: int | None = None
    greedy_raw: str | None = None
    greedy_audit: str | None = None
    wrong_raw: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    calls: int | None = None
    value: float | None = None
    level_path: list[float] = field(default_factory=list)
    proxy_raw: str | None = None
    error: str | None = None
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)

    def charge(self, role: str, response: Response) -> None:
        """Count one request of `role` and its tokens against this node."""
        usage = self.tokens.setdefault(role, {"requests": 0, "prompt": 0, "completion": 0})
        usage["requests"] += 1
        usage["prompt"] += response.prompt_tokens
        usage["completion"] += response.completion_tokens


@dataclass
class QuestionState:
    """The search of one question: its tree, queue and candidate list."""

    item: dict[str, Any]
    nodes: list[Node] = field(default_factory=list)
    queue: list[tuple[float, int, Node]] = field(default_factory=list)
    candidates: list[Node] = field(default_factory=list)
    expansions: int = 0
    done: bool = False
    stop_reason: str | None = None
    counter: itertools.count = field(default_factory=itertools.count)

    def new_node(self, parent: Node | None, contexts: list[str], target_index: int | None) -> Node:
        number = next(self.counter)
        node = Node(
            qid=self.item["qid"],
            seq=number,
            node_id=f"{self.item['qid']}:{number}",
            parent_id=parent.node_id if parent else None,
            depth=parent.depth + 1 if parent else 0,
            contexts=contexts,
            question="",
            target_index=target_index,
        )
        self.set_contexts(node, contexts)
        self.nodes.append(node)
        return node

    def set_contexts(self, node: Node, contexts: list[str]) -> None:
        """Give `node` its contexts and the question and length ratio they make (one formula for both)."""
        node.contexts = contexts
        node.question = with_context(contexts, self.item["question"])
        node.length_ratio = len(node.question) / len(self.item["question"])

    def push(self, node: Node) -> None:
        """Queue a node: highest value first, ties in creation order (the root, valued None, goes first)."""
        if node.depth:
            node.status = "queued"
        priority = -math.inf if node.value is None else -node.value
        heapq.heappush(self.queue, (priority, node.seq, node))

    def calls(self) -> int:
        """Requests sent for this question so far (every role)."""
        return sum(u["requests"] for node in self.nodes for u in node.tokens.values())

    def stop(self, reason: str) -> None:
        self.done, self.stop_reason = True, reason


def expansion_bound(search: Mapping[str, Any], n_choices: int) -> int:
    """The most expansions one question's search can make under the config `cdv.search` (cost bounds).

    authors_code: `max_expansions`. paper: every expansion sends at least one request per child
    (n_choices - 1) and a question stops once its calls (the root's one included) reach the cap.
    """
    if search.get("limits", "paper") == "authors_code":
        return search["max_expansions"]
    cap = search.get("max_calls_per_question", 1000)
    if cap is None:
        raise StressprobeError(
            "config cdv.search.max_calls_per_question: null leaves the paper's search unbounded, so its cost "
            "cannot be bounded; set a cap or cdv.search.limits: authors_code"
        )
    return max(1, math.ceil((cap - 1) / (n_choices - 1)))


def node_value(success_rate: float, depth: int, alpha: float, gamma: float, variant: str = "paper") -> float:
    """V = exp(alpha / r) * depth^(-gamma), defined for r > 0 and depth >= 1; `variant` selects the
    section 4.4 ablations: `gamma0` drops the depth term, `no_r` the success-rate term."""
    if variant == "gamma0":
        gamma = 0.0
    rate_term = 1.0 if variant == "no_r" else math.exp(alpha / success_rate)
    return rate_term * depth ** (-gamma)


def is_monotone(sequence: list[float], levels: int) -> bool:
    """True when the last `levels` steps of `sequence` are all strict increases."""
    tail = sequence[-(levels + 1) :]
    return len(tail) == levels + 1 and all(a < b for a, b in itertools.pairwise(tail))


def _victim_request(question: str, choices: list[str], settings: SearchSettings, greedy: bool) -> Request:
    """The victim's sampled (or greedy audit) request; the search and the audit must ask exactly the same."""
    return Request(
        messages=victim_messages(question, choices, prefill=settings.victim_prefill),
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
    pairs: list[tuple[Node, dict[str, Any]]], victim: Generator, settings: SearchSettings
) -> None:
    """Set r, answers and the unparsed/truncated counts of each node on its own question.

    One batch of sampled requests. A failed call or fewer texts than samples marks the node `error`, and a
    node with r = 0 that has an unparsed or truncated answer is `unparsed`: neither is ever a success.
    """
    responses = victim.generate(
        [_victim_request(node.question, item["choices"], settings, greedy=False) for node, item in pairs]
    )
    for (node, item), response in zip(pairs, responses, strict=True):
        node.charge("victim", response)
        if response.error or len(response.texts) != settings.samples:
            node.status, node.error = "error", response.error or f"victim gave {len(response.texts)} samples"
            continue
        node.answers = [
            parse_answer(text, len(item["choices"]), settings.victim_prefill) for text in response.texts
        ]
        node.unparsed = sum(a is None for a in node.answers)
        node.truncated = min(node.unparsed, truncated_samples(response, settings.victim_max_tokens))
        node.success_rate = sum(a == item["answer_index"] for a in node.answers) / settings.samples
        if node.success_rate == 0 and node.unparsed:
            node.status = "unparsed"
        elif node.success_rate == 0:
            # One of its wrong answers, as the victim wrote it (the rejected side of a DPO pair).
            node.wrong_raw = (settings.victim_prefill or "") + response.texts[0]


def audit_greedy(
    nodes: list[tuple[Node, dict[str, Any]]], victim: Generator, settings: SearchSettings
) -> None:
    """The opt-in greedy audit: one request at the evaluation temperature per success; reports only."""
    responses = victim.generate(
        [_victim_request(node.question, item["choices"], settings, greedy=True) for node, item in nodes]
    )
    for (node, item), response in zip(nodes, responses, strict=True):
        node.charge("victim", response)
        if response.error or not response.texts:
            node.greedy_audit = "error"
            continue
        node.greedy_raw = (settings.victim_prefill or "") + response.text
        node.greedy_answer = parse_answer(response.text, len(item["choices"]), settings.victim_prefill)
        cut = truncated_samples(response, settings.victim_max_tokens) > 0
        node.greedy_audit = answer_status(node.greedy_answer, item["answer_index"], cut)


def _proxy_request(
    node: Node, parent: Node, item: dict[str, Any], settings: SearchSettings, attempt: int = 0
) -> Request:
    # A re-prompt differs by its seed only: a new request, so neither the cache nor a deterministic
    # backend hands back the rejected text.
    return Request(
        messages=proxy_messages(parent.question, item["choices"], item["answer_index"], node.target_index),
        max_tokens=settings.proxy_max_tokens,
        temperature=settings.proxy_temperature,
        seed=settings.seed + attempt,
    )


def _semantic_request(node: Node, item: dict[str, Any], settings: SearchSettings) -> Request:
    return Request(
        messages=semantic_messages(item["question"], node.question, item["choices"], item["answer_index"]),
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
    measure_success([(child, state.item) for state, child in kept], clients["victim"], settings)
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
        context = None if response.error else clean_context(response.text)
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
        child.semantic_verdict = "error" if response.error else (parse_yes_no(response.text) or "unclear")
        child.semantic_ok = {"no": True, "yes": False}.get(child.semantic_verdict)
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


def apply_rules(state: QuestionState, parent: Node, children: list[Node], settings: SearchSettings) -> None:
    """Value the evaluated children, fill L, and apply the diversity, all-correct and monotone rules."""
    evaluated = [c for c in children if c.status == "new"]
    for child in evaluated:
        if child.success_rate > 0:
            child.value = node_value(
                child.success_rate, child.depth, settings.alpha, settings.gamma, settings.value
            )
    successes = [c for c in evaluated if c.success_rate == 0]
    others = [c for c in evaluated if c.success_rate > 0]
    if len(successes) > settings.diversity_n1:
        successes.sort(key=lambda c: (c.length_ratio, c.node_id))
        for child in successes[: settings.diversity_n1]:
            _add_candidate(state, child)
        for child in successes[settings.diversity_n1 :] + others:
            child.status = "unexplored"
        return
    for child in successes:
        _add_candidate(state, child)
    if not evaluated:
        return
    if all(c.success_rate == 1 for c in evaluated):
        for child in evaluated:
            child.status = "pruned_all_correct"
        return
    level_path = [*parent.level_path, min(c.success_rate for c in evaluated)]
    monotone = is_monotone(level_path, settings.monotone_levels)
    for child in others:
        child.level_path = level_path
        if monotone:
            child.status = "pruned_monotone"
        else:
            state.push(child)


def _add_candidate(state: QuestionState, node: Node) -> None:
    node.status = "success"
    state.candidates.append(node)


def _stop_reason(state: QuestionState, settings: SearchSettings) -> str | None:
    """Why the question's search stops before its next expansion, or None when it goes on."""
    if not state.queue:
        return "queue_empty"
    if settings.limits == "authors_code":
        if state.expansions >= settings.max_expansions:
            return "max_expansions"
        if settings.max_candidates is not None and len(state.candidates) >= settings.max_candidates:
            return "max_candidates"
    if settings.max_calls_per_question is not None and state.calls() >= settings.max_calls_per_question:
        return "call_cap"
    return None


def start_questions(
    items: list[dict[str, Any]],
    victim: Generator,
    settings: SearchSettings,
    perturbability: dict[str, float] | None = None,
) -> list[QuestionState]:
    """Roots and pre-checks: classifier filter (when probabilities are given), then the victim on each root.

    A root keeps status `root` (also once expanded), except a depth-0 success and an `unparsed` or `error`
    root (neither is searched).
    """
    states = [QuestionState(item=item) for item in items]
    for state in states:
        root = state.new_node(None, [], None)
        if perturbability is not None and perturbability[state.item["qid"]] < settings.classifier_threshold:
            root.status, root.flag = "root", "classifier_filtered"
            state.stop("classifier_filtered")
    measure_success([(s.nodes[0], s.item) for s in states if not s.done], victim, settings)
    for state in (s for s in states if not s.done):
        root = state.nodes[0]
        if root.status in ("error", "unparsed"):
            state.stop(f"original_{root.status}")
            continue
        root.level_path = [root.success_rate]
        if root.success_rate == 0:
            root.flag = "victim_fails_original"
            state.stop("original_fails")
            _add_candidate(state, root)
        else:
            root.status = "root"
            state.push(root)
    return states


def run_search(
    items: list[dict[str, Any]],
    clients: dict[str, Generator],
    settings: SearchSettings,
    perturbability: dict[str, float] | None = None,
) -> list[QuestionState]:
    """Search every question in rounds (one expansion per active question per round) until each stops."""
    states = start_questions(items, clients["victim"], settings, perturbability)
    while True:
        for state in states:
            reason = None if state.done else _stop_reason(state, settings)
            if reason:
                state.stop(reason)
        active = [s for s in states if not s.done]
        if not active:
            break
        expansions = []
        for state in active:
            _, _, node = heapq.heappop(state.queue)
            if node.depth:
                node.status = "expanded"
            state.expansions += 1
            expansions.append((state, node))
        for state, parent, children in generate_children(expansions, clients, settings):
            apply_rules(state, parent, children, settings)
    if settings.greedy_audit:
        audited = [(node, s.item) for s in states for node in s.candidates]
        audit_greedy(audited, clients["victim"], settings)
    for state in states:
        state.nodes[0].stop_reason, state.nodes[0].calls = state.stop_reason, state.calls()
    return states


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


def perturbed_records(states: list[QuestionState]) -> list[dict[str, Any]]:
    """The successful perturbations (L without the depth-0 roots, which are unperturbed originals)."""
    records = []
    for state in states:
        item = state.item
        for node in state.candidates:
            if node.depth == 0:
                continue
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
                    "target_option": letter(node.target_index),
                    "length_ratio": round(node.length_ratio, 4),
                    **({"subject": item["subject"]} if item.get("subject") else {}),
                }
            )
    return records


def summarize_search(records: list[dict[str, Any]], prices: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Counts per status, requests and tokens per role, and the cost per successful perturbation.

    `prices` maps role -> {prompt_per_1m, completion_per_1m} in USD. A "successful perturbation" is a
    `success` node at depth >= 1; `flagged_original_fails` counts the depth-0 successes separately (the
    `*_with_originals` keys count them in). Unparsed and truncated answers, re-prompts, the greedy audit's
    verdicts and why each question stopped are counted too.
    """
    status = Counter(r["status"] for r in records)
    perturbations = [r for r in records if r["status"] == "success" and r["depth"] > 0]
    per_role = {role: {"requests": 0, "prompt": 0, "completion": 0} for role in ROLES}
    for record in records:
        for role, usage in record["tokens"].items():
            for key in ("requests", "prompt", "completion"):
                per_role[role][key] += usage[key]
    cost = sum(
        cost_usd(per_role[role]["prompt"], per_role[role]["completion"], prices.get(role)) for role in ROLES
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
        "reprompts": sum(max(0, len(r.get("attempts") or []) - 1) for r in records),
        "greedy_audit": {k: v for k, v in sorted(audits.items()) if k is not None},
        "flagged_original_fails": sum(1 for r in records if r["flag"] == "victim_fails_original"),
        "classifier_filtered": sum(1 for r in records if r["flag"] == "classifier_filtered"),
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


def audit_successes(
    records: list[dict[str, Any]],
    questions: list[dict[str, Any]],
    victim: Generator,
    settings: SearchSettings,
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
        _victim_request(r["question"], by_qid[r["qid"]]["choices"], settings, greedy=True) for r in successes
    ]
    failures = []
    for record, response in zip(successes, victim.generate(requests), strict=True):
        answer = parse_answer(response.text, len(by_qid[record["qid"]]["choices"]), settings.victim_prefill)
        if response.error or answer == by_qid[record["qid"]]["answer_index"]:
            failures.append({"node_id": record["node_id"], "answer": answer, "error": response.error})
    return failures
