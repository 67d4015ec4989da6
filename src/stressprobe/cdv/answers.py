"""Reading a model's answers to multiple-choice questions: from each answer's 'Answer: X' line (the project's
prompts), or, with a template file whose answers are extracted, by one more call per answer that asks the
extraction template which option the answer chose, answered by the extraction model
(`cdv.prompts.extract_model`, the authors' gpt-4o-mini in config/paper.yaml; null: the answering model
itself) at `cdv.prompts.extract_temperature`, through the cached LLM layer like every call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stressprobe.cdv.prompt_file import last_json_value
from stressprobe.cdv.prompts import parse_answer
from stressprobe.llm import Request, Response

# Tokens of an extraction reply: a short JSON object naming the option's text ({"final_answer": ...}).
EXTRACT_MAX_TOKENS = 64


def extraction_model(prompts: Mapping[str, Any], answering: str) -> str | None:
    """The model that reads `answering`'s answers by a second call (`cdv.prompts`): `extract_model`, else
    the answering model itself; None when answers are read from their answer line."""
    if not prompts.get("extract_answers"):
        return None
    return prompts.get("extract_model") or answering


def read_answers(
    extractor: Any,
    prompts: Any,
    asked: list[tuple[str, list[str], list[str]]],
    prefill: str | None,
    seed: int,
    temperature: float = 0.0,
) -> tuple[list[list[int | None]], list[list[Response]]]:
    """For each (question, choices, answer texts): the chosen option of every text (None when unread), and
    the extraction responses that read them (empty without extraction), for the caller to count.
    `extractor` is the extraction model's client, asked at `temperature`."""
    if not prompts.extracts:
        answers = [[parse_answer(t, len(choices), prefill) for t in texts] for _, choices, texts in asked]
        return answers, [[] for _ in asked]
    requests = [
        Request(
            messages=prompts.extract(question, choices, (prefill or "") + text),
            max_tokens=EXTRACT_MAX_TOKENS,
            temperature=temperature,
            seed=seed,
        )
        for question, choices, texts in asked
        for text in texts
    ]
    replies = iter(extractor.generate(requests)) if requests else iter(())
    answers, responses = [], []
    for _, choices, texts in asked:
        mine = [next(replies) for _ in texts]
        responses.append(mine)
        answers.append([None if r.error else prompts.option(r.text, choices) for r in mine])
    return answers, responses


def was_read(record: Mapping[str, Any]) -> bool:
    """Whether an evaluation record's answer was read as the authors' eval.py reads it: an answer read by
    its answer line, or one whose extraction reply has a JSON `final_answer` (an option other than the
    right one, or none of the options, is a wrong answer: eval.py:37-49 at 0a1acbd). An extraction reply
    without that JSON is what eval.py:50-51 drops from its records."""
    if "extract_raw" not in record or record.get("status") == "ok":
        return True
    return last_json_value(record["extract_raw"], "final_answer") is not None
