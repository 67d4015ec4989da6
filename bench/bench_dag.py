"""Time the offline dry run of the papers' full grid (config/paper.yaml) against its 10 s budget, and count
the vLLM model loads that grid implies.

    python -m bench.bench_dag [repeats]

The dry run happens in a scratch directory where the config's placeholder paths (runs directories, RAG24
files) exist as empty files, so that Snakemake can build the whole DAG without any data or network.
Prints wall-clock and CPU seconds of each `snakemake -n` and the job count; then the vLLM model loads
(every job that opens a vLLM model loads it) with one judge or CDV evaluation job per cell (before:
`judging.vllm_one_job_per_dataset` and `cdv.eval.vllm_one_job_per_dataset` false), with one such job per
(dataset, model) but CDV victims that also evaluate searched in jobs of their own (`cdv.eval.vllm_served`
false), and with those served side by side by one job per dataset (after: the default).
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
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


def job_wildcards(output: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of every job a full (not --quiet) dry run lists; the models of a served CDV job's
    outputs (its searches' proxy and victim, its evaluations' model) under the key `served`."""
    jobs: list[tuple[str, dict[str, str]]] = []
    for line in output.splitlines():
        head = re.match(r"^\s*(?:local)?rule (\w+):$", line)
        if head:
            jobs.append((head.group(1), {}))
            continue
        found = re.match(r"^\s+wildcards: (.*)$", line)
        if found and jobs:
            jobs[-1][1].update(part.split("=", 1) for part in found.group(1).split(", "))
        outputs = re.match(r"^\s+output: (.*)$", line)
        if outputs and jobs and jobs[-1][0] == "cdv_vllm_served":
            jobs[-1][1]["served"] = " ".join(sorted(served_models(outputs.group(1).split(", "))))
    return jobs


def served_models(outputs: list[str]) -> set[str]:
    """The models a served CDV job loads, read from its output paths."""
    names: set[str] = set()
    for path in outputs:
        search = re.match(r"results/cdv/[^/]+/([^/]+)/([^/]+)/search\.jsonl$", path)
        evaluated = re.match(r"results/cdv/[^/]+/[^/]+/[^/]+/eval/([^/]+)\.jsonl$", path)
        names |= set(search.groups()) if search else set(evaluated.groups()) if evaluated else set()
    return names


# Which wildcards name the model(s) a job of each model-calling rule loads (the others use none or config).
LOADED_WILDCARDS = {
    "judge": ("model",),
    "judge_vllm": ("model",),
    "cdv_eval_vllm": ("model",),
    "cdv_eval": ("model",),
    "cdv_mitigation": ("model",),
    "cdv_search": ("proxy", "victim"),
}


def vllm_loads(jobs: list[tuple[str, dict[str, str]]], config: dict) -> Counter:
    """(model, dataset, rule) -> jobs that load that vLLM model."""
    models = config["models"]
    cdv = config.get("cdv", {})
    loads: Counter = Counter()
    for rule, wildcards in jobs:
        named = {wildcards.get(k) for k in LOADED_WILDCARDS.get(rule, ())}
        if rule == "summarize":
            named.add(config["judging"].get("summarizer"))
        if rule == "cdv_search":
            named.add(cdv.get("semantic_model") or wildcards.get("victim"))
        if rule == "cdv_vllm_served":
            named |= set(wildcards.get("served", "").split())
        if rule == "cdv_classifier":  # across datasets: its prompt-based classifiers
            named |= set(cdv.get("classifier", {}).get("prompt_models", []))
        if rule == "cdv_baselines":
            named.add(cdv.get("baseline_model") or wildcards.get("proxy"))
        for name in named:
            if name in models and models[name]["backend"] == "vllm":
                loads[(name, wildcards.get("dataset", "-"), rule)] += 1
    return loads


def per_model_dataset(loads: Counter) -> Counter:
    """(model, dataset) -> loads over all rules."""
    totals: Counter = Counter()
    for (model, dataset, _rule), count in loads.items():
        totals[(model, dataset)] += count
    return totals


def load_report(loads: Counter) -> str:
    per_model_dataset_ = per_model_dataset(loads)
    rules = Counter()
    for (_model, _dataset, rule), count in loads.items():
        rules[rule] += count
    worst = max(loads.values(), default=0)
    return (
        f"{sum(loads.values())} vLLM model loads "
        f"({', '.join(f'{r}: {n}' for r, n in sorted(rules.items()))}); "
        f"at most {worst} per (model, dataset, rule), "
        f"at most {max(per_model_dataset_.values(), default=0)} per (model, dataset) over all rules"
    )


def count_loads(workdir: Path, grouped: bool, served: bool | None = None) -> Counter:
    """Loads of the paper DAG with grouped judge/evaluation jobs on or off, and served CDV dataset jobs
    (default: as `grouped`)."""
    served = grouped if served is None else served
    config = yaml.safe_load(PAPER_CONFIG.read_text(encoding="utf-8"))
    config.setdefault("judging", {})["vllm_one_job_per_dataset"] = grouped
    evaluation = config.setdefault("cdv", {}).setdefault("eval", {})
    evaluation["vllm_one_job_per_dataset"] = grouped
    evaluation["vllm_served"] = served
    path = workdir / f"paper-grouped-{grouped}-served-{served}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    proc, _wall, _cpu = dry_run(workdir, config_path=path)
    if proc.returncode != 0:
        sys.exit(f"dry run failed:\n{proc.stderr[-3000:]}")
    # Each stream parsed on its own: their lines interleave when concatenated.
    return vllm_loads(job_wildcards(proc.stdout) + job_wildcards(proc.stderr), config)


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
        before = count_loads(workdir, grouped=False)
        grouped = count_loads(workdir, grouped=True, served=False)
        after = count_loads(workdir, grouped=True, served=True)
        print(f"before (a judge/CDV eval job per cell):           {load_report(before)}")
        print(f"grouped (one per (dataset, vLLM model) and rule): {load_report(grouped)}")
        print(f"after (and searching victims served with them):   {load_report(after)}")


if __name__ == "__main__":
    main()
