"""The tiny config on a real SLURM cluster of two compute nodes (tests/slurm/cluster.sh), through the
project's profile.

Skipped unless the test cluster is up; `tests/slurm/run_e2e.sh` starts it, runs this file and stops it.
Each node is a network namespace with its own host name and address; all share this file system, as
compute nodes share a cluster's. Two runs of the workflow with the project's profile plus the CI overlay:
  1. a second judge model, `e2e-api`, is an OpenAI-compatible server that wants a key the environment
     lacks: its judge cells fail (deliberately), every other cell completes (keep-going). A third,
     `e2e-slow`, answers one request at a time, slowly: once a node has stored some of a cell's answers, that
     node dies (its slurmd and every process on it are killed) in the middle of the cell;
  2. the key is exported and the same command runs again, as the README tells a user after a failure: only
     what was missing runs, on the node still alive, and no answer is paid twice except the dead job's
     in-flight ones.
Then a local run (no SLURM) of the same config, from a copy of the cluster's cache, must make no model call
and write the same outputs.
The CI overlay makes every `judge` job ask for one GPU (each node has two placeholder GPUs), so the tiny
config's CPU models exercise the GPU routing: those jobs must land in partition `gpu`, all others in
`cpu`. (Which jobs ask for GPUs in real configs — those of `vllm` models — is checked offline in
tests/test_paper_config.py.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from stressprobe.llm.claims import CLAIMS_DIR, LEASE_ENV
from tests.support.helpers import ROOT, SNAKEMAKE, TINY_CONFIG, make_workdir
from tests.support.openai_server import OpenAIServer
from tests.support.slurm import (
    CLUSTER,
    cluster_nodes,
    cluster_partitions,
    controller_addr,
    declared_localrules,
    finished_jobs,
    result_files,
    result_mtimes,
    stored_by_host,
    submissions,
    submitted_jobids,
)

# The fixture runs the workflow three times (two on SLURM, with a node lost in between); on a 2-core
# machine shared with other work (load 10-12) the first run alone took over 20 minutes.
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(4800)]
RUN_TIMEOUT_S = 1800

PROFILES = ["--profile", str(ROOT / "profiles/slurm"), "--profile", str(ROOT / "tests/slurm/profile")]
API_MODEL = "e2e-api"
SLOW_MODEL = "e2e-slow"
KEY_ENV = "STRESSPROBE_E2E_KEY"
API_KEY = "e2e-key"
GPU_RULES = {"judge"}  # the CI overlay's `set-resources: judge: {gpu: 1}`
SLOW_S = 1.5  # seconds per answer of the slow model (one at a time): a cell takes ~10 s or more
KILL_AFTER = 2  # the slow model's answers a node has stored when it dies
# The claim lease of the test's jobs: a dead job's claims hold the rerun up at most this long.
LEASE_S = 20

if not {"cpu", "gpu"} <= cluster_partitions() or len(cluster_nodes()) < 2:
    pytest.skip(
        "no SLURM test cluster with two nodes and partitions cpu and gpu (run tests/slurm/run_e2e.sh)",
        allow_module_level=True,
    )


def snakemake(workdir: Path, config: Path, *args: str) -> list[str]:
    """The command line of a run of `config` in `workdir` (options after --configfile would be config files)."""
    cmd = [*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), *args]
    return [*cmd, "--configfile", str(config)]


def kill_a_node_mid_cell(cache: Path, stop: threading.Event, killed: dict) -> None:
    """Once a node has stored KILL_AFTER of the slow model's answers, kill that node (record what it had
    stored)."""
    while not stop.is_set():
        held = stored_by_host(cache, SLOW_MODEL) if cache.is_dir() else {}
        for host, keys in held.items():
            if len(keys) >= KILL_AFTER:
                done = subprocess.run(
                    ["bash", str(CLUSTER), "kill-node", host], capture_output=True, text=True
                )
                killed.update(node=host, stored=stored_by_host(cache, SLOW_MODEL).get(host, set()))
                killed["message"] = done.stdout + done.stderr
                return
        time.sleep(0.2)


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    base = tmp_path_factory.mktemp("slurm")
    workdir = make_workdir(base / "work")
    addr = controller_addr()
    with (
        OpenAIServer(require_key=API_KEY, host=addr) as server,
        # Another model name: requests of the two API models must not share cache keys (an endpoint is
        # not part of a key), or the slow model's answers would serve the other's cells.
        OpenAIServer(latency=SLOW_S, host=addr, model_ids=("slow-model",)) as slow,
    ):
        config = yaml.safe_load(TINY_CONFIG.read_text())
        config["models"][API_MODEL] = {
            "backend": "openai",
            "model": "test-model",
            "base_url": server.base_url,
            "api_key_env": KEY_ENV,
            "max_retries": 0,
        }
        config["models"][SLOW_MODEL] = {
            "backend": "openai",
            "model": "slow-model",
            "base_url": slow.base_url,
            "api_key_env": "STRESSPROBE_E2E_NO_KEY",  # a self-hosted server: no key
            "concurrency": 1,
        }
        config["judging"]["models"] += [API_MODEL, SLOW_MODEL]
        config_path = workdir / "e2e.yaml"
        config_path.write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        env.update(HF_HUB_OFFLINE="1", **{LEASE_ENV: str(LEASE_S)})
        cmd = snakemake(workdir, config_path, *PROFILES)
        stop, killed = threading.Event(), {}
        watcher = threading.Thread(
            target=kill_a_node_mid_cell, args=(workdir / "results/cache/llm", stop, killed)
        )
        watcher.start()
        try:
            first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S)
        finally:
            stop.set()
            watcher.join()
        after_first = result_mtimes(workdir)
        second = subprocess.run(
            cmd, capture_output=True, text=True, env={**env, KEY_ENV: API_KEY}, timeout=RUN_TIMEOUT_S
        )
        paid = {"api": Counter(server.requests), "slow": Counter(slow.requests)}
        # The same config locally, from a copy of the cluster's cache (no claims), with both servers up.
        local = make_workdir(base / "local")
        shutil.copytree(
            workdir / "results/cache/llm",
            local / "results/cache/llm",
            ignore=shutil.ignore_patterns(CLAIMS_DIR),
        )
        shards_before = sorted(p.name for p in (local / "results/cache/llm").glob("*.jsonl"))
        local_cmd = snakemake(local, config_path, "--cores", "2")
        local_run = subprocess.run(
            local_cmd, capture_output=True, text=True, env={**env, KEY_ENV: API_KEY}, timeout=RUN_TIMEOUT_S
        )
        shards_after = sorted(p.name for p in (local / "results/cache/llm").glob("*.jsonl"))
        paid_local = {"api": Counter(server.requests), "slow": Counter(slow.requests)}
    if killed.get("node"):
        subprocess.run(["bash", str(CLUSTER), "start-node", killed["node"]], check=False)
    for name, run in (
        ("run1", first),
        ("run2", second),
        ("local", local_run),
    ):  # for whoever debugs a failure
        (base / f"{name}.stderr").write_text(run.stderr)
    jobs = [submissions(first.stderr), submissions(second.stderr)]
    records = finished_jobs(set(jobs[0]) | set(jobs[1]))
    return {
        "workdir": workdir,
        "local": local,
        "runs": [first, second],
        "local_run": local_run,
        "jobs": jobs,
        "records": records,
        "killed": killed,
        "after_first": after_first,
        "after_second": result_mtimes(workdir),
        "paid": paid,
        "paid_local": paid_local,
        "local_shards": (shards_before, shards_after),
        "config": config,
    }


def rules_of(jobs: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {slurm_id: name for slurm_id, (name, _) in jobs.items()}


def judge_jobs(e2e, run: int, model: str) -> list[str]:
    """SLURM ids of run `run`'s judge jobs of `model` (the plugin's log folder is the wildcards' values
    joined by `_`)."""
    return [
        slurm_id
        for slurm_id, (name, wildcards) in e2e["jobs"][run].items()
        if name == "rule_judge" and re.search(rf"(^|_){re.escape(model)}(_|$)", wildcards)
    ]


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
    assert states <= {"COMPLETED", "FAILED", "NODE_FAIL"}, states


def test_jobs_ran_on_both_nodes_sharing_one_cache(e2e):
    nodes = {record["NodeList"] for record in e2e["records"].values()}
    assert nodes == cluster_nodes(), nodes
    # Both nodes wrote answers into the one cache directory (shards are named after their host)...
    cache = e2e["workdir"] / "results/cache/llm"
    writers = {p.name.rsplit("-", 2)[0] for p in cache.glob("*.jsonl")}
    assert writers == nodes, writers
    # ...and every request of the key-checked server was paid once, over both runs and both nodes.
    assert e2e["paid"]["api"] and set(e2e["paid"]["api"].values()) == {1}, e2e["paid"]["api"]


def test_gpu_jobs_landed_in_the_gpu_partition(e2e):
    partitions: dict[str, set[str]] = {}
    for jobs in e2e["jobs"]:
        for slurm_id, name in rules_of(jobs).items():
            partitions.setdefault(name, set()).add(e2e["records"][slurm_id]["Partition"])
    assert partitions.get("rule_judge") == {"gpu"}, partitions
    others = {
        name: parts for name, parts in partitions.items() if name.removeprefix("rule_") not in GPU_RULES
    }
    assert others and all(parts == {"cpu"} for parts in others.values()), others


def test_small_scoring_jobs_went_as_group_jobs(e2e):
    # The profile's `group-components: {scoring: ...}` merges the per-cell qrels and nDCG jobs, and the
    # overlay's `cores: 2` keeps each group job schedulable on a 2-CPU test node.
    # The plugin names a group job's log folder group_<group>_<its rules>.
    names = [name for jobs in e2e["jobs"] for name in rules_of(jobs).values()]
    assert any(name.startswith("group_scoring_") for name in names), names
    assert not {"rule_judge_qrels", "rule_ndcg", "rule_human_qrels"} & set(names), names
    scoring = [
        e2e["records"][i]
        for jobs in e2e["jobs"]
        for i, n in rules_of(jobs).items()
        if n.startswith("group_scoring_")
    ]
    assert scoring and all(int(r["ProcCnt"]) <= 2 for r in scoring), scoring


def test_the_failing_cells_are_reported_as_failed(e2e):
    first = e2e["runs"][0]
    assert first.returncode != 0, "a run with failed jobs must exit non-zero"
    assert re.search(rf"Error in rule judge:[\s\S]*?model={re.escape(API_MODEL)}", first.stderr), (
        first.stderr[-3000:]
    )
    assert "rejected the API key" in first.stderr, "the job's one-line error must reach the user"
    cells_per_model = len(e2e["config"]["judging"]["conditions"])
    states = [e2e["records"][job]["JobState"] for job in judge_jobs(e2e, 0, API_MODEL)]
    assert states == ["FAILED"] * cells_per_model, states


def test_a_node_died_in_the_middle_of_a_model_cell(e2e):
    killed = e2e["killed"]
    assert killed.get("node"), "no node stored enough of the slow model's answers to be killed mid-cell"
    assert len(killed["stored"]) >= 2, killed
    slow = judge_jobs(e2e, 0, SLOW_MODEL)
    dead = [job for job in slow if e2e["records"][job]["NodeList"] == killed["node"]]
    assert dead and {e2e["records"][job]["JobState"] for job in dead} == {"NODE_FAIL"}, (
        [e2e["records"][job] for job in slow],
        killed,
    )


def test_the_rerun_finishes_on_the_other_node_paying_only_the_in_flight_calls(e2e):
    second = e2e["runs"][1]
    assert second.returncode == 0, second.stderr[-5000:]
    killed = e2e["killed"]
    rerun = judge_jobs(e2e, 1, SLOW_MODEL)
    assert rerun, "the dead node's cells were not run again"
    assert {e2e["records"][job]["NodeList"] for job in rerun} == cluster_nodes() - {killed["node"]}
    # Answers the dead job had stored were not asked again; what it had asked and not stored (one call at
    # a time: concurrency 1 per job) is the most that was paid twice.
    dead_jobs = [
        job for job in judge_jobs(e2e, 0, SLOW_MODEL) if e2e["records"][job]["NodeList"] == killed["node"]
    ]
    repaid = sum(n - 1 for n in e2e["paid"]["slow"].values())
    assert 0 <= repaid <= len(dead_jobs), (repaid, e2e["paid"]["slow"])


def test_the_rerun_resumes_without_redoing_finished_cells(e2e):
    redone = {path for path, mtime in e2e["after_first"].items() if e2e["after_second"].get(path) != mtime}
    assert not redone, f"finished outputs were recomputed: {sorted(redone)[:10]}"
    judged = [p for p in e2e["after_second"] if "/judgments/" in p and p.endswith(".jsonl")]
    new = [p for p in judged if p not in e2e["after_first"]]
    assert any(f"/{API_MODEL}/" in p for p in new), new
    # No job that completed in the first run went to SLURM again (group jobs aside: their log folder names
    # only their first member).
    completed = {
        job for slurm_id, job in e2e["jobs"][0].items() if e2e["records"][slurm_id]["JobState"] == "COMPLETED"
    }
    again = {job for job in e2e["jobs"][1].values() if job in completed and job[0].startswith("rule_")}
    assert not again, sorted(again)


def test_a_local_run_from_the_same_answers_writes_the_same_outputs(e2e):
    local = e2e["local_run"]
    assert local.returncode == 0, local.stderr[-5000:]
    # No model call: every answer the workflow needs is in the cache the two nodes wrote.
    before, after = e2e["local_shards"]
    assert before == after, "the local run had to call a model"
    assert e2e["paid_local"] == e2e["paid"]
    cluster, mine = result_files(e2e["workdir"]), result_files(e2e["local"])
    assert set(cluster) == set(mine), sorted(set(cluster) ^ set(mine))
    differ = [name for name in sorted(cluster) if cluster[name].read_bytes() != mine[name].read_bytes()]
    assert not differ, differ
