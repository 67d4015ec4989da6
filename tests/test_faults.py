"""Faults: workflow cells against a local OpenAI-compatible server that answers with 429s, 500s, timeouts,
dropped connections, empty and off-format completions. The cells complete, record what happened, and retry
a bounded, logged number of times.

Every fault is drawn deterministically by the server from (seed, request body, attempt number), so the test
recomputes, per request body, the sequence of outcomes the client saw and derives the expected counts from it.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from stressprobe.cdv.prompts import PROXY_SYSTEM, SEMANTIC_SYSTEM, VICTIM_SYSTEM
from tests.support.api_workdir import (
    error_lines,
    judge_cell,
    run_workflow,
    write_api_config,
    write_cdv_questions,
    write_judging_data,
)
from tests.support.helpers import make_workdir
from tests.support.openai_server import FAULT_KINDS, OFF_FORMAT_TEXT, OpenAIServer

pytestmark = pytest.mark.slow

FAULTS = {
    "rate_limit": 0.12,
    "server_error": 0.1,
    "timeout": 0.06,
    "drop": 0.08,
    "empty": 0.1,
    "off_format": 0.1,
}
RETRYABLE = {"rate_limit", "server_error", "timeout", "drop"}
MAX_RETRIES = 4
SERVER_SEED = 3
CDV_SERVER_SEED = 5  # one whose faults still let the search expand a node (checked below)


def outcome_sequences(server: OpenAIServer) -> dict[str, list[str]]:
    """Per request body: the outcome of each attempt the server answered, in order."""
    return {
        body: [server._state.fault_for(body, attempt) for attempt in range(count)]
        for body, count in server.requests.items()
    }


def expected_cell_counts(sequences: dict[str, list[str]]) -> Counter:
    """What a cell must report, from the outcome sequences: final status per body, retries and failures."""
    counts: Counter = Counter()
    for outcomes in sequences.values():
        final = outcomes[-1]
        if final in RETRYABLE:
            counts["error"] += 1
        elif final in ("empty", "off_format"):
            counts["unparsed"] += 1
            counts[final] += 1
        else:
            counts["ok"] += 1
        counts["retries"] += len(outcomes) - 1
    return counts


def check_bounded_retries(sequences: dict[str, list[str]]) -> None:
    """Only transient faults are retried, at most MAX_RETRIES times; a 200 (even empty) is never retried."""
    for body, outcomes in sequences.items():
        assert len(outcomes) <= MAX_RETRIES + 1, f"{len(outcomes)} attempts for one request: {body[:200]}"
        assert all(o in RETRYABLE for o in outcomes[:-1]), (
            f"retried after a non-transient outcome: {outcomes}"
        )
        if outcomes[-1] in RETRYABLE:
            assert len(outcomes) == MAX_RETRIES + 1, f"gave up early: {outcomes}"


def test_judging_cell_completes_under_faults(tmp_path):
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir, queries=4, passages=6)
    cell = judge_cell(workdir)
    with OpenAIServer(faults=FAULTS, seed=SERVER_SEED, timeout_sleep=2.0, retry_after=0.05) as server:
        config = write_api_config(workdir, server.base_url, {"models.api.max_retries": MAX_RETRIES})
        run_workflow(workdir, config, str(cell["judgments"].relative_to(workdir)))
        sequences = outcome_sequences(server)
        seen = set(server.outcomes)

    assert seen >= set(FAULT_KINDS) | {"ok"}, (
        f"server seed {SERVER_SEED} did not exercise every fault: {seen}"
    )
    assert len(sequences) == 24, "one request per judged pair"
    check_bounded_retries(sequences)
    expected = expected_cell_counts(sequences)

    records = [json.loads(line) for line in cell["judgments"].read_text().splitlines()]
    summary = json.loads(cell["summary"].read_text())
    usage = json.loads(cell["usage"].read_text())
    assert len(records) == summary["pairs"] == 24
    for status in ("ok", "unparsed", "error"):
        assert summary[status] == expected[status], (status, summary, expected)
    assert Counter(r["status"] for r in records) == Counter(
        {s: expected[s] for s in ("ok", "unparsed", "error")}
    )
    # Off-format and empty completions are kept verbatim and never given a label.
    off_format = [r for r in records if r["raw"] == OFF_FORMAT_TEXT]
    empty = [r for r in records if r["status"] == "unparsed" and r["raw"] == ""]
    assert len(off_format) == expected["off_format"] and all(r["status"] == "unparsed" for r in off_format)
    assert len(empty) == expected["empty"]
    assert all(r["label"] is None for r in records if r["status"] != "ok")
    assert usage["retries"] == expected["retries"] and usage["errors"] == expected["error"]
    assert usage["calls_made"] == expected["ok"] + expected["unparsed"]

    # Every retry and every final failure is one line of the job's log.
    log = cell["log"].read_text()
    assert log.count("retrying in") == expected["retries"]
    assert log.count("call failed after") == expected["error"]


CDV_CELL = "results/cdv/tinyqa/api/api"


def request_kind(body: str) -> str:
    """proxy, semantic or victim, from the system message of a CDV request."""
    system = json.loads(body)["messages"][0]["content"]
    if system.startswith(VICTIM_SYSTEM):
        return "victim"
    return {PROXY_SYSTEM: "proxy", SEMANTIC_SYSTEM: "semantic"}[system]


def test_cdv_cell_completes_under_faults(tmp_path):
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    write_cdv_questions(workdir)
    with OpenAIServer(faults=FAULTS, seed=CDV_SERVER_SEED, timeout_sleep=2.0, retry_after=0.05) as server:
        config = write_api_config(workdir, server.base_url, {"models.api.max_retries": MAX_RETRIES})
        run_workflow(workdir, config, f"{CDV_CELL}/search.jsonl")
        sequences = outcome_sequences(server)

    seen = Counter(outcome for outcomes in sequences.values() for outcome in outcomes)
    assert seen.keys() & RETRYABLE and seen.keys() & {"empty", "off_format"}, f"too few faults: {seen}"
    finals: dict[str, set[str]] = {"proxy": set(), "semantic": set(), "victim": set()}
    for body, outcomes in sequences.items():
        finals[request_kind(body)].add(outcomes[-1])
    assert finals["proxy"], "the search never expanded a node"
    check_bounded_retries(sequences)
    expected = expected_cell_counts(sequences)

    cell = workdir / CDV_CELL
    records = [json.loads(line) for line in (cell / "search.jsonl").read_text().splitlines()]
    summary = json.loads((cell / "search.summary.json").read_text())
    usage = json.loads((cell / "search.usage.json").read_text())
    assert sum(summary["status_counts"].values()) == summary["nodes"] == len(records)
    # A proxy call that failed or came back empty rejects that try of its child (each try is its own request:
    # another seed); the server's off-format text is plain prose, which the search cannot tell from context
    # and keeps. A child is discarded only when its last try was rejected too.
    failed_proxy = sum(
        1
        for body, outcomes in sequences.items()
        if request_kind(body) == "proxy" and outcomes[-1] in RETRYABLE | {"empty"}
    )
    tries = [a for r in records for a in r["attempts"]]
    assert sum(a["status"] == "discarded_proxy" for a in tries) == failed_proxy
    assert summary["status_counts"].get("discarded_proxy", 0) <= failed_proxy
    assert all(r["status"] == "discarded_proxy" for r in records if r["proxy_raw"] == "")
    # An empty or off-format semantic verdict is "unclear" and discards the child: never a silent pass.
    unclear = [r for r in records if r["semantic_verdict"] == "unclear"]
    assert bool(unclear) == bool(finals["semantic"] & {"empty", "off_format"})
    assert all(r["status"] == "discarded_semantic" for r in unclear)
    # An empty or off-format victim answer is unparsed: no option, never counted as correct.
    unparsed_answers = [
        r
        for r in records
        if None in (r["answers"] or []) or (r["greedy_raw"] is not None and r["greedy_answer"] is None)
    ]
    assert bool(unparsed_answers) == bool(finals["victim"] & {"empty", "off_format"})
    assert usage["retries"] == expected["retries"] and usage["errors"] == expected["error"]
    log = (workdir / "results" / "logs" / "cdv" / "search" / "tinyqa" / "api" / "api.log").read_text()
    assert log.count("retrying in") == expected["retries"]
    assert log.count("call failed after") == expected["error"]


def fill_up(directory: Path) -> None:
    """Write into `directory` until its file system reports it is full."""
    try:
        with open(directory / "ballast", "wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
    except OSError:
        pass


@pytest.fixture
def small_fs(tmp_path):
    """A fresh 64 KiB tmpfs (skips where mounting is not allowed); unmounted afterwards."""
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def judgments_on(workdir: Path, directory: Path) -> Path:
    """Make results/judging/tiny/judgments a link to `directory`; returns the link."""
    judgments = workdir / "results" / "judging" / "tiny" / "judgments"
    judgments.parent.mkdir(parents=True)
    judgments.symlink_to(directory, target_is_directory=True)
    return judgments


def fails_cleanly_then_recovers(workdir: Path, make_room) -> int:
    """The cell fails with one error line and no outputs; after `make_room()` a rerun completes it without
    asking the server for any call twice. Returns the number of calls the failed run paid for."""
    cell = judge_cell(workdir)
    target = str(cell["judgments"].relative_to(workdir))
    with OpenAIServer() as server:
        config = write_api_config(workdir, server.base_url)
        failed = run_workflow(workdir, config, target, check=False)
        paid = server.total_requests

        assert failed.returncode != 0
        assert "Traceback" not in failed.stderr
        errors = error_lines(failed.stderr)
        assert len(errors) == 1 and "judgments" in errors[0], failed.stderr[-3000:]
        for name in ("judgments", "usage", "summary"):
            assert not cell[name].is_file(), f"{cell[name]} left behind by a failed job"

        # The calls already paid are in the cache: once there is room, the rerun pays for no call again.
        make_room()
        run_workflow(workdir, config, target)
        assert set(server.requests.values()) == {1}, server.requests
    assert json.loads(cell["summary"].read_text())["pairs"] == 6
    return paid


def test_full_disk_fails_clearly_and_keeps_the_paid_calls(tmp_path, small_fs):
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    fill_up(small_fs)
    assert fails_cleanly_then_recovers(workdir, judgments_on(workdir, small_fs).unlink) > 0


def test_read_only_results_fail_before_any_call(tmp_path, small_fs):
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    (small_fs / "api" / "baseline").mkdir(parents=True)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    assert fails_cleanly_then_recovers(workdir, judgments_on(workdir, small_fs).unlink) == 0


def test_results_below_a_regular_file_fail_before_any_call(tmp_path):
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    judgments = workdir / "results" / "judging" / "tiny" / "judgments"
    judgments.parent.mkdir(parents=True)
    judgments.write_text("not a directory\n")
    assert fails_cleanly_then_recovers(workdir, judgments.unlink) == 0
