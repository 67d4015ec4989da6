"""The workflow profile (profiles/default, applied to every run) keeps Snakemake's scheduler from waking up
ever more often while jobs run: its job-rate limiter re-arms a timer after each scheduling pass, so every
finished job adds a chain of wake-ups (one per timespan) that lasts until the run ends."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support.helpers import ROOT

QUICK_JOBS = 30
# 30 quick jobs, then two jobs that each take both cores: while the first runs, the second waits.
TOY = f"""
rule all:
    input: "slow/1", "slow/2"

rule quick:
    output: "quick/{{i}}"
    shell: "touch {{output}}"

rule slow:
    input: expand("quick/{{i}}", i=range({QUICK_JOBS}))
    output: "slow/{{n}}"
    threads: 2
    shell: "touch started_{{wildcards.n}} && sleep 5 && touch {{output}}"
"""


def context_switches(pid: int) -> int:
    """Voluntary context switches of all threads of a process so far: each is one wake-up after a wait."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                total += int(line.split()[1])
    return total


def scheduler_wakeups_while_a_job_runs(workdir: Path, *flags: str) -> int:
    """Wake-ups of the Snakemake process during 3 s of the toy's first slow job, after 30 jobs finished."""
    workdir.mkdir()
    (workdir / "Snakefile").write_text(TOY)
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--quiet", "all"]
    command += ["--workflow-profile", str(ROOT / "profiles" / "default"), *flags]
    proc = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(workdir.glob("started_*")):
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the toy workflow did not start its job"
            )
            time.sleep(0.1)
        time.sleep(1)
        before = context_switches(proc.pid)
        time.sleep(3)
        return context_switches(proc.pid) - before
    finally:
        assert proc.wait(timeout=60) == 0


def test_the_workflow_profile_keeps_the_scheduler_quiet_while_jobs_run(tmp_path):
    snakemake_default = scheduler_wakeups_while_a_job_runs(
        tmp_path / "default", "--max-jobs-per-timespan", "100/1s"
    )
    ours = scheduler_wakeups_while_a_job_runs(tmp_path / "profile")
    # Snakemake's default: about one wake-up per finished job per second, each a timer's and the scheduler's
    assert snakemake_default > QUICK_JOBS
    assert ours * 2 < snakemake_default
