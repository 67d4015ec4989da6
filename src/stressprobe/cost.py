"""The bill before spending it: calls, tokens and dollars each cell still needs, the cache taken into account.

The study-independent half: the bill's row, token and price estimates, the cache view, and the writer of
the bill with its per-model sums, overlap and preflight. Each study prices its own cells with it:
stressprobe.persona.cost_estimate builds the judging cells' requests with the same library functions the
jobs use, so their cache keys are the keys the jobs will look up and requests already in the cache cost
nothing; stressprobe.cdv.cost_bounds bounds the adaptive CDV cells (a search asks what earlier answers call
for) from the search settings: every allowed expansion happens, every question grows to the longest
allowed, the cache is not consulted. Token counts are estimates: prompt tokens from the text length (about
4 characters per token for English, plus the chat format's per-message overhead), completion tokens as the
requested maximum (an upper bound; judges and summarizers stop earlier).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stressprobe.bill import model_bills, model_bills_csv, model_bills_markdown
from stressprobe.io import atomic_write
from stressprobe.llm import Request
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.cache import ResponseCache, cache_exists, cache_key
from stressprobe.llm.usage import cost_usd, effective_price
from stressprobe.overlap import Ask, overlap_csv, overlap_markdown, overlap_rows
from stressprobe.preflight import Finding, model_status, preflight_markdown
from stressprobe.tables import records_csv, records_markdown

CHARS_PER_TOKEN = 4
# OpenAI's counting recipe for chat prompts: each message carries ~4 tokens of role and separators, and
# the reply is primed with 3 more.
MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMING_TOKENS = 3


@dataclass(frozen=True)
class CellEstimate:
    """One row of the bill: a cell's calls, how many are cached, and what the rest will cost."""

    study: str
    dataset: str
    cell: str
    model: str
    calls: int
    cached: int
    to_call: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    # The longest single request (prompt + maximum completion tokens): the preflight checks that it fits a
    # vLLM model's max_model_len.
    longest_request: int = 0


def prompt_tokens(request: Request) -> int:
    """Estimated prompt tokens of a chat request."""
    text_tokens = sum(math.ceil(len(content) / CHARS_PER_TOKEN) for _, content in request.messages)
    return text_tokens + MESSAGE_OVERHEAD_TOKENS * len(request.messages) + REPLY_PRIMING_TOKENS


def completion_tokens(request: Request) -> int:
    """Upper bound of the completion tokens: every sample runs to max_tokens."""
    return request.max_tokens * request.n


def price_usd(entry: Mapping[str, Any], prompt: int, completion: int) -> float:
    """Dollars for the tokens as billed: the model entry's prices (USD per million tokens; local models cost
    0), at the batch rate for a `batch: true` model."""
    return cost_usd(prompt, completion, effective_price(entry))


class CacheView:
    """Which request keys the shared response cache already holds (nothing when it does not exist).

    Read-only (no shard, no claims) and reads only the shards' key indexes, never the responses.
    """

    def __init__(self, path: str | Path) -> None:
        self.cache = ResponseCache(path, read_only=True) if cache_exists(path) else None

    def cached(self, keys: Sequence[str]) -> set[str]:
        return self.cache.contains_many(list(keys)) if self.cache is not None else set()

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def estimate_cell(
    study: str,
    dataset: str,
    cell: str,
    model: str,
    entry: Mapping[str, Any],
    requests: Sequence[Request],
    cache: CacheView,
    asks: list[Ask] | None = None,
    rule: str = "",
) -> CellEstimate:
    """Count a cell's distinct requests, drop the cached ones, and price the rest (its asks go to `asks`,
    under `rule`: the rule whose job sends them, for the overlap count)."""
    identity = backend_identity(model, entry)
    unique = dict(zip((cache_key(identity, r) for r in requests), requests, strict=True))
    if asks is not None:
        asks += [Ask(rule, model, f"{dataset} {cell} {model}", key) for key in unique]
    done = cache.cached(list(unique))
    todo = [r for key, r in unique.items() if key not in done]
    prompt = sum(prompt_tokens(r) for r in todo)
    completion = sum(completion_tokens(r) for r in todo)
    return CellEstimate(
        study=study,
        dataset=dataset,
        cell=cell,
        model=model,
        calls=len(unique),
        cached=len(unique) - len(todo),
        to_call=len(todo),
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=round(price_usd(entry, prompt, completion), 4),
        longest_request=max((prompt_tokens(r) + r.max_tokens for r in unique.values()), default=0),
    )


def bound_row(
    dataset: str, cell: str, model: str, entry: Mapping[str, Any], requests: Iterable[tuple[Request, int]]
) -> CellEstimate:
    """An upper-bound row of CDV work: (request, how many times at most) pairs, never deduplicated."""
    calls = prompt = completion = longest = 0
    for request, times in requests:
        calls += times
        prompt += times * prompt_tokens(request)
        completion += times * completion_tokens(request)
        longest = max(longest, prompt_tokens(request) + request.max_tokens)
    cost = round(price_usd(entry, prompt, completion), 4)
    return CellEstimate(
        "cdv (bound)", dataset, cell, model, calls, 0, calls, prompt, completion, cost, longest
    )


def total_row(rows: Sequence[CellEstimate]) -> CellEstimate:
    """The sum over all cells."""
    return CellEstimate(
        study="total",
        dataset="",
        cell="",
        model="",
        calls=sum(r.calls for r in rows),
        cached=sum(r.cached for r in rows),
        to_call=sum(r.to_call for r in rows),
        prompt_tokens=sum(r.prompt_tokens for r in rows),
        completion_tokens=sum(r.completion_tokens for r in rows),
        cost_usd=round(sum(r.cost_usd for r in rows), 4),
        longest_request=max((r.longest_request for r in rows), default=0),
    )


def estimate_csv(rows: Sequence[CellEstimate]) -> str:
    """The bill as CSV: one row per cell, then the total."""
    return records_csv(CellEstimate, [*rows, total_row(rows)])


def estimate_markdown(rows: Sequence[CellEstimate]) -> str:
    """The bill as a Markdown table with the assumptions it rests on."""
    table = records_markdown(CellEstimate, [*rows, total_row(rows)], {"cost_usd": ".2f"})
    notes = (
        "\nCalls already in the response cache cost nothing and are not counted in `to_call`. "
        "Rows `cdv (bound)` are upper bounds from the search settings (adaptive searches; the cache is not "
        "consulted for them; `benchmark` rows bound rule cdv_benchmark, the DPO comparison rows on "
        "every possible success of the searches); CDV baselines and the prompt classifier are not included.\n"
        f"Prompt tokens are estimated at {CHARS_PER_TOKEN} characters per token plus the chat format's "
        "overhead; completion tokens are the requested maximum (an upper bound). Judge cells of datasets "
        "whose summaries do not exist yet are priced with summaries of the maximum summary length.\n"
    )
    return table + notes


def write_estimate(
    rows: Sequence[CellEstimate],
    csv_path: str | Path,
    md_path: str | Path,
    models: Mapping[str, Mapping[str, Any]] | None = None,
    models_csv_path: str | Path | None = None,
    asks: Sequence[Ask] | None = None,
    overlap_csv_path: str | Path | None = None,
    preflight: Sequence[Finding] | None = None,
) -> str:
    """Write the estimate as CSV and Markdown (with the per-model bill when `models` is given, the
    requests asked by several jobs when `asks` are, each also as CSV, and the preflight's findings beside
    the cost when given); return the Markdown (for the log)."""
    markdown = estimate_markdown(rows)
    if models is not None:
        bills = model_bills(rows, models, model_status(preflight) if preflight is not None else None)
        markdown += "\n## Per model\n\n" + model_bills_markdown(bills)
        if models_csv_path is not None:
            atomic_write(models_csv_path, model_bills_csv(bills))
    if asks is not None:
        overlap = overlap_rows(asks)
        markdown += "\n## Requests asked by more than one job\n\n" + overlap_markdown(overlap)
        if overlap_csv_path is not None:
            atomic_write(overlap_csv_path, overlap_csv(overlap))
    if preflight is not None:
        markdown += (
            "\n## Preflight\n\nBefore anything is paid (`snakemake -f preflight` checks the same and stops on an "
            "error): the model listings, keys, parameter rules, shutdown dates and vLLM models.\n\n"
            + preflight_markdown(preflight)
        )
    atomic_write(csv_path, estimate_csv(rows))
    atomic_write(md_path, markdown)
    return markdown
