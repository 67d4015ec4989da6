"""A scripted stand-in for a model client in the CDV unit tests: it answers every request by rule.

The proxy's added context is "[ctx X]" for target option X (or whatever `proxy_text` returns); the victim's
number of correct samples is `correct(contexts)` where `contexts` lists the target letters of the contexts
in the question (in order); the greedy answer is correct when `greedy_correct(contexts)` holds;
`victim_text(contexts, question)`, when it returns a string, replaces every victim sample's reply. Items in
these tests have the correct answer at A.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from stressprobe.cdv import prompts
from stressprobe.llm import Request, Response

CONTEXT = re.compile(r"\[ctx ([A-Z])\]")
TARGET = re.compile(r"make option ([A-Z]) ")


def make_item(qid: str, n_choices: int = 4, question: str | None = None) -> dict:
    choices = [f"choice {i}" for i in range(n_choices)]
    return {
        "qid": qid,
        "question": question or f"What is the right choice for {qid}?",
        "choices": choices,
        "answer_index": 0,
        "answer": choices[0],
    }


def user_text(request: Request) -> str:
    """The last user message (a prefilled answer may follow it)."""
    return next(content for role, content in reversed(request.messages) if role == "user")


def question_of(request: Request) -> str:
    """The question text of a victim request (the user message up to the options)."""
    return user_text(request).split("\n\nA. ")[0]


def kind_of(request: Request) -> str:
    system = request.messages[0][1]
    if system.startswith(prompts.VICTIM_SYSTEM):
        return "victim"
    return {prompts.PROXY_SYSTEM: "proxy", prompts.SEMANTIC_SYSTEM: "semantic"}.get(system, "other")


class ScriptedModel:
    """`generate(requests) -> list[Response]` by rule; records every batch it was sent."""

    def __init__(
        self,
        correct: Callable[[list[str], str], int] = lambda contexts, question: 5,
        greedy_correct: Callable[[list[str], str], bool] | None = None,
        proxy_text: Callable[[str, str], str] = lambda target, parent: f"[ctx {target}]",
        semantic_text: Callable[[str], str] = lambda question: "No",
        fail: Callable[[Request], bool] = lambda request: False,
        victim_text: Callable[[list[str], str], str | None] = lambda contexts, question: None,
    ):
        self.victim_text = victim_text
        self.correct = correct
        self.greedy_correct = greedy_correct or (lambda contexts, question: correct(contexts, question) > 0)
        self.proxy_text = proxy_text
        self.semantic_text = semantic_text
        self.fail = fail
        self.batches: list[list[Request]] = []

    def generate(self, requests: list[Request]) -> list[Response]:
        self.batches.append(list(requests))
        return [self.answer(request) for request in requests]

    def answer(self, request: Request) -> Response:
        if self.fail(request):
            return Response.failure("scripted failure")
        kind = kind_of(request)
        user = user_text(request)
        if kind == "proxy":
            texts = [self.proxy_text(TARGET.search(user).group(1), user)]
        elif kind == "semantic":
            texts = [self.semantic_text(user)]
        elif kind == "victim":
            question = question_of(request)
            contexts = CONTEXT.findall(question)

            def reply(letter: str, reasoning: str) -> str:
                # A prefilled answer ("Answer:") is continued with the letter alone.
                return f" {letter}" if request.prefill else f"{reasoning} Answer: {letter}"

            override = self.victim_text(contexts, question)
            if override is not None:
                texts = [override] * request.n
            elif request.n == 1 and request.temperature <= 0.001:  # the greedy (audit) request
                texts = [
                    reply("A", "Thinking.") if self.greedy_correct(contexts, question) else reply("B", "Hmm.")
                ]
            else:
                k = self.correct(contexts, question)
                texts = [reply("A", "Reasoning.")] * k + [reply("B", "Reasoning.")] * (request.n - k)
        else:
            texts = ["no"]
        return Response(texts=texts, prompt_tokens=10, completion_tokens=3 * len(texts))

    def requests_of(self, kind: str) -> list[Request]:
        return [r for batch in self.batches for r in batch if kind_of(r) == kind]
