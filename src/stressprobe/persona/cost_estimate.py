"""The persona study's part of the bill (stressprobe.cost): the summarize and judge cells of a dataset,
their requests built with the same library functions the jobs use, so that their cache keys are the keys
the jobs will look up and requests already in the cache cost nothing. Judge cells of a dataset whose
summaries do not exist yet are priced with stand-in summaries of the maximum summary length."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stressprobe.cost import CHARS_PER_TOKEN, CacheView, CellEstimate, estimate_cell
from stressprobe.llm import answer_prefill
from stressprobe.overlap import Ask
from stressprobe.persona.judging import (
    JudgeSettings,
    condition_personas,
    is_retrieved,
    judgeable,
    passage_record,
    persona_delivery,
    split_condition,
    summary_requests,
)


def stand_in_summaries(pairs: Iterable[Mapping[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """Summaries not written yet: the passage cut or padded to the summary's maximum length (an upper bound).

    Built from each passage so that distinct pairs stay distinct requests, as their real summaries will be.
    """
    size = max_tokens * CHARS_PER_TOKEN
    return [
        {"qid": p["qid"], "docid": p["docid"], "summary": p["passage"][:size].ljust(size), "status": "ok"}
        for p in pairs
    ]


def judged_texts(
    pairs: Sequence[Mapping[str, Any]],
    summaries: Sequence[Mapping[str, Any]] | None,
    summarized: bool,
    summary_max_tokens: int,
) -> list[Mapping[str, Any]]:
    """What the judges will read: the passages, the summaries when they exist, else stand-ins."""
    if not summarized:
        return [passage_record(pair) for pair in pairs]
    if summaries is not None:
        return judgeable(summaries)
    return stand_in_summaries(pairs, summary_max_tokens)


def judging_estimates(
    dataset: str,
    pairs: Sequence[Mapping[str, Any]],
    topics: Mapping[str, str],
    summaries: Sequence[Mapping[str, Any]] | None,
    persona_tables: Mapping[str, tuple[list[dict[str, Any]], str]],
    judging: Mapping[str, Any],
    fixed_personas: Mapping[str, str],
    summarizer: str | None,
    models: Mapping[str, Mapping[str, Any]],
    templates: Mapping[str, str | None],
    cache: CacheView,
    deliveries: Mapping[str, str] | None = None,
    asks: list[Ask] | None = None,
) -> list[CellEstimate]:
    """The summarize cell (when the dataset is summarized) and every judge cell of one dataset.

    `persona_tables` maps a retrieved source to (its persona selection records, the file they came from).
    """
    rows = []
    if summarizer is not None:
        requests = summary_requests(pairs, topics, templates["summary"], judging["summary_max_tokens"])
        rows.append(
            estimate_cell(
                "judging",
                dataset,
                "summarize",
                summarizer,
                models[summarizer],
                requests,
                cache,
                asks,
                rule="summarize",
            )
        )
    texts = judged_texts(pairs, summaries, summarizer is not None, judging["summary_max_tokens"])
    for condition in judging["conditions"]:
        source, role = split_condition(condition)
        records, path = persona_tables[source] if is_retrieved(source) else (None, "")
        personas = condition_personas(topics, source, role, fixed_personas, records, path)
        for model in judging["models"]:
            settings = JudgeSettings(
                templates["judge"],
                judging["judge_max_tokens"],
                judging["logprobs"],
                answer_prefill(models[model], judging["answer_prefix"]),
                system=templates.get("judge_system"),
                delivery=persona_delivery(source, role, deliveries or {}),
            )
            requests = settings.cell_requests(texts, topics, personas)
            rows.append(
                estimate_cell(
                    "judging", dataset, condition, model, models[model], requests, cache, asks, rule="judge"
                )
            )
    return rows
