"""The openai backend against a real local OpenAI-compatible server: retries, claims, keys, bad input."""

from __future__ import annotations

import json
import logging
import multiprocessing

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, label_distribution, open_client
from stressprobe.llm.serving import free_port
from tests.support.openai_server import OFF_FORMAT_TEXT, OpenAIServer

FORK = multiprocessing.get_context("fork")
KEY_ENV = "STRESSPROBE_TEST_API_KEY"


def registry(server: OpenAIServer, **settings) -> dict:
    entry = {"backend": "openai", "model": "test-model", "base_url": server.base_url, "api_key_env": KEY_ENV}
    entry.update({"concurrency": 8, "timeout_s": 2.0, "max_retries": 6, "backoff_s": 0.01, **settings})
    return {"api": entry}


def judging(count: int, tag: str = "") -> list[Request]:
    return [
        Request.chat(user=f"{tag}pair {i}: give ##final score: <0-3>", max_tokens=8) for i in range(count)
    ]


def test_answers_n_samples_logprobs_and_counts_tokens(tmp_path):
    with OpenAIServer() as server, open_client(registry(server), "api", tmp_path / "c.sqlite") as client:
        (scored, sampled) = client.generate(
            [
                Request.chat(user="Give ##final score", logprobs=4),
                Request.chat(user="Tell me about rivers", n=3, temperature=0.8, seed=7),
            ]
        )
    assert scored.text.startswith("##final score: ") and scored.text[-1] in "0123"
    dist = label_distribution(scored.top_logprobs)
    assert sum(dist.values()) == pytest.approx(1.0)
    assert max(dist, key=dist.get) == scored.text[-1]  # the chosen digit is the most likely label
    assert len(sampled.texts) == 3 and sampled.top_logprobs is None
    assert scored.prompt_tokens > 0 and scored.completion_tokens == len(scored.top_logprobs)


def test_transient_faults_are_retried_logged_and_bounded(tmp_path, caplog):
    faults = {"rate_limit": 0.15, "server_error": 0.1, "timeout": 0.05, "drop": 0.05}
    requests = judging(40)
    with (
        OpenAIServer(faults=faults, seed=3, timeout_sleep=2.0) as server,
        open_client(registry(server, timeout_s=0.5), "api", tmp_path / "c.sqlite") as client,
        caplog.at_level(logging.WARNING, logger="stressprobe"),
    ):
        responses = client.generate(requests)
        client.write_usage(tmp_path / "u.json")
        outcomes, total = server.outcomes, server.total_requests
    assert all(r.error is None for r in responses)
    assert {"rate_limit", "server_error", "timeout", "drop"} <= set(outcomes)
    usage = json.loads((tmp_path / "u.json").read_text())
    assert usage["calls_made"] == 40 and usage["retries"] == total - 40 > 0
    assert sum("retrying in" in r.getMessage() for r in caplog.records) == usage["retries"]


def test_retry_budget_ends_in_a_recorded_error_that_is_not_cached(tmp_path, caplog):
    with OpenAIServer(faults={"server_error": 1.0}) as server:
        with open_client(registry(server, max_retries=2), "api", tmp_path / "c.sqlite") as client:
            (failed,) = client.generate(judging(1))
            (again,) = client.generate(judging(1))
            assert client.cache.count() == 0
        assert list(server.requests.values()) == [6]  # 3 attempts per call, the failure was not cached
    assert failed.texts == [] and again.error is not None
    assert "HTTP 500" in failed.error and "after 3 attempts" in failed.error


def test_empty_and_off_format_answers_are_answers_not_errors(tmp_path):
    with (
        OpenAIServer(faults={"empty": 0.3, "off_format": 0.3}, seed=1) as server,
        open_client(registry(server), "api", tmp_path / "c.sqlite") as client,
    ):
        responses = client.generate(judging(30))
        outcomes = server.outcomes
    assert all(r.error is None for r in responses)
    assert sum(r.text == "" for r in responses) == outcomes["empty"] > 0
    assert (
        sum(bool(r.text) and OFF_FORMAT_TEXT.startswith(r.text) for r in responses)
        == outcomes["off_format"]
        > 0
    )


def test_a_prefilled_answer_stops_the_job_without_a_call(tmp_path):
    # The chat API would answer in a new turn, and the prefix would then be read as the model's answer.
    with OpenAIServer() as server, open_client(registry(server), "api", tmp_path / "c.sqlite") as client:
        with pytest.raises(StressprobeError) as raised:
            client.generate([Request.chat(user="Give ##final score", prefill="##final score:")])
        assert server.total_requests == 0
    assert str(raised.value) == (
        "config models.api.answer_prefill: 'test-model' refuses a parameter of the request (the OpenAI chat "
        "API cannot continue a prefilled answer); remove models.api.answer_prefill (only vLLM models continue "
        "a prefilled answer); the answers received so far stay cached"
    )


def _run_job(base_url: str, cache_path: str, results, index: int) -> None:
    server_stub = type("S", (), {"base_url": base_url})()
    with open_client(registry(server_stub, concurrency=4), "api", cache_path) as client:
        responses = client.generate(judging(24))
        results[index] = ([r.text for r in responses], client.usage.calls_made)


def test_two_jobs_sharing_the_cache_never_pay_twice(tmp_path):
    cache_path = str(tmp_path / "c.sqlite")
    with OpenAIServer(latency=0.05) as server:
        manager = FORK.Manager()
        results = manager.dict()
        jobs = [
            FORK.Process(target=_run_job, args=(server.base_url, cache_path, results, i)) for i in range(2)
        ]
        for job in jobs:
            job.start()
        for job in jobs:
            job.join(60)
        counts = server.requests
    assert [job.exitcode for job in jobs] == [0, 0]
    assert len(counts) == 24 and set(counts.values()) == {1}
    (texts_a, calls_a), (texts_b, calls_b) = results[0], results[1]
    assert texts_a == texts_b and calls_a + calls_b == 24


def test_planted_key_never_written(tmp_path, monkeypatch, caplog):
    key = "sk-planted-7f3a9c1e5b2d4086"
    monkeypatch.setenv(KEY_ENV, key)
    with (
        OpenAIServer(faults={"rate_limit": 0.2, "server_error": 0.1}, require_key=key) as server,
        caplog.at_level(logging.DEBUG),
    ):
        with open_client(registry(server, max_retries=1), "api", tmp_path / "c.sqlite") as client:
            client.generate(judging(20))
            client.write_usage(tmp_path / "u.usage.json")
        assert server.api_keys == {key}  # the key really was used
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 2
    for path in written:
        assert key.encode() not in path.read_bytes(), path
    assert key not in caplog.text


def test_rejected_key_stops_open_client(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-0000000000")
    with OpenAIServer(require_key="sk-right") as server, pytest.raises(StressprobeError) as info:
        open_client(registry(server), "api", tmp_path / "c.sqlite")
    assert "models.api.api_key_env" in str(info.value) and "sk-wrong" not in str(info.value)


@pytest.mark.parametrize(
    ("models", "name", "needle"),
    [
        ({"a": {"backend": "llamacpp", "gguf": "x.gguf"}}, "nope", "'nope' is not in the registry"),
        ({"a": {"backend": "tgi", "model": "m"}}, "a", "models.a.backend: unknown backend 'tgi'"),
        (
            {"a": {"backend": "llamacpp", "gguf": "/nowhere/m.gguf"}},
            "a",
            "models.a.gguf: GGUF file not found",
        ),
        ({"a": {"backend": "llamacpp", "gguf": "package:no_such_pkg/m.gguf"}}, "a", "'no_such_pkg' of"),
        (
            {"a": {"backend": "openai", "model": "m", "api_key_env": "UNSET_VAR_X"}},
            "a",
            "UNSET_VAR_X is not set",
        ),
        (
            {"a": {"backend": "openai", "model": "m", "base_url": f"http://127.0.0.1:{free_port()}/v1"}},
            "a",
            "models.a.base_url: cannot reach",
        ),
    ],
)
def test_bad_model_config_is_one_line_error_before_any_call(tmp_path, monkeypatch, models, name, needle):
    monkeypatch.delenv("UNSET_VAR_X", raising=False)
    with pytest.raises(StressprobeError) as info:
        open_client(models, name, tmp_path / "c")
    message = str(info.value)
    assert needle in message and "\n" not in message and "; " in message  # what is wrong; what to fix
    assert not (tmp_path / "c").exists()
