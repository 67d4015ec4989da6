"""config/paper.yaml: valid, and its whole DAG builds offline, fast, with one job per cell of the grid."""

from __future__ import annotations

import re
import sys

import pytest
import yaml
from helpers import ROOT

from stressprobe.config import validate_config

sys.path.insert(0, str(ROOT / "bench"))
from bench_dag import LIMIT_S, PAPER_CONFIG, dry_run, job_counts, make_paper_workdir  # noqa: E402

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def paper():
    return validate_config(yaml.safe_load(PAPER_CONFIG.read_text(encoding="utf-8")), SCHEMA)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return make_paper_workdir(tmp_path_factory.mktemp("paper") / "work")


@pytest.fixture(scope="module")
def plan(workdir):
    proc, wall, cpu = dry_run(workdir, "--quiet", "rules")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return job_counts(proc.stdout + proc.stderr), wall, cpu


def test_the_grid_is_the_papers(paper):
    judging, cdv = paper["judging"], paper["cdv"]
    assert set(judging["datasets"]) == {"dl20", "rag24"}
    assert judging["datasets"]["dl20"]["ir_datasets_id"] == "msmarco-passage/trec-dl-2020/judged"
    assert len(judging["models"]) == 6 and len(judging["conditions"]) == 9
    backends = {paper["models"][m]["backend"] for m in judging["models"]}
    assert backends == {"openai", "vllm"}
    assert paper["models"][judging["summarizer"]]["model"].startswith("gpt-4o")
    assert set(cdv["datasets"]) == {"MMLU", "CommonsenseQA", "OpenbookQA", "TruthfulQA"}
    for name, entry in paper["models"].items():
        if entry["backend"] == "vllm":
            assert entry["gpus"] >= entry["tensor_parallel_size"], name
        if entry["backend"] == "openai":
            assert entry["price"]["prompt_per_1m"] > 0, f"{name}: the cost estimate needs its price"


def test_dry_run_lists_one_job_per_cell(paper, plan):
    jobs, _, _ = plan
    judging, cdv = paper["judging"], paper["cdv"]
    judge_cells = len(judging["datasets"]) * len(judging["models"]) * len(judging["conditions"])
    assert jobs["judge"] == judge_cells
    assert jobs["judge_qrels"] == judge_cells
    # a judge cell's nDCG table comes with its qrels; `ndcg` scores the human qrels of each dataset
    assert jobs["ndcg"] == len(judging["datasets"])
    assert jobs["summarize"] == len(judging["datasets"])
    search_cells = len(cdv["datasets"]) * len(cdv["cells"])
    assert jobs["cdv_search"] == search_cells
    assert jobs["cdv_eval"] == search_cells * len(cdv["eval_models"])
    # Downloads are jobs of the DAG, not work done while it is built.
    assert jobs["prepare_dataset"] == len(judging["datasets"])
    assert jobs["persona_pool"] == len(paper["personas"]["sources"])
    assert jobs["cdv_prepare"] == len(cdv["datasets"])


def test_dry_run_is_fast(plan):
    _, wall, cpu = plan
    # CPU seconds: wall time also counts waiting for a busy machine's cores (bench/bench_dag.py shows both).
    assert cpu < LIMIT_S, f"paper dry run took {cpu:.1f} s CPU ({wall:.1f} s wall); limit {LIMIT_S} s"


def resources_of(output: str, rule: str) -> dict[str, str]:
    block = re.search(rf"^rule {rule}:\n((?:    .*\n)*)", output, re.M)
    assert block, output[-3000:]
    line = re.search(r"^    resources: (.*)$", block.group(1), re.M).group(1)
    return dict(item.split("=", 1) for item in line.split(", "))


@pytest.mark.parametrize("model", ["llama-3.1-70b", "qwen2.5-7b", "gpt-4o"])
def test_vllm_cells_ask_for_the_models_gpus(paper, workdir, model):
    target = f"results/judging/dl20/judgments/{model}/baseline/umbrela.jsonl"
    proc, _, _ = dry_run(workdir, target)
    assert proc.returncode == 0, proc.stderr[-4000:]
    resources = resources_of(proc.stdout + proc.stderr, "judge")
    entry = paper["models"][model]
    expected = entry["gpus"] if entry["backend"] == "vllm" else 0
    assert int(resources.get("gpu", 0)) == expected
