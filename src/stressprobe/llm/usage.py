"""Counting what a job spent: model calls, cache hits, failures, tokens and the estimated cost."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from stressprobe.llm.types import Response


@dataclass
class Usage:
    """Running totals of one client; tokens and cost count only calls actually made (not cache hits)."""

    calls_made: int = 0
    cache_hits: int = 0
    errors: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def record_call(self, response: Response) -> None:
        """A response computed by the model now (successful or failed)."""
        if response.error is not None:
            self.errors += 1
            return
        self.calls_made += 1
        self.prompt_tokens += response.prompt_tokens
        self.completion_tokens += response.completion_tokens

    def record_hit(self) -> None:
        """A response answered without a model call (cache, or a duplicate in the same batch)."""
        self.cache_hits += 1

    @classmethod
    def of(cls, responses: Iterable[Response]) -> Usage:
        """What a client counts for these responses: a call for each computed now, a hit for each cached."""
        usage = cls()
        for response in responses:
            if response.cached:
                usage.record_hit()
            else:
                usage.record_call(response)
        return usage

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(Usage)})


def cost_usd(prompt_tokens: int, completion_tokens: int, price: Mapping[str, float] | None) -> float:
    """Estimated cost from a model entry's per-million-token prices (no entry or missing prices count as 0)."""
    price = price or {}
    return (
        prompt_tokens * float(price.get("prompt_per_1m", 0.0))
        + completion_tokens * float(price.get("completion_per_1m", 0.0))
    ) / 1e6


BATCH_PRICE_FACTOR = 0.5


def effective_price(entry: Mapping[str, Any]) -> dict[str, float]:
    """The entry's prices as billed: scaled by `batch_price_factor` (the Batch API's 50 %) for `batch: true`."""
    price = dict(entry.get("price") or {})
    if entry.get("batch", False):
        factor = float(entry.get("batch_price_factor", BATCH_PRICE_FACTOR))
        price = {k: float(v) * factor for k, v in price.items()}
    return price


def usage_record(model: str, backend: str, usage: Usage, price: Mapping[str, float] | None) -> dict[str, Any]:
    """The usage sidecar's content."""
    return {
        "model": model,
        "backend": backend,
        "calls_made": usage.calls_made,
        "cache_hits": usage.cache_hits,
        "errors": usage.errors,
        "retries": usage.retries,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost_usd": round(cost_usd(usage.prompt_tokens, usage.completion_tokens, price), 6),
    }
