"""The `openai` backend against a real OpenAI-compatible server running a real model.

llama-cpp-python's own server (`python -m llama_cpp.server`, the `server` extra) serves the demo GGUF on
127.0.0.1; the workflow's judge and CDV search cells reach it through the `openai` backend with `base_url`,
as they would reach `vllm serve` or llama.cpp's server on a GPU node.

Greedy answers must equal the in-process `llamacpp` backend's: both render the prompt with the GGUF's own
chat template and pick the most likely token at every step of the same weights, with the same context size
and threads. (They could differ only where two tokens' logits tie to float precision, e.g. if the server
evaluated the prompt in other batch sizes; the assertions below would then name the differing prompt.)
Not prefilled: the `openai` backend refuses `answer_prefill` (the chat API cannot continue an answer), so
the comparison is of plain, non-prefilled prompts.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from api_workdir import (
    judge_cell,
    run_workflow,
    write_api_config,
    write_cdv_questions,
    write_judging_data,
)
from helpers import make_workdir
from llama_server import LlamaServer, demo_gguf

from stressprobe.llm import Request, open_client

pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server] (the test extra)")
pytestmark = pytest.mark.slow

LOCAL = {"backend": "llamacpp", "gguf": "", "n_ctx": 2048, "n_threads": 2}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with LlamaServer(log_path=log) as running:
        yield running


def remote_entry(server) -> dict:
    return {
        "backend": "openai",
        "model": server.model_id,
        "base_url": server.base_url,
        "api_key_env": "STRESSPROBE_TEST_API_KEY",
        "concurrency": 1,  # the server answers one request at a time anyway
        "timeout_s": 120,
        "max_retries": 1,
    }


def in_process(requests: list[Request], cache) -> list:
    entry = {**LOCAL, "gguf": str(demo_gguf())}
    with open_client({"local": entry}, "local", cache) as client:
        return client.generate(requests)


def assert_same_greedy_answers(requests, remote, local) -> None:
    for request, r, lo in zip(requests, remote, local, strict=True):
        assert r.error is None and lo.error is None
        assert r.text == lo.text, f"greedy answers differ for {request.messages[-1][1][:80]!r}"
        if request.logprobs and r.top_logprobs is not None:
            # The server returns logprobs: same distribution over the first generated token.
            first_remote, first_local = r.top_logprobs[0], lo.top_logprobs[0]
            assert max(first_remote, key=first_remote.get) == max(first_local, key=first_local.get)
            for token in set(first_remote) & set(first_local):
                assert first_remote[token] == pytest.approx(first_local[token], abs=0.05)


def test_greedy_answers_and_logprobs_match_the_in_process_backend(server, tmp_path):
    requests = [
        Request.chat(
            system="You are a relevance assessor.",
            user="Query: why is the sky blue\nPassage: Rayleigh scattering of sunlight.\n"
            "Grade 0-3. Answer with ##final score: <grade>",
            max_tokens=12,
            logprobs=5,
        ),
        Request.chat(user="Which planet is known as the red planet? Answer with one word.", max_tokens=8),
        Request.chat(user="List three colours.", max_tokens=16, stop=("\n\n",)),
    ]
    with open_client({"remote": remote_entry(server)}, "remote", tmp_path / "r.sqlite") as client:
        remote = client.generate(requests)
    local = in_process(requests, tmp_path / "l.sqlite")
    assert remote[0].top_logprobs, "llama.cpp's server returns top logprobs of chat completions"
    assert_same_greedy_answers(requests, remote, local)


def cached_requests(cache_path) -> list[tuple[Request, dict]]:
    """Every (request, response payload) a run stored, rebuilt from the cache's request records."""
    with sqlite3.connect(f"file:{cache_path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT request, response FROM responses").fetchall()
    found = []
    for request_json, response_json in rows:
        record = json.loads(request_json)
        decoding = dict(record["decoding"])
        decoding["stop"] = tuple(decoding["stop"])
        found.append(
            (Request(messages=tuple(map(tuple, record["messages"])), **decoding), json.loads(response_json))
        )
    return found


def test_judge_and_cdv_cells_end_to_end_through_the_server(server, tmp_path):
    workdir = make_workdir(tmp_path / "w")
    write_judging_data(workdir, queries=1, passages=2)
    write_cdv_questions(workdir)
    config = write_api_config(
        workdir,
        server.base_url,
        {
            "models.api.model": server.model_id,
            "models.api.concurrency": 1,
            "models.api.timeout_s": 120,
            "cdv.datasets.tinyqa.n": 1,
            "cdv.search.samples": 2,
        },
    )
    cell = judge_cell(workdir)
    search = workdir / "results" / "cdv" / "tinyqa" / "api" / "api" / "search.summary.json"
    run_workflow(
        workdir, config, str(cell["judgments"].relative_to(workdir)), str(search.relative_to(workdir))
    )

    judgments = [json.loads(line) for line in cell["judgments"].read_text().splitlines()]
    assert len(judgments) == 2 and all(j["qid"] for j in judgments)
    assert json.loads(cell["usage"].read_text())["calls_made"] == 2
    assert json.loads(search.read_text())["questions"] == 1

    # Every greedy request the workflow sent (judge and CDV victim/semantic checks) answers the same in process.
    stored = cached_requests(workdir / "results" / "cache" / "llm.sqlite")
    greedy = [(r, p) for r, p in stored if r.temperature == 0]
    assert len(greedy) >= 3
    local = in_process([r for r, _ in greedy], tmp_path / "local.sqlite")
    for (request, payload), lo in zip(greedy, local, strict=True):
        assert payload["texts"][0] == lo.text, f"greedy answers differ for {request.messages[-1][1][:80]!r}"
    judge_requests = [(r, p) for r, p in greedy if r.logprobs]
    assert judge_requests and all(p["top_logprobs"] for _, p in judge_requests), "logprobs came back"
