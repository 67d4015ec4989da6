"""The bill per model: the estimate's rows summed per model, at list and batch price, with GPU hours."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stressprobe.llm.usage import BATCH_PRICE_FACTOR, cost_usd, effective_price
from stressprobe.tables import records_csv, records_markdown


@dataclass(frozen=True)
class ModelBill:
    """One model's part of the bill: calls cached vs to pay, synchronous vs batch price, GPU hours."""

    model: str
    backend: str
    calls: int
    cached: int
    to_call: int
    prompt_tokens: int
    completion_tokens: int
    sync_usd: float
    batch_usd: float | None  # None: no batch API for this backend
    billed_usd: float  # what the config will pay (batch price for `batch: true`)
    gpu_hours: float | None  # vLLM models with a configured throughput; None otherwise
    preflight: str = ""  # the preflight's verdict on the model (ok, warning, error); "" when not run


def gpu_hours(entry: Mapping[str, Any], calls: int, tokens: int) -> float | None:
    """GPU hours of a vLLM model's calls from its `throughput` (requests/s or tokens/s of one instance),
    times the GPUs an instance holds; None for other backends or without a throughput."""
    throughput = entry.get("throughput") or {}
    if entry.get("backend") != "vllm":
        return None
    if throughput.get("requests_per_s"):
        seconds = calls / float(throughput["requests_per_s"])
    elif throughput.get("tokens_per_s"):
        seconds = tokens / float(throughput["tokens_per_s"])
    else:
        return None
    return seconds / 3600 * int(entry.get("gpus", 1))


def model_bills(
    rows: Sequence[Any],
    models: Mapping[str, Mapping[str, Any]],
    preflight: Mapping[str, str] | None = None,
) -> list[ModelBill]:
    """The rows summed per model, priced synchronously and at the batch rate (API models), with the
    preflight's verdict per model when given (models it had nothing to check for: `-`)."""
    bills = []
    for name in sorted({r.model for r in rows}):
        mine = [r for r in rows if r.model == name]
        entry = models[name]
        prompt = sum(r.prompt_tokens for r in mine)
        completion = sum(r.completion_tokens for r in mine)
        to_call = sum(r.to_call for r in mine)
        sync = cost_usd(prompt, completion, entry.get("price"))
        batch = None
        if entry.get("backend") == "openai":
            batch = sync * float(entry.get("batch_price_factor", BATCH_PRICE_FACTOR))
        hours = gpu_hours(entry, to_call, prompt + completion)
        bills.append(
            ModelBill(
                model=name,
                backend=str(entry.get("backend")),
                calls=sum(r.calls for r in mine),
                cached=sum(r.cached for r in mine),
                to_call=to_call,
                prompt_tokens=prompt,
                completion_tokens=completion,
                sync_usd=round(sync, 4),
                batch_usd=None if batch is None else round(batch, 4),
                billed_usd=round(cost_usd(prompt, completion, effective_price(entry)), 4),
                gpu_hours=None if hours is None else round(hours, 3),
                preflight="" if preflight is None else preflight.get(name, "-"),
            )
        )
    return bills


def model_bills_csv(bills: Sequence[ModelBill]) -> str:
    """The per-model bill as CSV (empty cells where a backend has no batch price or GPU hours)."""
    return records_csv(ModelBill, bills)


def model_bills_markdown(bills: Sequence[ModelBill]) -> str:
    two_decimals = dict.fromkeys(("sync_usd", "batch_usd", "billed_usd", "gpu_hours"), ".2f")
    table = records_markdown(ModelBill, bills, two_decimals)
    notes = (
        "\nPer model: `sync_usd` at the list price, `batch_usd` at the Batch API's rate "
        "(`batch_price_factor`, OpenAI-compatible APIs only), `billed_usd` what this config pays (the batch "
        "rate for `batch: true` models). `gpu_hours`: the calls to make at the model's configured "
        "`throughput` (requests/s, else tokens/s of prompt and completion), times its `gpus`; '-' when none "
        "is configured. `preflight`: its verdict on the model (`ok`, `warning`, `error`; details below; `-`: "
        "nothing to check, e.g. llama.cpp). CDV rows are upper bounds, so these sums are too where a model has CDV work.\n"
    )
    return table + notes
