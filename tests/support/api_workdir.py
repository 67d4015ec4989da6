"""Scratch working directories for workflow runs against tests/openai_server.py.

A working directory gets a tiny judging dataset (`data/`), a tiny CDV question file, and a copy of
tests/configs/api.yaml whose `api` model points at the test's server. Used by the fault, resume, secrets and
bad-input tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from stressprobe.llm.cache import iter_records
from tests.support.helpers import ROOT, run_snakemake, snakemake_command, workflow_env

API_CONFIG = ROOT / "tests" / "configs" / "api.yaml"
KEY_ENV = "STRESSPROBE_TEST_API_KEY"
DATASET = "tiny"

TOPICS = [
    "what causes ocean tides",
    "how do vaccines train the immune system",
    "why is the sky blue",
    "how does a refrigerator keep food cold",
]
PASSAGE_WORDS = ["moon", "gravity", "antibodies", "light", "scattering", "compressor", "heat", "water"]


def passage_text(q: int, p: int) -> str:
    """A distinct, plain passage for query q, passage p."""
    words = " ".join(PASSAGE_WORDS[(q + p + i) % len(PASSAGE_WORDS)] for i in range(6))
    return f"Passage {p} about {TOPICS[q]}: {words}."


def write_judging_data(workdir: Path, queries: int = 2, passages: int = 3) -> None:
    """`queries` x `passages` judged pairs (grades cycling 0-3) and two runs over them, under workdir/data."""
    data = workdir / "data"
    (data / "runs").mkdir(parents=True, exist_ok=True)
    topics, qrels, texts = [], [], []
    runs: dict[str, list[str]] = {"bm25": [], "dense": []}
    for q in range(queries):
        qid = f"q{q + 1}"
        topics.append(f"{qid}\t{TOPICS[q]}\n")
        docids = [f"{qid}d{p + 1}" for p in range(passages)]
        for p, docid in enumerate(docids):
            qrels.append(f"{qid} 0 {docid} {(q + p) % 4}\n")
            texts.append(f"{docid}\t{passage_text(q, p)}\n")
        for name, order in (("bm25", docids), ("dense", docids[::-1])):
            runs[name] += [f"{qid} Q0 {d} {r + 1} {10 - r} {name}\n" for r, d in enumerate(order)]
    (data / "topics.tsv").write_text("".join(topics))
    (data / "qrels.txt").write_text("".join(qrels))
    (data / "passages.tsv").write_text("".join(texts))
    for name, lines in runs.items():
        (data / "runs" / f"{name}.run").write_text("".join(lines))
    (data / "run_metadata.tsv").write_text("run\ttype\nbm25\tlexical\ndense\tneural\n")


CDV_QUESTIONS = [
    {
        "question": "Which planet is known as the red planet?",
        "choices": ["Mars", "Venus", "Jupiter", "Saturn"],
        "answer": "Mars",
        "source": "tiny",
    },
    {
        "question": "What do bees make?",
        "choices": ["Honey", "Silk", "Milk", "Wax paper"],
        "answer": "Honey",
        "source": "tiny",
    },
]


def write_cdv_questions(workdir: Path, questions: list[dict[str, Any]] | None = None) -> Path:
    """The CDV question file (JSON list, the demo data's shape) under workdir/data."""
    path = workdir / "data" / "cdv.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(questions if questions is not None else CDV_QUESTIONS, indent=1))
    return path


def set_key(config: dict[str, Any], dotted: str, value: Any) -> None:
    """Set config["a"]["b"]... for the key "a.b..." (creating sections)."""
    *parents, last = dotted.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def write_api_config(workdir: Path, base_url: str | None, edits: dict[str, Any] | None = None) -> Path:
    """workdir/config.yaml: tests/configs/api.yaml with the server's URL and `edits` (dotted key -> value)."""
    config = yaml.safe_load(API_CONFIG.read_text())
    config["models"]["api"]["base_url"] = base_url
    for dotted, value in (edits or {}).items():
        set_key(config, dotted, value)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def judge_cell(workdir: Path, condition: str = "baseline/umbrela", model: str = "api") -> dict[str, Path]:
    """The outputs and log of one judge cell of the tiny dataset."""
    base = workdir / "results" / "judging" / DATASET / "judgments" / model / condition
    return {
        "judgments": base.with_suffix(".jsonl"),
        "usage": base.with_suffix(".usage.json"),
        "summary": base.with_suffix(".summary.json"),
        "log": workdir / "results" / "logs" / "judging" / DATASET / "judge" / model / f"{condition}.log",
    }


def key_env(api_key: str | None) -> dict[str, str]:
    """The key in the variable the config names (None: the variable stays unset)."""
    return {} if api_key is None else {KEY_ENV: api_key}


def run_workflow(
    workdir: Path, config: Path, *targets: str, api_key: str | None = "sk-test-unused", check: bool = True
) -> subprocess.CompletedProcess:
    """Build `targets` (paths relative to workdir) with `config`; blocks until snakemake exits."""
    return run_snakemake(workdir, *targets, configfile=config, check=check, env=key_env(api_key), timeout=300)


def start_workflow(
    workdir: Path, config: Path, *targets: str, api_key: str | None = "sk-test-unused"
) -> subprocess.Popen:
    """Like run_workflow, but returns at once; snakemake and its jobs run in their own process group."""
    return subprocess.Popen(
        snakemake_command(workdir, config, *targets),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=workflow_env(key_env(api_key)),
        start_new_session=True,
    )


def kill_group(proc: subprocess.Popen) -> None:
    """kill -9 snakemake and every job it started (the whole process group)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen, timeout: float = 120) -> None:
    """Poll `condition` until it holds; fail if the run ends or time runs out first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended before the kill point ({proc.returncode}):\n{err[-4000:]}")
        if time.monotonic() > deadline:
            kill_group(proc)
            raise AssertionError("the kill point was not reached in time")
        time.sleep(0.02)


def error_lines(stderr: str) -> list[str]:
    """The one-line user errors (`error: ...`) a run printed."""
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def result_files(workdir: Path) -> dict[str, bytes]:
    """Every file under workdir/results except logs and benchmarks (whose content has timings), by path."""
    results = workdir / "results"
    skip = {"logs", "benchmarks", "cache"}
    return {
        str(p.relative_to(results)): p.read_bytes()
        for p in sorted(results.rglob("*"))
        if p.is_file() and p.relative_to(results).parts[0] not in skip
    }


def body_messages(body_key: str) -> tuple[tuple[str, str], ...]:
    """The (role, content) pairs of a request body as the server counted it (canonical JSON)."""
    return tuple((m["role"], m["content"]) for m in json.loads(body_key)["messages"])


def cached_messages(cache_path: Path) -> list[tuple[tuple[str, str], ...]]:
    """The messages of every response stored in a response cache (read straight from its shard files)."""
    return [tuple(tuple(m) for m in record["request"]["messages"]) for record in iter_records(cache_path)]
