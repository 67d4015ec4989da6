"""The tiny config on a real SLURM cluster (tests/slurm/cluster.sh), through the project's profile.

Skipped unless the test cluster is up; `tests/slurm/run_e2e.sh` starts it, runs this file and stops it.
Two runs of the workflow with the project's profile plus the CI overlay:
  1. a second judge model, `e2e-api`, is an OpenAI-compatible server on 127.0.0.1 that wants a key the
     environment lacks: its judge cells fail (deliberately), every other cell completes (keep-going);
  2. the key is exported and the same command runs again: only what was missing runs.
The CI overlay makes every `judge` job ask for one GPU (the test cluster has two placeholder GPUs), so the
tiny config's CPU models exercise the GPU routing: those jobs must land in partition `gpu`, all others in
`cpu`. (Which jobs ask for GPUs in real configs — those of `vllm` models — is checked offline in
tests/test_paper_config.py.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.support.helpers import ROOT, SNAKEMAKE, TINY_CONFIG, make_workdir
from tests.support.openai_server import OpenAIServer

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SLURM_DIR = Path(os.environ.get("SLURM_CI_DIR", ROOT / ".slurm-ci"))
JOBCOMP = SLURM_DIR / "log" / "jobcomp.txt"
PROFILES = ["--profile", str(ROOT / "profiles/slurm"), "--profile", str(ROOT / "tests/slurm/profile")]
API_MODEL = "e2e-api"
KEY_ENV = "STRESSPROBE_E2E_KEY"
API_KEY = "e2e-key"
GPU_RULES = {"judge"}  # the CI overlay's `set-resources: judge: {gpu: 1}`
SUBMITTED = re.compile(r"Job (\S+) has been submitted with SLURM jobid (\d+) \(log: (\S+)\)")


def cluster_partitions() -> set[str]:
    """Partitions of the running cluster, or none when SLURM is not up."""
    if shutil.which("sinfo") is None:
        return set()
    proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    return {p.rstrip("*") for p in proc.stdout.split()} if proc.returncode == 0 else set()


if not {"cpu", "gpu"} <= cluster_partitions():
    pytest.skip(
        "no SLURM test cluster with partitions cpu and gpu (run tests/slurm/run_e2e.sh)",
        allow_module_level=True,
    )


def submissions(stderr: str) -> dict[str, str]:
    """SLURM job id -> `rule_<name>` or `group_<name>`, from Snakemake's submission messages."""
    jobs = {}
    for _, slurm_id, log in SUBMITTED.findall(stderr):
        # The plugin logs to .snakemake/slurm_logs/<rule_NAME|group_NAME>/<wildcards>/<id>.log
        jobs[slurm_id] = next(part for part in Path(log).parts if part.startswith(("rule_", "group_")))
    return jobs


def submitted_jobids(stderr: str) -> set[str]:
    """Snakemake job ids that went to SLURM: submitted alone, or as members of a submitted group job."""
    submitted, members = set(), None  # members: job ids of the group job being announced, if any
    for line in stderr.splitlines():
        # "[date] Group job scoring (jobs in lexicogr. order):", then each member indented one level deeper.
        if re.search(r"\bGroup job \S+ \(", line):
            members = []
        elif members is not None and line.startswith("        jobid: "):
            members.append(line.split(": ", 1)[1])
        match = SUBMITTED.match(line)
        if match:
            submitted.add(match.group(1))
            submitted.update(members or [])
            members = None
    return submitted


def declared_localrules() -> set[str]:
    """Rules the workflow runs on the submitting host by design (`localrule: True`), and `all`."""
    local = {"all"}
    for path in [ROOT / "Snakefile", *(ROOT / "workflow" / "rules").glob("*.smk")]:
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", path.read_text(), re.M):
            if re.search(r"^\s+localrule: True", body, re.M):
                local.add(name)
    return local


def finished_jobs(wanted: set[str], timeout: float = 60) -> dict[str, dict[str, str]]:
    """SLURM's record (JobState, Partition) of each wanted job, from the job completion log."""
    deadline = time.monotonic() + timeout
    while True:
        records = {}
        for line in JOBCOMP.read_text().splitlines() if JOBCOMP.exists() else []:
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            records[fields["JobId"]] = fields
        if wanted <= set(records) or time.monotonic() > deadline:
            return {job: records[job] for job in wanted if job in records}
        time.sleep(1)


def run_on_slurm(workdir: Path, config: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    cmd += ["--configfile", str(config), *PROFILES]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def result_mtimes(workdir: Path) -> dict[str, float]:
    """mtime of every result file (logs and benchmarks aside: they are per attempt)."""
    results = workdir / "results"
    return {
        str(p.relative_to(results)): p.stat().st_mtime
        for p in results.rglob("*")
        if p.is_file() and p.relative_to(results).parts[0] not in ("logs", "benchmarks", "cache")
    }


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp("slurm") / "work")
    with OpenAIServer(require_key=API_KEY) as server:
        config = yaml.safe_load(TINY_CONFIG.read_text())
        config["models"][API_MODEL] = {
            "backend": "openai",
            "model": "test-model",
            "base_url": server.base_url,
            "api_key_env": KEY_ENV,
            "max_retries": 0,
        }
        config["judging"]["models"].append(API_MODEL)
        config_path = workdir / "e2e.yaml"
        config_path.write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        env["HF_HUB_OFFLINE"] = "1"
        first = run_on_slurm(workdir, config_path, env)
        after_first = result_mtimes(workdir)
        second = run_on_slurm(workdir, config_path, {**env, KEY_ENV: API_KEY})
        api_requests = server.total_requests
    for i, run in enumerate((first, second), start=1):  # kept for whoever debugs a failure
        (workdir / f"run{i}.stderr").write_text(run.stderr)
    jobs = [submissions(first.stderr), submissions(second.stderr)]
    records = finished_jobs(set(jobs[0]) | set(jobs[1]))
    return {
        "workdir": workdir,
        "runs": [first, second],
        "jobs": jobs,
        "records": records,
        "after_first": after_first,
        "after_second": result_mtimes(workdir),
        "api_requests": api_requests,
        "config": config,
    }


def test_every_job_ran_through_slurm(e2e):
    local = declared_localrules()
    for run, jobs in zip(e2e["runs"], e2e["jobs"], strict=True):
        assert jobs, f"no job was submitted to SLURM:\n{run.stderr[-3000:]}"
        finished = re.findall(r"^Finished jobid: (\S+) \(Rule: (\S+)\)$", run.stderr, re.M)
        outside = {(jobid, rule) for jobid, rule in finished if rule not in local}
        outside -= {(jobid, rule) for jobid, rule in outside if jobid in submitted_jobids(run.stderr)}
        assert not outside, f"jobs that finished without going through SLURM: {sorted(outside)}"
    missing = (set(e2e["jobs"][0]) | set(e2e["jobs"][1])) - set(e2e["records"])
    assert not missing, f"submitted jobs without a SLURM completion record: {sorted(missing)}"
    states = {record["JobState"] for record in e2e["records"].values()}
    assert states <= {"COMPLETED", "FAILED"}, states


def test_gpu_jobs_landed_in_the_gpu_partition(e2e):
    partitions: dict[str, set[str]] = {}
    for jobs in e2e["jobs"]:
        for slurm_id, name in jobs.items():
            partitions.setdefault(name, set()).add(e2e["records"][slurm_id]["Partition"])
    assert partitions.get("rule_judge") == {"gpu"}, partitions
    others = {
        name: parts for name, parts in partitions.items() if name.removeprefix("rule_") not in GPU_RULES
    }
    assert others and all(parts == {"cpu"} for parts in others.values()), others


def test_small_scoring_jobs_went_as_group_jobs(e2e):
    # The profile's `group-components: {scoring: ...}` merges the per-cell qrels and nDCG jobs, and the
    # overlay's `cores: 2` keeps each group job schedulable on the 2-CPU test node.
    # The plugin names a group job's log folder group_<group>_<its rules>.
    names = [name for jobs in e2e["jobs"] for name in jobs.values()]
    assert any(name.startswith("group_scoring_") for name in names), names
    assert not {"rule_judge_qrels", "rule_ndcg", "rule_human_qrels"} & set(names), names
    scoring = [
        e2e["records"][i] for jobs in e2e["jobs"] for i, n in jobs.items() if n.startswith("group_scoring_")
    ]
    assert scoring and all(int(r["ProcCnt"]) <= 2 for r in scoring), scoring


def test_the_failing_cells_are_reported_as_failed(e2e):
    first = e2e["runs"][0]
    assert first.returncode != 0, "a run with failed jobs must exit non-zero"
    assert re.search(rf"Error in rule judge:[\s\S]*?model={re.escape(API_MODEL)}", first.stderr), (
        first.stderr[-3000:]
    )
    assert "rejected the API key" in first.stderr, "the job's one-line error must reach the user"
    states = [e2e["records"][job]["JobState"] for job, name in e2e["jobs"][0].items() if name == "rule_judge"]
    cells_per_model = len(e2e["config"]["judging"]["conditions"])
    assert states.count("FAILED") == cells_per_model, states
    assert states.count("COMPLETED") == cells_per_model, states


def test_the_rerun_resumes_without_redoing_finished_cells(e2e):
    second = e2e["runs"][1]
    assert second.returncode == 0, second.stderr[-5000:]
    assert e2e["api_requests"] > 0, "the fixed cells must have called the model"
    redone = {path for path, mtime in e2e["after_first"].items() if e2e["after_second"].get(path) != mtime}
    assert not redone, f"finished outputs were recomputed: {sorted(redone)[:10]}"
    judged = [p for p in e2e["after_second"] if "/judgments/" in p and p.endswith(".jsonl")]
    new = [p for p in judged if p not in e2e["after_first"]]
    assert new and all(f"/{API_MODEL}/" in p for p in new), new
    rules = set(e2e["jobs"][1].values())
    assert "rule_summarize" not in rules and "rule_cdv_search" not in rules, rules
