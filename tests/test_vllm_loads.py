"""One vLLM model load per (model, dataset): a vLLM judge answers all its cells in one job (rule judge_vllm),
a vLLM evaluator all its CDV cells (cdv_eval_vllm), and vLLM models that both search and evaluate are served
side by side by one job per CDV dataset (cdv_vllm_served).

The dry runs need no vLLM. The in-process evaluation runs real vLLM (vLLM's CPU build, tests/support/
vllm_real.py; judge_vllm's one load is tested in tests/test_vllm_real.py). The served job needs GPUs (two
models on their own GPUs, one with tensor parallelism over two): its jobs import the stand-in package
tests/support/vllm_standin/vllm, which logs every engine load and every request, so the test counts them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.support.api_workdir import (
    KEY_ENV,
    run_workflow,
    write_api_config,
    write_cdv_questions,
    write_judging_data,
)
from tests.support.helpers import ROOT, make_workdir, run_snakemake
from tests.support.openai_server import OpenAIServer
from tests.support.paper_dag import job_counts
from tests.support.vllm_real import engine_entry, engine_log, require, run_in_env

STANDIN = ROOT / "tests" / "support" / "vllm_standin"
CONDITIONS = ["baseline/umbrela", "fixed/evidence", "fixed/gap"]
PAIRS = 6  # write_judging_data's default


def vllm_config(workdir: Path, **edits) -> Path:
    return write_api_config(
        workdir,
        None,
        {
            "models.gpu": {"backend": "vllm", "model": "org/judge-70b", "gpus": 1},
            "judging.models": ["api", "gpu"],
            "judging.conditions": CONDITIONS,
            "cdv.enabled": False,
            **edits,
        },
    )


def events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def standin(monkeypatch, tmp_path):
    log = tmp_path / "vllm-events.jsonl"
    path = os.pathsep.join(filter(None, [str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("STRESSPROBE_VLLM_STANDIN_LOG", str(log))
    return log


def test_dry_run_plans_one_vllm_job_per_dataset_and_one_job_per_cell_for_the_others(tmp_path):
    workdir = make_workdir(tmp_path / "w")
    write_judging_data(workdir)
    proc = run_snakemake(workdir, "-n", "--quiet", "rules", configfile=vllm_config(workdir))
    counts = dict(
        line.split()[:2] for line in proc.stdout.splitlines() if line[:1].isalpha() and len(line.split()) == 2
    )
    assert counts["judge_vllm"] == "1"  # one dataset, one vLLM judge: all 3 cells in one job
    assert counts["judge"] == str(len(CONDITIONS))  # the API judge keeps a job per cell

    # Switched off, every cell is a job of its own again.
    config = vllm_config(workdir, **{"judging.vllm_one_job_per_dataset": False})
    proc = run_snakemake(workdir, "-n", "--quiet", "rules", configfile=config)
    counts = dict(
        line.split()[:2] for line in proc.stdout.splitlines() if line[:1].isalpha() and len(line.split()) == 2
    )
    assert "judge_vllm" not in counts and counts["judge"] == str(2 * len(CONDITIONS))


@pytest.mark.slow
def test_a_vllm_judge_job_asks_all_its_cells_in_one_engine_call(tmp_path, standin):
    # The engine batches what it is given: a job handing it one cell at a time batches less than a bare
    # loop that hands it everything (bench_vllm). With a batch_size above the job's requests, one call.
    workdir = make_workdir(tmp_path / "w")
    write_judging_data(workdir)
    entry = {"backend": "vllm", "model": "org/judge-70b", "gpus": 1, "batch_size": 512}
    config = vllm_config(workdir, **{"models.gpu": entry, "judging.models": ["gpu"]})
    run_workflow(workdir, config, f"results/judging/tiny/judgments/gpu/{CONDITIONS[0]}.jsonl")
    chats = [e["requests"] for e in events(standin) if e["event"] == "chat"]
    assert chats == [PAIRS * len(CONDITIONS)]
    # Each cell's sidecar still counts its own requests, and together they count every one asked.
    for condition in CONDITIONS:
        usage = json.loads(
            (workdir / f"results/judging/tiny/judgments/gpu/{condition}.usage.json").read_text()
        )
        assert (usage["calls_made"], usage["cache_hits"], usage["errors"]) == (PAIRS, 0, 0)


@pytest.mark.slow
def test_a_vllm_evaluation_job_asks_all_its_cells_in_one_engine_call(tmp_path, standin):
    # As the judge's: every cell's originals, perturbed questions, baselines and mitigated asks in one call.
    workdir = make_workdir(tmp_path / "w")
    write_cdv_questions(workdir)
    cells = [{"proxy": "api", "victim": "api"}, {"proxy": "api", "victim": "api2"}]
    targets = [
        f"results/cdv/tinyqa/{c['proxy']}/{c['victim']}/{kind}/gpu.jsonl"
        for c in cells
        for kind in ("eval", "mitigation")
    ]
    with OpenAIServer() as server:
        config = write_api_config(workdir, server.base_url)
        data = yaml.safe_load(config.read_text())
        data["models"]["api2"] = {**data["models"]["api"], "model": "test-model-2"}
        data["models"]["gpu"] = {"backend": "vllm", "model": "org/eval-8b", "gpus": 1, "batch_size": 512}
        data["cdv"]["cells"] = cells
        data["cdv"]["eval_models"] = ["gpu"]
        data["judging"]["models"] = ["api"]
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        run_workflow(workdir, config, *targets)
    chats = [e["requests"] for e in events(standin) if e["event"] == "chat"]
    made = 0
    for target in targets:
        records = (workdir / target).read_text().splitlines()
        usage = json.loads((workdir / target).with_suffix(".usage.json").read_text())
        # Each output's sidecar still counts its own questions: one request per record, made or a hit.
        assert records and usage["calls_made"] + usage["cache_hits"] == len(records), target
        made += usage["calls_made"]
    assert len(chats) == 1 and chats == [made]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_one_load_evaluates_every_cdv_cell_of_a_dataset(tmp_path):
    """On real vLLM (tests/support/vllm_real.py): one job evaluates both search cells' questions."""
    python, model = require()
    workdir = make_workdir(tmp_path / "w")
    write_cdv_questions(workdir)
    cells = [{"proxy": "api", "victim": "api"}, {"proxy": "api", "victim": "api2"}]
    with OpenAIServer() as server:
        config = write_api_config(workdir, server.base_url)
        data = yaml.safe_load(config.read_text())
        data["models"]["api2"] = {**data["models"]["api"], "model": "test-model-2"}
        data["models"]["gpu"] = engine_entry(model)
        data["cdv"]["cells"] = cells
        data["cdv"]["eval_models"] = ["gpu"]
        data["judging"]["models"] = ["api"]
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        targets = [
            f"results/cdv/tinyqa/{c['proxy']}/{c['victim']}/{kind}/gpu.jsonl"
            for c in cells
            for kind in ("eval", "mitigation")
        ]
        proc = run_in_env(python, workdir, config, *targets, env={KEY_ENV: "sk-test-unused"})
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert job_counts(proc.stdout + proc.stderr)["cdv_eval_vllm"] == 1
    loads, asked = engine_log(workdir / "results/logs/cdv/eval/tinyqa/gpu.log")
    calls = 0
    for target in targets:
        records = [json.loads(line) for line in (workdir / target).read_text().splitlines()]
        usage = json.loads((workdir / target).with_suffix(".usage.json").read_text())
        # Each output's sidecar counts its own questions: one request per record, made or from the cache.
        assert records and (usage["model"], usage["backend"]) == ("gpu", "vllm"), target
        assert usage["calls_made"] + usage["cache_hits"] == len(records), target
        calls += usage["calls_made"]
    assert (loads, asked) == (1, calls)  # one engine load; every request it was asked is in a sidecar


SERVED_CELLS = [{"proxy": "gpu-a", "victim": "gpu-a"}, {"proxy": "gpu-b", "victim": "gpu-b"}]


def served_config(workdir: Path, base_url: str, **edits) -> Path:
    """Two vLLM models that search themselves and evaluate each other's perturbed questions on one dataset
    (the cycle that needs them resident side by side); baselines by the API model."""
    return write_api_config(
        workdir,
        base_url,
        {
            "models.gpu-a": {"backend": "vllm", "model": "org/a-72b", "gpus": 2, "tensor_parallel_size": 2},
            "models.gpu-b": {"backend": "vllm", "model": "org/b-27b", "gpus": 1},
            "judging.models": ["api"],
            "cdv.cells": SERVED_CELLS,
            "cdv.eval_models": ["gpu-a", "gpu-b"],
            "cdv.baseline_model": "api",
            "cdv.mitigation.enabled": True,
            **edits,
        },
    )


def served_files() -> list[str]:
    cells = [f"results/cdv/tinyqa/{c['proxy']}/{c['victim']}" for c in SERVED_CELLS]
    search = ["search.jsonl", "perturbed.jsonl", "search.summary.json", "search.usage.json"]
    evals = [
        f"{kind}/{m}{ext}"
        for kind in ("eval", "mitigation")
        for m in ("gpu-a", "gpu-b")
        for ext in (".jsonl", ".usage.json")
    ]
    return [f"{cell}/{name}" for cell in cells for name in search + evals]


def test_dry_run_plans_one_served_job_per_dataset_and_none_when_switched_off(tmp_path):
    workdir = make_workdir(tmp_path / "w")
    write_cdv_questions(workdir)
    config = served_config(workdir, "http://127.0.0.1:9/v1")
    proc = run_snakemake(workdir, "-n", *served_files(), configfile=config)
    out = proc.stdout + proc.stderr
    counts = job_counts(out)
    assert counts["cdv_vllm_served"] == 1 and "cdv_search" not in counts and "cdv_eval_vllm" not in counts
    assert re.search(r"rule cdv_vllm_served:\n(?:    .*\n)*    resources: .*\bgpu=3\b", out), out[-3000:]

    # Without mitigation the job writes no mitigation files.
    config = served_config(workdir, "http://127.0.0.1:9/v1", **{"cdv.mitigation.enabled": False})
    evals = [f for f in served_files() if "/mitigation/" not in f]
    counts = job_counts(run_snakemake(workdir, "-n", *evals, configfile=config).stdout)
    assert counts["cdv_vllm_served"] == 1 and "cdv_mitigation" not in counts

    # Switched off: the searches and evaluations are jobs of their own again (two loads per model).
    config = served_config(workdir, "http://127.0.0.1:9/v1", **{"cdv.eval.vllm_served": False})
    counts = job_counts(run_snakemake(workdir, "-n", *served_files(), configfile=config).stdout)
    assert "cdv_vllm_served" not in counts
    assert counts["cdv_search"] == 2 and counts["cdv_eval_vllm"] == 2


@pytest.mark.parametrize(("budget", "served", "alone"), [(2, "gpu-a", "gpu-b"), (1, "gpu-b", "gpu-a")])
def test_the_served_job_takes_the_largest_models_that_fit_its_gpus(tmp_path, budget, served, alone):
    workdir = make_workdir(tmp_path / "w")
    write_cdv_questions(workdir)
    config = served_config(workdir, "http://127.0.0.1:9/v1", **{"cdv.eval.vllm_served_gpus": budget})
    out = run_snakemake(workdir, "-n", *served_files(), configfile=config).stdout
    counts = job_counts(out)
    # The model that does not fit searches and evaluates in jobs of its own: its own cell's search, and its
    # evaluation of both cells once the served job has searched the other.
    assert counts["cdv_vllm_served"] == counts["cdv_search"] == counts["cdv_eval_vllm"] == 1
    served_job = re.search(r"rule cdv_vllm_served:\n((?:    .*\n)*)", out).group(1)
    assert f"tinyqa/{served}/{served}/search.jsonl" in served_job
    assert f"eval/{alone}.jsonl" not in served_job and f"{alone}/{alone}/search.jsonl" not in served_job
    gpus = {"gpu-a": 2, "gpu-b": 1}
    assert re.search(rf"    resources: .*\bgpu={gpus[served]}\b", served_job), served_job
    search_job = re.search(r"rule cdv_search:\n((?:    .*\n)*)", out).group(1)
    assert f"wildcards: dataset=tinyqa, proxy={alone}, victim={alone}" in search_job


@pytest.mark.slow
def test_one_served_job_loads_each_model_once_for_its_searches_and_evaluations(tmp_path, standin):
    workdir = make_workdir(tmp_path / "w")
    write_cdv_questions(workdir)
    files = served_files()
    with OpenAIServer() as server:
        config = served_config(workdir, server.base_url)
        # One cell's file as the target: the dataset job writes every cell's files.
        run_workflow(workdir, config, files[-1])
        loads = [e for e in events(standin) if e["event"] == "load"]
        assert sorted((e["model"], e["gpus"], e.get("served")) for e in loads) == [
            ("org/a-72b", "0,1", True),
            ("org/b-27b", "2", True),
        ]
        for name in files:  # (the stand-in's proxy writes no usable context: perturbed.jsonl stays empty)
            assert (workdir / name).exists() and ("perturbed" in name or (workdir / name).stat().st_size), (
                name
            )
        calls = sum(e["requests"] for e in events(standin) if e["event"] == "chat")
        made = sum(
            json.loads((workdir / f).read_text())["calls_made"] for f in files if f.endswith("usage.json")
        )
        assert calls > 0 and made == calls  # every request the servers answered is in some cell's sidecar
        # Each cell's eval sidecar names its model and backend, as cdv_eval_vllm writes it.
        usage = json.loads((workdir / "results/cdv/tinyqa/gpu-a/gpu-a/eval/gpu-b.usage.json").read_text())
        assert (usage["model"], usage["backend"]) == ("gpu-b", "vllm")

        # Every cell is a target of its own and up to date.
        proc = run_workflow(workdir, config, *files)
        assert "Nothing to be done" in proc.stdout + proc.stderr

        # One cell's evaluation lost: the job reruns and the servers load again, but every answer comes
        # from the cache (no new chat request).
        lost = workdir / "results/cdv/tinyqa/gpu-a/gpu-a/eval/gpu-b.jsonl"
        lost.unlink()
        run_workflow(workdir, config, *files)
        assert lost.exists()
        later = events(standin)
        assert len([e for e in later if e["event"] == "load"]) == 4
        assert sum(e["requests"] for e in later if e["event"] == "chat") == calls
        assert json.loads(lost.with_suffix(".usage.json").read_text())["calls_made"] == 0

        # A config change that concerns the job (the evaluation's token limit) plans it again.
        edited = served_config(workdir, server.base_url, **{"cdv.eval.max_tokens": 9})
        planned = job_counts(run_snakemake(workdir, "-n", *files, configfile=edited).stdout)
        assert planned["cdv_vllm_served"] == 1
        # So does one served model's own limit (each evaluation asks at its model's limit).
        edited = served_config(workdir, server.base_url, **{"cdv.eval.model_max_tokens": {"gpu-b": 9}})
        planned = job_counts(run_snakemake(workdir, "-n", *files, configfile=edited).stdout)
        assert planned["cdv_vllm_served"] == 1

        # Switched off: the in-process jobs take over and every answer comes from the served runs' cache
        # entries (the same vllm identity); each model is loaded by its search and by its evaluation.
        before = len(events(standin))
        off = served_config(workdir, server.base_url, **{"cdv.eval.vllm_served": False})
        run_workflow(workdir, off, *files)
    switched = events(standin)[before:]
    assert (
        sorted(e["model"] for e in switched if e["event"] == "load") == ["org/a-72b"] * 2 + ["org/b-27b"] * 2
    )
    assert not [e for e in switched if e["event"] == "chat"]
