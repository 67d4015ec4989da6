"""What the SLURM end-to-end tests read from the test cluster (tests/slurm/cluster.sh) and from Snakemake."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from stressprobe.llm.shards import decode_line, parse_record
from tests.support.helpers import ROOT

SLURM_DIR = Path(os.environ.get("SLURM_CI_DIR", ROOT / ".slurm-ci"))
JOBCOMP = SLURM_DIR / "log" / "jobcomp.txt"
CLUSTER = ROOT / "tests" / "slurm" / "cluster.sh"
SUBMITTED = re.compile(r"Job (\S+) has been submitted with SLURM jobid (\d+) \(log: (\S+)\)")
# Per attempt or per host, never compared between runs: logs, benchmarks, the cache, usage sidecars (a
# call on one run is a cache hit on the other).
NOT_OUTPUTS = ("logs", "benchmarks", "cache")


def cluster_partitions() -> set[str]:
    """Partitions of the running cluster, or none when SLURM is not up."""
    if shutil.which("sinfo") is None:
        return set()
    proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    return {p.rstrip("*") for p in proc.stdout.split()} if proc.returncode == 0 else set()


def cluster_nodes() -> set[str]:
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30)
    return set(proc.stdout.split())


def controller_addr() -> str:
    """The controller's address on the cluster's test network (slurm.conf's `SlurmctldHost=name(addr)`):
    the compute nodes' namespaces reach this machine's servers there, not on 127.0.0.1."""
    conf = (SLURM_DIR / "slurm.conf").read_text()
    return re.search(r"^SlurmctldHost=[^(\s]+\(([^)]+)\)", conf, re.M).group(1)


def submissions(stderr: str) -> dict[str, tuple[str, str]]:
    """SLURM job id -> (`rule_<name>` or `group_<name>`, its wildcards folder), from Snakemake's messages."""
    jobs = {}
    for _, slurm_id, log in SUBMITTED.findall(stderr):
        # The plugin logs to .snakemake/slurm_logs/<rule_NAME|group_NAME>/<wildcards>/<id>.log
        parts = Path(log).parts
        at = next(i for i, part in enumerate(parts) if part.startswith(("rule_", "group_")))
        jobs[slurm_id] = (parts[at], parts[at + 1] if at + 2 < len(parts) else "")
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
    """SLURM's record (JobState, Partition, NodeList, ...) of each wanted job, from the job completion log."""
    deadline = time.monotonic() + timeout
    while True:
        records = {}
        for line in JOBCOMP.read_text().splitlines() if JOBCOMP.exists() else []:
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            records[fields["JobId"]] = fields
        if wanted <= set(records) or time.monotonic() > deadline:
            return {job: records[job] for job in wanted if job in records}
        time.sleep(1)


def result_files(workdir: Path) -> dict[str, Path]:
    """Every result file of a run (logs, benchmarks, the cache and usage sidecars aside)."""
    results = workdir / "results"
    return {
        str(p.relative_to(results)): p
        for p in results.rglob("*")
        if p.is_file()
        and p.relative_to(results).parts[0] not in NOT_OUTPUTS
        and not p.name.endswith(".usage.json")
    }


def result_mtimes(workdir: Path) -> dict[str, float]:
    return {name: path.stat().st_mtime for name, path in result_files(workdir).items()}


def stored_by_host(cache: Path, model: str) -> dict[str, set[str]]:
    """Keys of `model`'s answers in the cache, per host of the shard that holds them (shard names begin
    with the writer's host name)."""
    held: dict[str, set[str]] = {}
    for data in cache.glob("*.jsonl"):
        host = data.name.rsplit("-", 2)[0]
        for line in data.read_bytes().splitlines(keepends=True):
            decoded = decode_line(line)
            if decoded is None:
                break  # a torn last record (its writer was killed), or one still being written
            if parse_record(decoded[1])["model"] == model:
                held.setdefault(host, set()).add(decoded[0])
    return held
