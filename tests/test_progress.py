"""Progress lines of long jobs: the 30 s / 5 % rule on an injected clock, and the line's content."""

from __future__ import annotations

import io
import re
import time

import pytest
import yaml

from stressprobe.llm.progress import (
    MIN_BATCH,
    Progress,
    format_duration,
    progress_bar,
    progress_line,
    report_due,
)
from stressprobe.llm.types import Response
from stressprobe.llm.usage import Usage
from tests.support.helpers import TINY_CONFIG, run_snakemake


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def made(usage: Usage, prompt: int = 100, completion: int = 5) -> Usage:
    usage.record_call(Response(texts=["x"], prompt_tokens=prompt, completion_tokens=completion))
    return usage


def test_report_due_every_five_percent_or_thirty_seconds():
    # 200 requests: a line each 10 (5 %), whatever the time.
    assert not report_due(9, 200, 0, now=1.0, last_time=0.0)
    assert report_due(10, 200, 9, now=1.0, last_time=0.0)
    assert not report_due(11, 200, 10, now=1.0, last_time=0.0)
    # ... and after 30 s without a line, even within the same 5 %.
    assert not report_due(11, 200, 10, now=29.9, last_time=0.0)
    assert report_due(11, 200, 10, now=30.0, last_time=0.0)
    # The end of a batch is always reported, once.
    assert report_due(200, 200, 199, now=0.0, last_time=0.0)
    assert not report_due(200, 200, 200, now=1.0, last_time=0.0)
    # Fewer than 20 requests: every request is a 5 % step.
    assert report_due(1, 7, 0, now=0.0, last_time=0.0)


def test_durations_read_short():
    assert [format_duration(s) for s in (4.4, 125, 3 * 3600 + 7 * 60 + 5)] == ["4s", "2m05s", "3h07m"]


def test_line_has_done_total_rate_eta_tokens_cost_and_hits():
    usage = Usage(calls_made=30, cache_hits=10, prompt_tokens=300_000, completion_tokens=1_000)
    line = progress_line(
        "gpt-4o",
        40,
        100,
        fresh=30,
        elapsed=15.0,
        usage=usage,
        price={"prompt_per_1m": 2.5, "completion_per_1m": 10},
    )
    assert line.startswith("gpt-4o: 40/100 (40%), 2.00 calls/s, ETA 30s, ")
    assert "30 calls, 10 cache hits, 0 errors" in line
    assert "301,000 tokens (300,000 prompt + 1,000 completion)" in line
    assert "$0.7600" in line  # 0.3 M x 2.5 + 0.001 M x 10


def test_a_judge_batch_logs_every_five_percent_and_its_end():
    clock, lines = Clock(), []
    progress = Progress("judge-model", clock=clock, emit=lines.append, stream=io.StringIO(), heartbeat=False)
    usage = Usage(cache_hits=0)
    progress.begin(100, 20, usage)  # 20 of 100 already in the cache
    assert lines == ["judge-model: 100 requests, 20 answered from the cache, 80 to compute"]
    for _ in range(80):
        clock.now += 0.5
        progress.advance(made(usage))
    usage.cache_hits = 20  # the client counts the batch's hits when it ends
    progress.finish(usage)
    progress.close()
    progress_lines = lines[1:]
    # 20 -> 100 done in steps of 5: one line each (25, 30, ..., 100), nothing at close for a single batch.
    assert len(progress_lines) == 16
    assert progress_lines[0].startswith("judge-model: 25/100 (25%), 2.00 calls/s, ETA 38s")
    assert "20 cache hits" in progress_lines[0]
    assert progress_lines[-1].startswith("judge-model: 100/100 (100%), 2.00 calls/s, job so far: 80 calls")


def test_slow_calls_are_reported_every_thirty_seconds():
    clock, lines = Clock(), []
    progress = Progress("slow", clock=clock, emit=lines.append, stream=io.StringIO(), heartbeat=False)
    usage = Usage()
    progress.begin(1000, 0, usage)
    lines.clear()
    for _ in range(10):  # 10 calls of 20 s each: far below 5 % of 1000, so only time triggers lines
        clock.now += 20
        progress.advance(made(usage))
    assert len(lines) == 5  # 40, 80, 120, 160 and 200 s after the first line
    assert lines[0].startswith("slow: 2/1000 (0%), 0.05 calls/s, ETA 5h32m")


def test_small_batches_log_by_time_and_a_last_line_with_totals():
    clock, lines = Clock(), []
    progress = Progress("victim", clock=clock, emit=lines.append, stream=io.StringIO(), heartbeat=False)
    usage = Usage()
    for _ in range(12):  # a search: 12 expansions of 5 requests, 1 s each
        progress.begin(5, 0, usage)
        for _ in range(5):
            clock.now += 1
            progress.advance(made(usage))
        progress.finish(usage)
    assert MIN_BATCH > 5
    assert len(lines) == 2  # at 30 s and 60 s, no done/total (the search's total is not known)
    assert lines[0].startswith("victim: 1.00 calls/s, job so far: 30 calls")
    progress.close()
    assert lines[-1].startswith("victim finished in 1m00s: 1.00 calls/s, job so far: 60 calls")


def test_heartbeat_reports_while_one_call_blocks():
    lines = []
    progress = Progress("gpu", emit=lines.append, stream=io.StringIO(), every_s=0.2)
    progress.begin(100, 0, Usage())
    deadline = time.monotonic() + 5
    while len(lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    progress.close()
    # Without any call finishing, the thread writes the time-based line (checks every min(every_s, 5 s)).
    assert any(line.startswith("gpu: 0/100 (0%), 0.00 calls/s, ETA unknown") for line in lines)


def test_bar_only_on_a_terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    for stream, expect_bar in ((io.StringIO(), False), (Terminal(), True)):
        clock = Clock()
        progress = Progress("m", clock=clock, emit=lambda _: None, stream=stream, heartbeat=False)
        usage = Usage()
        progress.begin(40, 0, usage)
        for _ in range(40):
            clock.now += 1
            progress.advance(made(usage))
        progress.finish(usage)
        progress.close()
        text = stream.getvalue()
        assert ("\r" in text) is expect_bar
        if expect_bar:
            assert text.endswith(progress_bar("m", 40, 40, 1.0) + "\x1b[K\n")


@pytest.mark.slow
def test_a_real_judge_job_logs_its_progress(workdir, tmp_path):
    config = yaml.safe_load(TINY_CONFIG.read_text(encoding="utf-8"))
    # 5 queries x 4 passages: a cell of 20 pairs, the smallest batch reported with done/total; the judge
    # reads the passages (no summaries) and writes the grade after the prefilled answer prefix.
    config["judging"]["datasets"]["demo-dl"].update(queries=5, max_passages_per_query=4, summarize=False)
    config["judging"]["judge_max_tokens"] = 2
    configfile = tmp_path / "progress.yaml"
    configfile.write_text(yaml.safe_dump(config))
    target = "results/judging/demo-dl/judgments/smollm2-135m/fixed/gap.jsonl"
    run_snakemake(workdir, target, configfile=configfile)
    log_text = (workdir / "results/logs/judging/demo-dl/judge/smollm2-135m/fixed/gap.log").read_text()
    assert "job: rule judge, wildcards dataset=demo-dl, model=smollm2-135m" in log_text
    assert "smollm2-135m: 20 requests, 0 answered from the cache, 20 to compute" in log_text
    lines = re.findall(r"smollm2-135m: (\d+)/20 \((\d+)%\), ([\d.]+) calls/s, (.*)", log_text)
    # A line at every 5 % (one pair; more when a call takes over 30 s), the last at 20/20 with the totals.
    done = [int(d) for d, *_ in lines]
    assert set(range(1, 21)) <= set(done) and done == sorted(done) and done[-1] == 20
    assert float(lines[-1][2]) > 0
    assert "ETA" in lines[0][3] and "ETA" not in lines[-1][3]
    assert re.search(r"job so far: 20 calls, 0 cache hits, 0 errors, [\d,]+ tokens .*\$0\.0000", lines[-1][3])


def test_a_batch_answered_from_the_cache_gets_one_line():
    clock, lines = Clock(), []
    progress = Progress("m", clock=clock, emit=lines.append, stream=io.StringIO(), heartbeat=False)
    for _ in range(2):  # the second time, after a batch whose lines ended at its total
        usage = Usage(cache_hits=40)
        progress.begin(40, 40, usage)
        progress.finish(usage)
    assert len(lines) == 2 and all(line.startswith("m: 40/40 (100%)") for line in lines)
    assert "40 cache hits" in lines[0]


def test_a_job_of_several_cells_counts_every_cell_in_its_lines(tmp_path):
    # A job of three calls of 12 requests (a job asking its cells one after another). The progress lines
    # are the job's: the last one counts all 36 calls, not the last call's 12.
    from stressprobe.llm import Request
    from stressprobe.llm.cache import ResponseCache
    from stressprobe.llm.client import Client
    from tests.test_llm_cache import CountingBackend

    lines: list[str] = []
    with Client("gpu", CountingBackend(), ResponseCache(tmp_path / "c.sqlite"), price=None) as client:
        client.progress.emit = lines.append
        client.progress.heartbeat = False
        for cell in range(3):
            client.generate([Request.chat(user=f"cell {cell} pair {i}") for i in range(12)])
    assert re.search(r"^gpu finished in \S+: [\d.]+ calls/s, job so far: 36 calls, 0 cache hits", lines[-1])
