"""The CDV tree search: find added context that makes a victim fail a question it can answer.

Per question the search grows a tree whose root is the original question. Expanding a node P asks the proxy
for one child per incorrect option (error-guided): background text nudging toward that option, added to
P's question before or after it (`cdv.prompts.distraction_position`; the original question stays verbatim
between the distractions placed before it and those placed after it; the choices never change). A child is
kept only if len(Q')/len(Q) <= lambda (characters of the question text, Q = the original) and the semantic check
answers "no" to "does the added text change the correct answer?"; an empty or off-format proxy reply, a
semantic reply that is neither yes nor no, and any failed call discard the child with a status saying so.

Success rate r: the victim answers a kept child's question with zero-shot CoT, n samples from ONE request
with `n` (genuinely separate samples), r = correct / n; an unparseable (or truncated) answer is not correct
(Eq. 5 counts every answer that does not match the ground truth as wrong). The paper's rule (section 3.4)
makes a node with r = 0 a success (candidate list L). `unread_answers: never_success` is the stricter rule:
a node with r = 0 and an unparsed or truncated answer gets status `unparsed`, terminal and never a success
(the unread answer might have been right); both rules count the unread answers. With `greedy_audit` on, every
success also gets one victim request at the evaluation temperature whose answer is recorded
(`greedy_audit`: wrong / right / unparsed / truncated / error); the audit reports and never filters.

Value V = exp(alpha / r) * depth^(-gamma) for r > 0 (None for r = 0 and for discarded children), depth
counted from the root's 0 (`root_depth: 1`: from 1, as the authors' run.py counts, so a child of the root
has depth 2 in V); the `value` setting selects the section 4.4 ablations: `gamma0` (V = exp(alpha / r))
and `no_r` (V = depth^(-gamma): the victim's rate no longer steers the order). The queue holds kept children; the
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
says `call_cap` when it did. `authors_code` adds the limits of the authors' public code (run.py's
--max-try 10 --max-good 3, which Table 3's ~3 perturbations per successful question imply):
`max_expansions` expansions (the root's counts) and `max_candidates` in L (checked after each expansion,
so the last expansion's successes are all kept). Nodes still queued at the end keep status
`queued`; every root records why its question stopped (`stop_reason`) and the calls it used (`calls`).

Rounds: each round pops one node per active question and sends all proxy requests as one batch, then all
semantic checks (one proxy and one semantic batch per try), then all victim requests, whatever the number
of questions, so API concurrency and GPU batching are used; the audit's greedy requests are one batch at
the end.

The parts: stressprobe.cdv.search_tree (settings, nodes, V), search_calls (the model calls), search_log
(what is written); this module runs the loop and names the interface the jobs use.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from typing import Any

from stressprobe.cdv.search_calls import audit_greedy, generate_children, measure_success
from stressprobe.cdv.search_log import perturbed_records, search_records, summarize_search, wrong_answer
from stressprobe.cdv.search_tree import (
    ROLES,
    Generator,
    Node,
    QuestionState,
    SearchSettings,
    is_monotone,
    node_value,
)
from stressprobe.errors import StressprobeError

# The search's interface, whichever of its modules holds each part.
__all__ = [
    "ROLES",
    "SearchSettings",
    "expansion_bound",
    "is_monotone",
    "node_value",
    "perturbed_records",
    "run_search",
    "search_records",
    "summarize_search",
    "wrong_answer",
]


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


def apply_rules(state: QuestionState, parent: Node, children: list[Node], settings: SearchSettings) -> None:
    """Value the evaluated children, fill L, and apply the diversity, all-correct and monotone rules."""
    evaluated = [c for c in children if c.status == "new"]
    for child in evaluated:
        if child.success_rate > 0:
            depth = child.depth + settings.root_depth
            child.value = node_value(
                child.success_rate, depth, settings.alpha, settings.gamma, settings.value
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
    extractor: Generator | None = None,
) -> list[QuestionState]:
    """Roots and pre-checks: classifier filter (when probabilities are given), then the victim on each root
    (its answers read by `extractor` when they are extracted; None: the victim).

    A root keeps status `root` (also once expanded), except a depth-0 success and an `unparsed` or `error`
    root (neither is searched).
    """
    states = [QuestionState(item=item, prompts=settings.prompts, seed=settings.seed) for item in items]
    for state in states:
        root = state.new_node(None, [], None)
        if perturbability is not None and perturbability[state.item["qid"]] < settings.classifier_threshold:
            root.status, root.flag = "root", "classifier_filtered"
            state.stop("classifier_filtered")
    measure_success([(s.nodes[0], s.item) for s in states if not s.done], victim, settings, extractor)
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
    extractor = clients.get("extract")  # the extraction model's client (role `extract`), if any
    states = start_questions(items, clients["victim"], settings, perturbability, extractor)
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
        audit_greedy(audited, clients["victim"], settings, extractor)
    for state in states:
        state.nodes[0].stop_reason, state.nodes[0].calls = state.stop_reason, state.calls()
    return states
