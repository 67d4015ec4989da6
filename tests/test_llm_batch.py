"""The OpenAI Batch API path (`batch: true`) against a real local fake of /v1/files and /v1/batches."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, open_client
from stressprobe.llm.backends.openai_batch import split_lines
from tests.support.batch_server import BatchServer
from tests.support.openai_server import OpenAIServer

FORK = multiprocessing.get_context("fork")
KEY_ENV = "STRESSPROBE_TEST_API_KEY"
PRICE = {"prompt_per_1m": 2.0, "completion_per_1m": 8.0}


def registry(base_url: str, **settings) -> dict:
    entry = {
        "backend": "openai",
        "model": "test-model",
        "base_url": base_url,
        "api_key_env": KEY_ENV,
        "batch": True,
        "batch_poll_s": 0.02,
        "max_retries": 3,
        "price": PRICE,
        **settings,
    }
    return {"api": entry}


def judging(count: int, tag: str = "") -> list[Request]:
    return [
        Request.chat(user=f"{tag}pair {i}: give ##final score: <0-3>", max_tokens=8, logprobs=3)
        for i in range(count)
    ]


def ledger_files(tmp_path):
    return sorted((tmp_path / "batches" / "api").glob("*.json"))


def test_split_at_request_and_byte_limits():
    assert split_lines([10] * 5, max_requests=2, max_bytes=100) == [[0, 1], [2, 3], [4]]
    assert split_lines([40, 40, 40, 10], max_requests=10, max_bytes=90) == [[0, 1], [2, 3]]
    assert split_lines([200, 5], max_requests=10, max_bytes=100) == [[0], [1]]  # too big: alone


def test_batches_answer_like_the_synchronous_api_at_the_batch_price(tmp_path):
    requests = judging(25)
    with BatchServer(duration=0.05) as server:
        models = registry(server.base_url, batch_max_requests=10)
        with open_client(models, "api", tmp_path / "c.sqlite") as client:
            responses = client.generate(requests)
            client.write_usage(tmp_path / "u.json")
            again = client.generate(requests)
        created = server.batches_created
    assert created == 3  # 25 requests at 10 per batch
    assert not ledger_files(tmp_path), "the ledger forgets batches whose answers are in the cache"
    assert all(r.cached for r in again)
    with (
        OpenAIServer() as sync,
        open_client(
            {"api": {**models["api"], "batch": False, "base_url": sync.base_url}},
            "api",
            tmp_path / "s.sqlite",
        ) as client,
    ):
        expected = client.generate(requests)
    assert [r.texts for r in responses] == [r.texts for r in expected]
    assert [r.top_logprobs for r in responses] == [r.top_logprobs for r in expected]
    usage = json.loads((tmp_path / "u.json").read_text())
    assert usage["backend"] == "openai-batch" and usage["calls_made"] == 25
    full = (usage["prompt_tokens"] * PRICE["prompt_per_1m"] + usage["completion_tokens"] * 8.0) / 1e6
    assert usage["cost_usd"] == pytest.approx(full * 0.5, abs=1e-6)


def test_split_by_bytes(tmp_path):
    with BatchServer() as server:
        models = registry(server.base_url, batch_max_bytes=1000)
        with open_client(models, "api", tmp_path / "c.sqlite") as client:
            responses = client.generate(judging(12))
        assert server.batches_created > 1
    assert all(r.error is None for r in responses)


def test_expired_cancelled_and_retryable_errors_are_sent_again(tmp_path):
    # Batch 1 expires (half answered), batch 2 (the rest) is cancelled, then all complete; 20 % of lines are
    # 500s, which go again too. Nothing is lost and every resend is counted.
    statuses = ["expired", "cancelled"]
    with BatchServer(statuses=statuses, request_faults={"server_error": 0.2}, seed=2) as server:
        models = registry(server.base_url, max_retries=6)
        with open_client(models, "api", tmp_path / "c.sqlite") as client:
            responses = client.generate(judging(20))
            client.write_usage(tmp_path / "u.json")
            assert client.cache.count() == 20
        sent = server.lines_received
        final = server.batch_statuses
    assert all(r.error is None and r.text for r in responses)
    assert final[:2] == statuses and set(final[2:]) == {"completed"}
    usage = json.loads((tmp_path / "u.json").read_text())
    assert usage["retries"] == sum(sent.values()) - 20 > 10
    assert usage["calls_made"] == 20 and usage["errors"] == 0


def test_a_failed_batch_and_a_client_error_stop_the_job_once_the_answers_are_stored(tmp_path):
    # A batch that failed validation fails again when resent; a 400 line can never succeed as sent.
    with (
        BatchServer(statuses=["failed"]) as server,
        open_client(registry(server.base_url), "api", tmp_path / "c.sqlite") as client,
    ):
        with pytest.raises(StressprobeError) as raised:
            client.generate(judging(4))
        assert client.cache.count() == 0 and server.batches_created == 1
    assert str(raised.value).startswith(
        "config models.api: 'test-model' refuses the request as sent (batch batch-00001 failed: "
        "invalid_request: bad input); it fails the same way on every rerun"
    )

    with BatchServer(request_faults={"bad_request": 0.5}, seed=1) as server:
        with open_client(registry(server.base_url), "api", tmp_path / "d.sqlite") as client:
            with pytest.raises(StressprobeError, match=r"HTTP 400: injected bad_request"):
                client.generate(judging(10))
            stored = client.cache.count()
        sent = server.lines_received
    assert max(sent.values()) == 1, "a 400 is not sent again"
    assert 0 < stored < 10  # every answered line of the batch is stored before the job stops


def test_retry_rounds_end_in_recorded_errors(tmp_path):
    with BatchServer(statuses=["expired"] * 10) as server:
        with open_client(registry(server.base_url, max_retries=2), "api", tmp_path / "c.sqlite") as client:
            responses = client.generate(judging(4))
        assert server.batches_created == 3
    answered = [r for r in responses if r.error is None]
    assert len(answered) == 3  # each expired batch answers its first half: 2, then 1, then 0 of 1
    (error,) = [r for r in responses if r.error]
    assert "no answer after 3 batch rounds" in error.error and "expired" in error.error


def _generate_in_child(models, cache_path, requests) -> None:
    with open_client(models, "api", cache_path) as client:
        client.generate(requests)


@pytest.mark.parametrize("kill_point", ["batch running", "before batch id saved"])
def test_killed_job_reattaches_to_its_running_batches(tmp_path, kill_point):
    """kill -9 while the batch runs: the next job finds it in the ledger and creates no second batch."""
    requests = judging(6)
    with BatchServer() as server:
        server.hold()
        models = registry(server.base_url)
        child = FORK.Process(target=_generate_in_child, args=(models, tmp_path / "c.sqlite", requests))
        child.start()
        deadline = time.monotonic() + 30
        while not (ledger_files(tmp_path) and server.batches_created == 1):
            assert time.monotonic() < deadline and child.is_alive()
            time.sleep(0.01)
        time.sleep(0.1)  # the child is now polling
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        (entry_path,) = ledger_files(tmp_path)
        if kill_point == "before batch id saved":
            # As if killed between creating the batch and recording its id: found by its input file.
            entry = json.loads(entry_path.read_text())
            entry["batch_id"] = None
            entry_path.write_text(json.dumps(entry))
        server.release()
        with open_client(models, "api", tmp_path / "c.sqlite") as client:
            responses = client.generate(requests)
            client.write_usage(tmp_path / "u.json")
        assert server.batches_created == 1
        assert set(server.lines_received.values()) == {1}
    assert all(r.error is None for r in responses)
    assert json.loads((tmp_path / "u.json").read_text())["calls_made"] == 6
    assert not ledger_files(tmp_path)


@pytest.mark.slow
def test_workflow_killed_mid_batch_resumes_on_the_same_batch(tmp_path):
    """kill -9 of snakemake and its judge job while the cell's batch runs; the rerun re-attaches to it."""
    from tests.support.api_workdir import (
        judge_cell,
        kill_group,
        run_workflow,
        start_workflow,
        wait_until,
        write_api_config,
        write_judging_data,
    )
    from tests.support.helpers import make_workdir

    workdir = make_workdir(tmp_path / "w")
    write_judging_data(workdir)
    cell = judge_cell(workdir)
    target = str(cell["judgments"].relative_to(workdir))
    ledger = workdir / "results" / "cache" / "batches" / "api"
    with BatchServer() as server:
        server.hold()  # the batch stays in progress until released
        edits = {"models.api.batch": True, "models.api.batch_poll_s": 0.05, "models.api.price": PRICE}
        config = write_api_config(workdir, server.base_url, edits)
        proc = start_workflow(workdir, config, target)
        wait_until(lambda: server.batches_created == 1 and any(ledger.glob("*.json")), proc)
        time.sleep(0.3)  # the job is polling its batch
        kill_group(proc)
        assert not cell["judgments"].exists()
        server.release()
        run_workflow(workdir, config, "--unlock")
        run_workflow(workdir, config, target)
        assert server.batches_created == 1, "the rerun paid for a second batch"
        assert set(server.lines_received.values()) == {1}
    usage = json.loads(cell["usage"].read_text())
    assert usage["backend"] == "openai-batch" and usage["calls_made"] == 6 and usage["errors"] == 0
    assert len(cell["judgments"].read_text().splitlines()) == 6
    assert not any(ledger.glob("*.json"))
