"""The study's baselines: Elaborated (semantics-preserving) and Prompt-only (one-shot distraction)."""

from __future__ import annotations

import random
from typing import Any

from stressprobe.cdv.prompt_file import OWN
from stressprobe.cdv.prompts import letter
from stressprobe.llm import Request

KINDS = ("elaborated", "prompt_only")


def prompt_only_target(question: dict[str, Any], seed: int) -> int:
    """The wrong option a Prompt-only perturbation steers toward: a seeded draw per question (the search
    tries every wrong option; the baseline has one try)."""
    wrong = [i for i in range(len(question["choices"])) if i != question["answer_index"]]
    return random.Random(f"{seed}/{question['qid']}").choice(wrong)


def baseline_messages(
    question: dict[str, Any], kind: str, prompt_only: str, seed: int, prompts: Any = OWN
) -> tuple:
    """The prompt of one baseline rewrite. Prompt-only is the search's own perturbation prompt applied once
    (`search_prompt`, the paper's baseline) or a separate distraction prompt (`own`: the project's, or a
    template file's `prompt_only`)."""
    q, choices, answer = question["question"], question["choices"], question["answer_index"]
    if kind == "elaborated":
        return prompts.elaborated(q, choices)
    target = prompt_only_target(question, seed)
    if prompt_only == "search_prompt":
        return prompts.proxy(q, choices, answer, target, q)
    return prompts.prompt_only(q, choices, answer, target)


def baseline_questions(
    client: Any,
    questions: list[dict[str, Any]],
    max_tokens: int,
    temperature: float,
    seed: int,
    prompt_only: str = "search_prompt",
    prompts: Any = OWN,
) -> list[dict[str, Any]]:
    """One rewrite of each kind per question (one batch); an empty or off-format reply is recorded, not used.

    Elaborated replaces the question text with the rewrite; Prompt-only places the added context as the
    search does (cdv.prompts.distraction_position).
    """
    jobs = [(q, kind) for q in questions for kind in KINDS]
    requests = [
        Request(
            messages=baseline_messages(q, kind, prompt_only, seed, prompts),
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
        )
        for q, kind in jobs
    ]
    records = []
    for (q, kind), response in zip(jobs, client.generate(requests), strict=True):
        asked = "distraction" if kind == "prompt_only" and prompt_only == "search_prompt" else kind
        question = None if response.error else prompts.rewritten(asked, response.text, q["question"], seed)
        records.append(
            {
                "qid": q["qid"],
                "kind": kind,
                "target_option": (
                    letter(prompt_only_target(q, seed))
                    if kind == "prompt_only" and prompt_only == "search_prompt"
                    else None
                ),
                "question": question,
                "length_ratio": None if question is None else round(len(question) / len(q["question"]), 4),
                "status": "error" if response.error else ("ok" if question else "unparsed"),
                "raw": response.text,
            }
        )
    return records
