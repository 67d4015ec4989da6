"""The papers' grid (config/paper.yaml) planned offline, for the tests and the benchmarks (bench_dag,
bench_overlap): a scratch directory where the config's placeholder paths (runs directories, RAG24 files)
exist as empty files, so that Snakemake builds the whole DAG without any data or network; its dry run and
job table; the vLLM model loads it implies; and the requests of its CDV cells that more than one job would
ask (through the cost stage's own cell list, with distinct stand-in questions in place of each dataset's
sample: a request's identity depends on its question's text, not on what the text says)."""

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

from tests.support.helpers import ROOT

PAPER_CONFIG = ROOT / "config" / "paper.yaml"
# The budget of one dry run of the whole paper DAG, in seconds (bench_dag, tests/test_paper_config.py).
LIMIT_S = 10.0
# Questions of a dataset whose config takes the whole file (`n: null`): the authors' samples hold 300 each.
PAPER_SAMPLE = 300


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


def stand_in_questions(dataset: str, count: int) -> list[dict]:
    return [
        {"question": f"{dataset} question {i}?", "choices": ["A", "B", "C", "D"], "answer_index": i % 4}
        for i in range(count)
    ]


def paper_cells(workdir: Path) -> tuple[list[dict], dict]:
    """The paper config's CDV cells as the cost stage lists them, and the config."""
    # Imported here: loading Snakemake's API takes a second, which the tests that only dry-run need not pay.
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(configfiles=[PAPER_CONFIG]),
            storage_settings=StorageSettings(),
            snakefile=ROOT / "Snakefile",
            workdir=workdir,
        )._workflow
        return workflow.globals["cost_cdv_cells"](), workflow.config


def paper_overlap() -> tuple[list[dict], list]:
    """The paper grid's CDV cells and the overlap rows of their fixed requests."""
    # Imported here too: the cost code loads pandas, which the dry-run tests need not pay for either.
    from stressprobe.cdv.cost_bounds import cdv_estimates
    from stressprobe.overlap import overlap_rows

    with tempfile.TemporaryDirectory() as tmp:
        cells, config = paper_cells(make_paper_workdir(Path(tmp)))
    cdv = config["cdv"]
    questions = {d: stand_in_questions(d, entry["n"] or PAPER_SAMPLE) for d, entry in cdv["datasets"].items()}
    asks: list = []
    cdv_estimates(cells, questions, cdv, config["models"], asks)
    return cells, overlap_rows(asks)
