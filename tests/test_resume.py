"""Crash and resume, and two jobs sharing one cache: no work is lost, nothing is paid for twice.

The server is deterministic (same prompt, same answer), so an interrupted-then-resumed run must produce
exactly the files of an uninterrupted run in another directory against another server instance.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.support.api_workdir import (
    body_messages,
    cached_messages,
    judge_cell,
    kill_group,
    result_files,
    run_workflow,
    start_workflow,
    wait_until,
    write_api_config,
    write_cdv_questions,
    write_judging_data,
)
from tests.support.helpers import make_workdir
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.slow

PAIRS = 6  # write_judging_data's default: 2 queries x 3 passages


def comparable(files: dict[str, bytes]) -> dict[str, bytes]:
    """Result files minus usage sidecars (calls made vs cache hits differ after a resume)."""
    return {path: data for path, data in files.items() if not path.endswith(".usage.json")}


def uninterrupted_run(workdir: Path, target: str) -> dict[str, bytes]:
    write_judging_data(workdir)
    with OpenAIServer() as server:
        run_workflow(workdir, write_api_config(workdir, server.base_url), target)
    return comparable(result_files(workdir))


def test_killed_judging_cell_resumes_without_paying_twice(tmp_path):
    workdir = make_workdir(tmp_path / "killed")
    write_judging_data(workdir)
    cell = judge_cell(workdir)
    target = str(cell["judgments"].relative_to(workdir))
    # One request at a time, 0.4 s each: the kill lands in the middle of the cell.
    with OpenAIServer(latency=0.4) as server:
        config = write_api_config(workdir, server.base_url, {"models.api.concurrency": 1})
        proc = start_workflow(workdir, config, target)
        wait_until(lambda: server.total_requests >= PAIRS // 2 + 1, proc)
        kill_group(proc)
        before = Counter(server.requests)
        completed = set(cached_messages(workdir / "results" / "cache" / "llm"))
        assert 0 < len(completed) < PAIRS, (
            f"the kill did not land mid-cell ({len(completed)} of {PAIRS} done)"
        )
        assert not cell["judgments"].exists(), "a killed cell must not leave its output behind"

        # A kill -9 leaves Snakemake's directory lock behind: the documented way back is --unlock, then rerun.
        run_workflow(workdir, config, "--unlock")
        resumed = run_workflow(workdir, config, target)
        after = Counter(server.requests)

    rerun_requests = after - before
    repeated = [body for body in rerun_requests if body_messages(body) in completed]
    assert not repeated, f"{len(repeated)} completed calls were sent again after the resume"
    assert sum(rerun_requests.values()) == PAIRS - len(completed)
    assert "Traceback" not in resumed.stderr
    usage = json.loads(cell["usage"].read_text())
    assert (usage["calls_made"], usage["cache_hits"]) == (PAIRS - len(completed), len(completed))
    assert comparable(result_files(workdir)) == uninterrupted_run(make_workdir(tmp_path / "clean"), target)


def test_killed_cdv_search_resumes_without_paying_twice(tmp_path):
    target = "results/cdv/tinyqa/api/api/search.jsonl"
    workdir = make_workdir(tmp_path / "killed")
    write_judging_data(workdir)
    write_cdv_questions(workdir)
    with OpenAIServer(latency=0.3) as server:
        config = write_api_config(workdir, server.base_url, {"models.api.concurrency": 1})
        proc = start_workflow(workdir, config, target)
        wait_until(lambda: server.total_requests >= 7, proc)
        kill_group(proc)
        before = Counter(server.requests)
        completed = set(cached_messages(workdir / "results" / "cache" / "llm"))
        assert completed, "the kill landed before any call completed"
        assert not (workdir / target).exists()

        run_workflow(workdir, config, "--unlock")
        run_workflow(workdir, config, target)
        after = Counter(server.requests)

    rerun_requests = after - before
    assert rerun_requests, "the kill landed after the search had finished"
    repeated = [body for body in rerun_requests if body_messages(body) in completed]
    assert not repeated, f"{len(repeated)} completed calls were sent again after the resume"
    clean = make_workdir(tmp_path / "clean")
    write_judging_data(clean)
    write_cdv_questions(clean)
    with OpenAIServer() as server:
        run_workflow(clean, write_api_config(clean, server.base_url), target)
        assert set(after) == set(server.requests), (
            "the resumed and the clean search asked different questions"
        )
    assert comparable(result_files(workdir)) == comparable(result_files(clean))


def test_two_jobs_sharing_one_cache(tmp_path):
    shared_cache = tmp_path / "shared" / "llm"
    workdirs = [make_workdir(tmp_path / f"work{i}") for i in (1, 2)]
    with OpenAIServer(latency=0.2) as server:
        procs = []
        for workdir in workdirs:
            write_judging_data(workdir)
            config = write_api_config(
                workdir, server.base_url, {"cache.path": str(shared_cache), "models.api.concurrency": 2}
            )
            procs.append(
                start_workflow(workdir, config, str(judge_cell(workdir)["judgments"].relative_to(workdir)))
            )
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-4000:]
        requests = Counter(server.requests)

    assert len(requests) == PAIRS and set(requests.values()) == {1}, f"duplicate paid calls: {requests}"
    usages = [json.loads(judge_cell(w)["usage"].read_text()) for w in workdirs]
    assert sum(u["calls_made"] for u in usages) == PAIRS
    assert sum(u["cache_hits"] for u in usages) == PAIRS
    # At most one shard per job (each written by its job alone), and every answer stored exactly once.
    shards = list(shared_cache.glob("*.jsonl"))
    assert 1 <= len(shards) <= 2
    assert sum(len(s.read_bytes().splitlines()) for s in shards) == PAIRS
    assert len(cached_messages(shared_cache)) == PAIRS
    outputs = [comparable(result_files(w)) for w in workdirs]
    assert outputs[0] == outputs[1]
