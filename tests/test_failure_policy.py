"""One failure policy on every backend (stressprobe.llm.failures), on the real local servers the other tests
run: a transient failure is retried; a request that can never succeed as sent stops the job with one line
naming `models.<name>`, the model id and the provider's reason, after a single attempt, and the answers that
came back before it stay in the cache, so the rerun pays nothing twice.

The in-process llama.cpp case is in tests/test_llm_llamacpp.py, the llama.cpp server's in
tests/test_llm_server.py (both on the real model); the job-level case (a snakemake job) is the last test here.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from stressprobe.llm import Request, open_client
from stressprobe.llm.cache import cache_key
from stressprobe.llm.failures import ModelRefused, classify
from stressprobe.llm.serving import SERVED_URL_KEY, serve_models
from tests.support.api_workdir import (
    cached_messages,
    error_lines,
    judge_cell,
    run_workflow,
    write_api_config,
    write_judging_data,
)
from tests.support.batch_server import BatchServer
from tests.support.helpers import ROOT, make_workdir
from tests.support.openai_server import ModelRules, OpenAIServer

KEY_ENV = "STRESSPROBE_TEST_API_KEY"
SHORT = [Request.chat(user=f"question {i}: answer yes or no", max_tokens=8) for i in range(2)]
LONG = Request.chat(user="word " * 300 + "answer yes or no", max_tokens=8)
KEPT = "; the answers received so far stay cached"
# The servers' refusals (tests/support/openai_server.py, model_rules): `{}` serves no model id (test-model
# retired); this one serves test-model but refuses a temperature.
REFUSES_TEMPERATURE = {"test-model": ModelRules(rejected_params=("temperature",))}


def api_entry(base_url: str, **settings) -> dict:
    entry = {"backend": "openai", "model": "test-model", "base_url": base_url, "api_key_env": KEY_ENV}
    # One request at a time: the requests before a refused one are answered, the ones after it never sent.
    entry.update({"concurrency": 1, "timeout_s": 2.0, "max_retries": 3, "backoff_s": 0.01, **settings})
    return entry


def batch_entry(base_url: str, **settings) -> dict:
    return api_entry(base_url, batch=True, batch_poll_s=0.02, **settings)


def stop_line(client, requests) -> str:
    """The one line the job stops with."""
    with pytest.raises(ModelRefused) as raised:
        client.generate(requests)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


def first_call_stop_line(server, tmp_path) -> str:
    """The line an API client of `server` stops with at its first request, asked once."""
    with open_client({"api": api_entry(server.base_url)}, "api", tmp_path / "c") as client:
        message = stop_line(client, SHORT)
    assert server.total_requests == 1
    return message


@pytest.mark.parametrize(
    ("status", "code", "message", "kind"),
    [
        (429, None, "rate limited", "transient"),
        (500, None, "internal error", "transient"),
        (503, None, "This model's maximum context length is busy", "transient"),  # status first
        (408, None, "request timeout", "transient"),
        (None, None, "APITimeoutError", "transient"),
        (404, "model_not_found", "The model `x` does not exist", "model"),
        (404, 404, "The model `x` does not exist.", "model"),  # vllm serve: the code is the status
        (400, "model_not_found", "The model `x.gguf` does not exist", "model"),  # llama.cpp's server
        (401, None, "Missing scopes: model.request.", "auth"),
        (403, None, "Country, region, or territory not supported", "auth"),
        (400, "context_length_exceeded", "too long", "context"),
        (400, 400, "This model's maximum context length is 4096 tokens. However, ...", "context"),
        (400, "unsupported_parameter", "Unsupported parameter: 'max_tokens'", "parameter"),
        (400, "unsupported_value", "Unsupported value: 'temperature' does not support 0", "parameter"),
        (400, None, "'messages' must contain the word 'json'", "request"),
        (422, None, "unprocessable", "request"),
    ],
)
def test_every_failure_has_one_class(status, code, message, kind):
    assert classify(status, code, message) == kind


# -- OpenAI (and any OpenAI-compatible server): one class per test server switch --


def test_openai_retired_model_stops_after_one_attempt(tmp_path):
    with OpenAIServer(model_rules={}) as server:
        with open_client({"api": api_entry(server.base_url)}, "api", tmp_path / "c") as client:
            message = stop_line(client, [*SHORT, LONG])
            assert client.cache.count() == 0
        assert server.total_requests == 1  # not retried, and nothing sent after it
    assert message == (
        "config models.api.model: 'test-model' is not served: retired, or a wrong id (HTTP 404 "
        "model_not_found: The model `test-model` does not exist or you do not have access to it.); set "
        "models.api.substitute to a current model id (or correct models.api.model if misspelt)" + KEPT
    )


def test_openai_prompt_over_the_context_stops_and_the_answers_before_it_stay(tmp_path):
    with OpenAIServer(context_tokens=100) as server:
        with open_client({"api": api_entry(server.base_url)}, "api", tmp_path / "c") as client:
            message = stop_line(client, [SHORT[0], LONG, SHORT[1]])
            assert client.cache.count() == 1  # SHORT[0], answered before LONG was refused
        assert server.total_requests == 2  # LONG once: a permanent failure is not retried
    assert message.startswith(
        "config models.api: 'test-model' cannot take a prompt this long (HTTP 400 context_length_exceeded: "
        "This model's maximum context length is 100 tokens. However, you requested 312 tokens"
    )
    assert message.endswith("; shorten the inputs or use a model with a longer context" + KEPT)
    # The inputs shortened, the rerun pays only for what was never answered.
    with OpenAIServer(context_tokens=100) as server:
        with open_client({"api": api_entry(server.base_url)}, "api", tmp_path / "c") as client:
            first, second = client.generate(SHORT)
        assert server.total_requests == 1
    assert first.cached and not second.cached and second.error is None


def test_openai_refused_parameter_stops_and_unsupported_params_mends_it(tmp_path):
    with OpenAIServer(model_rules=REFUSES_TEMPERATURE) as server:
        message = first_call_stop_line(server, tmp_path)
        assert message == (
            "config models.api: 'test-model' refuses a parameter of the request (HTTP 400 unsupported_parameter: "
            "Unsupported parameter: 'temperature' is not supported with this model.); list it under "
            "models.api.unsupported_params (or set its token_limit_param or system_role)" + KEPT
        )
        entry = api_entry(server.base_url, unsupported_params=["temperature"])
        with open_client({"api": entry}, "api", tmp_path / "c") as client:
            assert all(r.error is None and r.text for r in client.generate(SHORT))


def test_openai_key_refused_for_completions_stops_after_one_attempt(tmp_path):
    # A restricted key lists the models (so opening the client succeeds) but may not call them.
    with OpenAIServer(missing_scope=True) as server:
        message = first_call_stop_line(server, tmp_path)
    assert message == (
        "config models.api.api_key_env: 'test-model' was refused: the API key is not accepted for it (HTTP 401: "
        "You have insufficient permissions for this operation. Missing scopes: model.request.); check the key "
        "in the environment variable models.api.api_key_env names" + KEPT
    )


def test_transient_failures_are_still_retried_into_an_answer(tmp_path):
    with OpenAIServer(faults={"rate_limit": 0.2, "server_error": 0.2}, seed=4) as server:
        entry = api_entry(server.base_url, concurrency=4, max_retries=8)
        with open_client({"api": entry}, "api", tmp_path / "c") as client:
            responses = client.generate([Request.chat(user=f"q{i} yes or no") for i in range(12)])
        outcomes = server.outcomes
    assert all(r.error is None for r in responses)
    assert outcomes["rate_limit"] + outcomes["server_error"] > 0 and "refused" not in outcomes


# -- the Batch API --


def test_batch_retired_model_fails_validation_and_stops(tmp_path):
    with BatchServer(model_rules={}) as server:
        with open_client({"api": batch_entry(server.base_url)}, "api", tmp_path / "c") as client:
            message = stop_line(client, SHORT)
            assert client.cache.count() == 0
        assert server.batches_created == 1  # a failed validation is not sent again
    assert message.startswith(
        "config models.api.model: 'test-model' is not served: retired, or a wrong id (batch "
    )
    assert "failed: model_not_found: The model `test-model` does not exist" in message
    assert list((tmp_path / "batches" / "api").glob("*.json")) == []  # nothing left to re-attach to


def test_batch_prompt_over_the_context_stops_once_the_batch_answers_are_stored(tmp_path):
    with BatchServer(context_tokens=100) as server:
        with open_client({"api": batch_entry(server.base_url)}, "api", tmp_path / "c") as client:
            message = stop_line(client, [SHORT[0], LONG, SHORT[1]])
            assert client.cache.count() == 2  # both short answers of the ended batch are stored
        assert server.batches_created == 1
        assert message.startswith(
            "config models.api: 'test-model' cannot take a prompt this long (HTTP 400 context_length_exceeded: "
            "This model's maximum context length is 100 tokens."
        )
        with open_client({"api": batch_entry(server.base_url)}, "api", tmp_path / "c") as client:
            assert all(r.cached for r in client.generate(SHORT))
        assert server.batches_created == 1  # the rerun paid nothing


def test_batch_refused_parameter_stops_and_unsupported_params_reach_the_batch_body(tmp_path):
    with BatchServer(model_rules=REFUSES_TEMPERATURE) as server:
        with open_client({"api": batch_entry(server.base_url)}, "api", tmp_path / "c") as client:
            message = stop_line(client, SHORT)
        assert (
            "refuses a parameter of the request (HTTP 400 unsupported_parameter: Unsupported parameter: "
            in message
        )
        entry = batch_entry(server.base_url, unsupported_params=["temperature"])
        with open_client({"api": entry}, "api", tmp_path / "c") as client:
            assert all(r.error is None and r.text for r in client.generate(SHORT))


def test_batch_key_without_the_files_scope_stops_before_any_batch(tmp_path):
    # A restricted key lists the models (so opening the client succeeds) but may not upload.
    with BatchServer(missing_scopes=("api.files.write",)) as server:
        with open_client({"api": batch_entry(server.base_url)}, "api", tmp_path / "c") as client:
            message = stop_line(client, SHORT)
        assert server.batches_created == 0
    assert message == (
        "config models.api.api_key_env: 'test-model' was refused: the API key is not accepted for it (files.create: "
        "HTTP 401: You have insufficient permissions for this operation. Missing scopes: api.files.write.); check "
        "the key in the environment variable models.api.api_key_env names" + KEPT
    )


def test_batch_the_account_does_not_know_stops_naming_the_ledger_and_keeps_it(tmp_path):
    # A ledger left by a run on another account (or base_url): its batch is unknown here.
    with BatchServer() as server:
        with open_client({"api": batch_entry(server.base_url)}, "api", tmp_path / "c") as client:
            ledger = client.backend.ledger
            keys = [cache_key(client.backend.identity, r) for r in SHORT]
            ledger.write(
                {"model": "api", "input_file_id": "file-x", "batch_id": "batch_gone", "custom_ids": keys}
            )
            message = stop_line(client, SHORT)
        assert server.batches_created == 0
    assert message == (
        "config models.api: 'test-model' refuses the request as sent (batches.retrieve: HTTP 404: No batch found "
        f"with id 'batch_gone'.); check models.api.base_url and the account; the ledger is {ledger.folder}"
        + KEPT
    )
    assert len(ledger.entries()) == 1  # kept: nothing it names is paid again unless the user removes it


# -- vLLM: in-process and served (the stand-in of tests/support/vllm_standin) --

STANDIN = ROOT / "tests" / "support" / "vllm_standin"
VLLM = {"backend": "vllm", "model": "org/small-8b", "max_model_len": 64, "batch_size": 2}
# The stand-in counts a token per 4 characters: 400 characters are 100 tokens.
VLLM_LONG = Request.chat(user="x" * 400, max_tokens=8)


@pytest.fixture
def standin(monkeypatch):
    path = os.pathsep.join(filter(None, [str(STANDIN), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)


def test_vllm_in_process_prompt_over_max_model_len_stops_and_earlier_calls_stay(standin, tmp_path):
    with open_client({"small": VLLM}, "small", tmp_path / "c") as client:
        # batch_size 2: the first call (two short requests) is committed before the second is refused.
        message = stop_line(client, [*SHORT, VLLM_LONG])
        assert client.cache.count() == 2
    assert message.startswith(
        "config models.small.max_model_len: 'org/small-8b' cannot take a prompt this long (This model's "
        "maximum context length is 64 tokens. However, your prompt contains 100 input tokens"
    )
    assert message.endswith(
        "(max_model_len 64)); raise models.small.max_model_len (up to the model's context length) or shorten "
        "the inputs; vLLM's messages are in the job's log" + KEPT
    )


def test_served_vllm_prompt_over_max_model_len_stops_with_the_same_line(standin, tmp_path):
    long = Request.chat(user="word " * 80, max_tokens=8)  # 81 tokens as the server counts
    with serve_models({"small": VLLM}, ["small"], tmp_path / "logs" / "job", seed=1) as served:
        assert SERVED_URL_KEY in served["small"]
        with open_client(served, "small", tmp_path / "c") as client:
            message = stop_line(client, [SHORT[0], long])
            assert client.cache.count() == 1
    assert message.startswith(
        "config models.small: 'org/small-8b' cannot take a prompt this long (HTTP 400: This model's maximum "
        "context length is 64 tokens."
    )
    assert message.endswith("; shorten the inputs or use a model with a longer context" + KEPT)


# -- a snakemake job --


@pytest.mark.slow
def test_a_job_whose_model_is_retired_stops_with_one_line_no_output_and_keeps_the_cache(tmp_path):
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir, queries=1)
    cell = judge_cell(workdir)
    target = str(cell["judgments"].relative_to(workdir))
    cache = workdir / "results" / "cache" / "llm"
    with OpenAIServer() as server:
        run_workflow(workdir, write_api_config(workdir, server.base_url), target)
    paid = cached_messages(cache)
    assert len(paid) == 3 and cell["judgments"].exists()

    write_judging_data(workdir, queries=2)  # a second query: the cell runs again, its 3 old pairs cached
    with OpenAIServer(model_rules={}) as server:
        run = run_workflow(workdir, write_api_config(workdir, server.base_url), target, check=False)
        refused = server.total_requests
    assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    (line,) = error_lines(run.stderr)
    assert line == (
        "error: config models.api.model: 'test-model' is not served: retired, or a wrong id (HTTP 404 "
        "model_not_found: The model `test-model` does not exist or you do not have access to it.); set "
        "models.api.substitute to a current model id (or correct models.api.model if misspelt)" + KEPT
    )
    assert 1 <= refused <= 4  # the calls in flight (concurrency 4), none retried
    assert not any(path.exists() for path in cell.values() if path.suffix != ".log")
    assert sorted(cached_messages(cache)) == sorted(paid)

    with OpenAIServer() as server:  # the model served again: only the new query's pairs are paid
        run_workflow(workdir, write_api_config(workdir, server.base_url), target)
        assert server.total_requests == 3
    lines = cell["judgments"].read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(x).get("error") is None for x in lines)
