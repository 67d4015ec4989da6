"""The `openai` backend against a real OpenAI-compatible server running a real model.

llama-cpp-python's own server (`python -m llama_cpp.server`, the `server` extra) serves the demo GGUF on
127.0.0.1; the workflow's judge and CDV search cells reach it through the `openai` backend with `base_url`,
as they would reach `vllm serve` or llama.cpp's server on a GPU node.

Greedy answers must equal the in-process `llamacpp` backend's: both render the prompt with the GGUF's own
chat template and pick the most likely token at every step of the same weights, once the server is told
not to penalise repetitions (`extra_body: {repeat_penalty: 1.0}`: llama.cpp's server applies 1.1 by default,
which OpenAI's API does not, and which changed a greedy answer here). They may still part where
two tokens are tied to rounding: llama.cpp reuses the KV cache of the previous prompt's shared prefix, so
the two sides evaluate a prompt in different batch splits (the server in arrival order, the in-process
backend in sorted order), whose float sums differ in the last bits (about 1e-6 in a logprob). The test
therefore accepts a difference only at a token where both sides' top two candidates lie within `TIE_NATS`
of each other and the log-probabilities agree up to there; anything else (another template, other decoding)
fails. Not prefilled: the `openai` backend refuses `answer_prefill` (the chat API cannot continue an
answer), so the comparison is of plain, non-prefilled prompts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, Response, open_client
from stressprobe.llm.cache import iter_records
from tests.support.api_workdir import (
    judge_cell,
    run_workflow,
    write_api_config,
    write_cdv_questions,
    write_judging_data,
)
from tests.support.helpers import make_workdir
from tests.support.llama_server import LlamaServer, demo_gguf

log = logging.getLogger(__name__)

pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server] (the test extra)")
pytestmark = pytest.mark.slow

LOCAL = {"backend": "llamacpp", "gguf": "", "n_ctx": 2048, "n_threads": 2}
TIE_NATS = 0.01
LOGPROB_TOLERANCE = 1e-3


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
        # llama.cpp's server penalises repeated tokens (repeat_penalty 1.1) unless told; OpenAI does not.
        "extra_body": {"repeat_penalty": 1.0},
        "concurrency": 1,  # the server answers one request at a time anyway
        "timeout_s": 120,
        "max_retries": 1,
    }


def in_process(requests: list[Request], cache) -> list:
    entry = {**LOCAL, "gguf": str(demo_gguf())}
    with open_client({"local": entry}, "local", cache) as client:
        return client.generate(requests)


def why_greedy_differs(remote: Response, local: Response) -> str | None:
    """None when both greedy answers are equal; else the near-tie that explains the difference.

    Fails (AssertionError) when the answers differ without a near-tie, or the log-probabilities disagree.
    """
    assert remote.error is None and local.error is None, (remote.error, local.error)
    if remote.text == local.text:
        return None
    assert remote.top_logprobs and local.top_logprobs, "a difference can only be judged with logprobs"
    for i, (theirs, ours) in enumerate(zip(remote.top_logprobs, local.top_logprobs, strict=False)):
        top_theirs, top_ours = max(theirs, key=theirs.get), max(ours, key=ours.get)
        if top_theirs == top_ours:
            for token in set(theirs) & set(ours):
                assert theirs[token] == pytest.approx(ours[token], abs=LOGPROB_TOLERANCE), (i, token)
            continue
        gap_ours = ours[top_ours] - ours.get(top_theirs, -math.inf)
        gap_theirs = theirs[top_theirs] - theirs.get(top_ours, -math.inf)
        assert gap_ours < TIE_NATS and gap_theirs < TIE_NATS, (
            f"answers part at token {i} ({top_theirs!r} vs {top_ours!r}) without a tie: "
            f"gaps {gap_theirs:.4f} / {gap_ours:.4f} nats"
        )
        return f"token {i}: {top_theirs!r} vs {top_ours!r} tied within {max(gap_ours, gap_theirs):.2e} nats"
    raise AssertionError("the texts differ but every compared token agrees")


def test_greedy_answers_and_logprobs_match_the_in_process_backend(server, tmp_path):
    requests = [
        Request.chat(
            system="You are a relevance assessor.",
            user="Query: why is the sky blue\nPassage: Rayleigh scattering of sunlight.\n"
            "Grade 0-3. Answer with ##final score: <grade>",
            max_tokens=12,
            logprobs=5,
        ),
        Request.chat(
            user="Which planet is known as the red planet? Answer with one word.", max_tokens=8, logprobs=5
        ),
        Request.chat(user="List three colours.", max_tokens=16, stop=("\n\n",), logprobs=5),
    ]
    with open_client({"remote": remote_entry(server)}, "remote", tmp_path / "r.sqlite") as client:
        remote = client.generate(requests)
    local = in_process(requests, tmp_path / "l.sqlite")
    assert all(r.top_logprobs for r in remote), "llama.cpp's server returns top logprobs of chat completions"
    reasons = [why_greedy_differs(r, lo) for r, lo in zip(remote, local, strict=True)]
    log.info("greedy differences explained by near-ties: %s", reasons)
    assert remote[0].text == local[0].text  # the judge answer itself


def cached_requests(cache_path) -> list[tuple[Request, dict]]:
    """Every (request, response payload) a run stored, rebuilt from the cache's request records."""
    found = []
    for stored in iter_records(cache_path):
        record = stored["request"]
        decoding = dict(record["decoding"])
        decoding["stop"] = tuple(decoding["stop"])
        found.append(
            (Request(messages=tuple(map(tuple, record["messages"])), **decoding), stored["response"])
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
            "models.api.extra_body": {"repeat_penalty": 1.0},
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

    # Every request the workflow sent answers the same in process: greedy ones as sent, sampled ones (the CDV
    # victim's) asked again greedily on both sides; or they part at a near-tie (told apart with logprobs).
    stored = cached_requests(workdir / "results" / "cache" / "llm")
    judge_requests = [(r, p) for r, p in stored if r.logprobs]
    assert len(judge_requests) == 2 and all(p["top_logprobs"] for _, p in judge_requests), (
        "logprobs came back"
    )
    sampled = [(r, p) for r, p in stored if r.temperature > 0]
    assert sampled and all(len(p["texts"]) == r.n for r, p in sampled), "the CDV victim's samples came back"
    greedy = [(r, p) for r, p in stored if r.temperature == 0]
    local = in_process([r for r, _ in greedy], tmp_path / "local.sqlite")
    differing = [r for (r, p), lo in zip(greedy, local, strict=True) if p["texts"][0] != lo.text]
    again = [dataclasses.replace(r, logprobs=5) for r in differing]
    again += [dataclasses.replace(r, temperature=0.0, n=1, logprobs=5) for r, _ in sampled]
    with open_client({"remote": remote_entry(server)}, "remote", tmp_path / "again.sqlite") as client:
        remote = client.generate(again)
    local_again = in_process(again, tmp_path / "local-again.sqlite")
    for r, lo in zip(remote, local_again, strict=True):
        log.info("greedy difference: %s", why_greedy_differs(r, lo))


def test_a_prompt_over_the_servers_context_stops_the_job_with_llama_cpps_reason(server, tmp_path):
    # The same failure policy as in process (stressprobe.llm.failures): llama.cpp's server answers HTTP 400
    # context_length_exceeded; the answer before it stays cached, and it is not retried.
    short = Request.chat(user="Which planet is known as the red planet? One word.", max_tokens=4)
    long = Request.chat(user="word " * 2100, max_tokens=4)
    with open_client({"remote": remote_entry(server)}, "remote", tmp_path / "c.sqlite") as client:
        with pytest.raises(StressprobeError) as raised:
            client.generate([short, long])
        assert client.cache.count() == 1
    message = str(raised.value)
    assert message.startswith(
        "config models.remote: 'smollm2-135m' cannot take a prompt this long (HTTP 400 context_length_exceeded: "
        "This model's maximum context length is 2048 tokens. However, you requested "
    )
    assert message.endswith(
        "shorten the inputs or use a model with a longer context; the answers received so far stay cached"
    )
