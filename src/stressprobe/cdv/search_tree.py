"""The data of the CDV tree search: its settings, a tree's nodes and a question's state, the value V and the
monotone-branch test (the method: stressprobe.cdv.search)."""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from stressprobe.cdv.prompt_file import OWN
from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, Response

ROLES = ("proxy", "semantic", "victim")
# Requests are counted per role, and per answer-extraction call (made with the extraction model:
# `cdv.prompts.extract_model`, else the victim's).
EXTRACT = "extract"
USAGE_ROLES = (*ROLES, EXTRACT)
LIMITS = ("paper", "authors_code")
# How an answer without a readable letter counts when r = 0: as a wrong answer (Eq. 5), or it makes the node
# `unparsed`, never a success (the stricter rule).
UNREAD = ("wrong", "never_success")
VALUES = ("paper", "gamma0", "no_r")
# Which members of L perturbed.jsonl holds: every success at depth >= 1, or the first found per question (the
# authors' eval.py); and whether the originals the victim already fails join them unchanged.
EVALUATED = ("every_success", "first_success")
FAILED_ORIGINALS = ("leave_out", "include")


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
    root_depth: int = 0  # the root's depth in V: 0 (the project) or 1 (the authors' run.py)
    evaluated: str = "every_success"  # see EVALUATED
    failed_originals: str = "leave_out"  # see FAILED_ORIGINALS
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
    unread_answers: str = "wrong"  # "wrong" (Eq. 5) or "never_success" (see UNREAD)
    extract_temperature: float = 0.0  # of the calls that read answers (cdv.prompts.extract_temperature)
    prompts: Any = OWN  # the prompt set (stressprobe.cdv.prompt_file): the project's own or a template file's

    def __post_init__(self) -> None:
        if self.limits not in LIMITS:
            raise StressprobeError(
                f"config cdv.search.limits: must be one of {', '.join(LIMITS)} (got {self.limits!r})"
            )
        if self.value not in VALUES:
            raise StressprobeError(
                f"config cdv.value_variants: a variant must be one of {', '.join(VALUES)} (got {self.value!r})"
            )
        if self.unread_answers not in UNREAD:
            raise StressprobeError(
                f"config cdv.search.unread_answers: must be one of {', '.join(UNREAD)} "
                f"(got {self.unread_answers!r})"
            )
        for key, value, allowed in (
            ("evaluated", self.evaluated, EVALUATED),
            ("failed_originals", self.failed_originals, FAILED_ORIGINALS),
            ("root_depth", self.root_depth, (0, 1)),
        ):
            if value not in allowed:
                raise StressprobeError(
                    f"config cdv.search.{key}: must be one of {', '.join(map(str, allowed))} (got {value!r})"
                )
        if self.proxy_tries < 1:
            raise StressprobeError(f"config cdv.search.proxy_tries: must be >= 1 (got {self.proxy_tries})")

    def expansion_calls(self, n_choices: int) -> int:
        """The most requests one expansion can send: per child every proxy try and its semantic check,
        the victim's sampled request and (with the audit) its greedy one, and with extraction one more call
        per answer read."""
        answers = 1 + int(self.greedy_audit)
        extraction = (self.samples + int(self.greedy_audit)) * int(self.prompts.extracts)
        return (n_choices - 1) * (2 * self.proxy_tries + answers + extraction)


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
    sides: list[str] = field(default_factory=list)  # where each context went: before or after the question
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
    prompts: Any = OWN  # places the distractions (its `perturbed`)
    seed: int = 42
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
        node.question, node.sides = self.prompts.perturbed(contexts, self.item["question"], self.seed)
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
