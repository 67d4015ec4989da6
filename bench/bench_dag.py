"""Time the offline dry run of the papers' full grid (config/paper.yaml) against its 10 s budget.

    python -m bench.bench_dag [repeats]

The dry run happens in a scratch directory where the config's placeholder paths (runs directories, RAG24
files) exist as empty files, so that Snakemake can build the whole DAG without any data or network.
Prints wall-clock and CPU seconds of each `snakemake -n` and the job count.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIG = ROOT / "config" / "paper.yaml"
LIMIT_S = 10.0


def make_paper_workdir(path: Path, config_path: Path = PAPER_CONFIG) -> Path:
    """A working directory where every local path the paper config names exists (empty), plus resources/."""
    path.mkdir(parents=True, exist_ok=True)
    if not (path / "resources").exists():
        (path / "resources").symlink_to(ROOT / "resources")
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    for entry in config["judging"]["datasets"].values():
        runs = path / entry["runs"]
        runs.mkdir(parents=True, exist_ok=True)
        (runs / "placeholder.run").touch()
        for key in ("topics", "qrels", "passages", "domains", "run_metadata"):
            if entry.get(key):
                (path / entry[key]).parent.mkdir(parents=True, exist_ok=True)
                (path / entry[key]).touch()
    return path


def dry_run(
    workdir: Path, *args: str, config_path: Path = PAPER_CONFIG
) -> tuple[subprocess.CompletedProcess, float, float]:
    """`snakemake -n` of the paper config in `workdir`: the process, its wall and its CPU seconds."""
    cmd = [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(ROOT / "Snakefile")]
    # Targets go before --configfile, which takes every following word as a config file.
    cmd += ["--directory", str(workdir), *args, "--configfile", str(config_path)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def job_counts(output: str) -> dict[str, int]:
    """The `Job stats` table of a dry run: rule -> number of jobs (with `total`)."""
    table = output[output.index("Job stats:") :]
    return {rule: int(count) for rule, count in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        workdir = make_paper_workdir(Path(tmp) / "work")
        for i in range(repeats):
            proc, wall, cpu = dry_run(workdir, "--quiet", "rules")
            if proc.returncode != 0:
                sys.exit(f"dry run failed:\n{proc.stderr[-3000:]}")
            jobs = job_counts(proc.stdout + proc.stderr)["total"]
            verdict = "within" if wall < LIMIT_S else "OVER"
            print(
                f"run {i + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU, {jobs} jobs "
                f"({verdict} the {LIMIT_S:.0f} s limit)"
            )


if __name__ == "__main__":
    main()
