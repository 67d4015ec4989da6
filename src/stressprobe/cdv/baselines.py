"""The study's baselines: Elaborated (semantics-preserving) and Prompt-only (one-shot distraction)."""

from __future__ import annotations

from typing import Any

from stressprobe.cdv.prompts import clean_context, elaborated_messages, prompt_only_messages, with_context
from stressprobe.llm import Request

KINDS = ("elaborated", "prompt_only")


def baseline_questions(
    client: Any, questions: list[dict[str, Any]], max_tokens: int, temperature: float, seed: int
) -> list[dict[str, Any]]:
    """One rewrite of each kind per question (one batch); an empty or off-format reply is recorded, not used.

    Elaborated replaces the question text with the rewrite; Prompt-only puts the added context before the
    original question, as the search does.
    """
    jobs = [(q, kind) for q in questions for kind in KINDS]
    builders = {"elaborated": elaborated_messages, "prompt_only": prompt_only_messages}
    requests = [
        Request(
            messages=builders[kind](q["question"], q["choices"]),
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
        )
        for q, kind in jobs
    ]
    records = []
    for (q, kind), response in zip(jobs, client.generate(requests), strict=True):
        text = None if response.error else clean_context(response.text)
        question = None
        if text is not None:
            question = text if kind == "elaborated" else with_context([text], q["question"])
        records.append(
            {
                "qid": q["qid"],
                "kind": kind,
                "question": question,
                "length_ratio": None if question is None else round(len(question) / len(q["question"]), 4),
                "status": "error" if response.error else ("ok" if question else "unparsed"),
                "raw": response.text,
            }
        )
    return records
