"""config/paper.yaml: valid, and its whole DAG builds offline, fast, with one job per cell of the grid."""

from __future__ import annotations

import re

import pytest
import yaml

from bench.bench_dag import LIMIT_S, PAPER_CONFIG, dry_run, job_counts, make_paper_workdir
from stressprobe.config import validate_config
from tests.support.helpers import ROOT

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
    vllm = {name for name, entry in paper["models"].items() if entry["backend"] == "vllm"}
    vllm_judges = [m for m in judging["models"] if m in vllm]
    # vLLM judges answer all conditions of a dataset in one job (one model load); the others one per cell.
    assert jobs["judge"] == judge_cells - len(judging["datasets"]) * len(vllm_judges) * len(
        judging["conditions"]
    )
    assert jobs["judge_vllm"] == len(judging["datasets"]) * len(vllm_judges)
    assert jobs["judge_qrels"] == judge_cells
    # a judge cell's nDCG table comes with its qrels; `ndcg` scores the human qrels of each dataset
    assert jobs["ndcg"] == len(judging["datasets"])
    assert jobs["summarize"] == len(judging["datasets"])
    pairs = {(c["proxy"], c["victim"]) for e in cdv["experiments"].values() for c in e["cells"]}
    search_cells = len(cdv["datasets"]) * len(pairs)
    cost_cells = len(cdv["datasets"]) * 2  # classifier-selected and random questions (Table 3)
    # vLLM evaluators answer every cell of a dataset in one job (one model load), the others one job per cell;
    # those that also search themselves are served side by side with their searches by one job per dataset.
    vllm_evaluated = [m for m in cdv["eval_models"] if m in vllm]
    served = [m for m in vllm_evaluated if (m, m) in pairs]
    assert sorted(served) == ["gemma-2-27b", "qwen2.5-72b"]
    assert jobs["cdv_vllm_served"] == len(cdv["datasets"])
    assert jobs["cdv_search"] == search_cells - len(cdv["datasets"]) * len(served) + cost_cells
    cell_evaluated = len(cdv["eval_models"]) - len(vllm_evaluated)
    assert jobs["cdv_eval"] == search_cells * cell_evaluated
    assert jobs["cdv_mitigation"] == search_cells * cell_evaluated
    assert jobs["cdv_eval_vllm"] == len(cdv["datasets"]) * (len(vllm_evaluated) - len(served))
    assert jobs["cdv_baselines"] == search_cells
    # One nested subsample per (dataset, sample size): 100 (self-search) and 300 (scale-up).
    assert jobs["cdv_subsample"] == len(cdv["datasets"]) * 2
    assert jobs["cdv_filter_select"] == len(cdv["datasets"])
    assert jobs["cdv_classifier"] == 1 and jobs["cdv_dpo_export"] == 1 and jobs["cdv_dpo_train"] == 1
    # experiments, classifier study, filter cost, DPO, vs_paper
    assert jobs["cdv_study_table"] == 5
    assert jobs["cdv_study_figure"] == 2  # Figures 2/6 (experiments) and 5 (classifier study)
    # Downloads are jobs of the DAG, not work done while it is built.
    assert jobs["prepare_dataset"] == len(judging["datasets"])
    assert jobs["persona_pool"] == len(paper["personas"]["sources"])
    assert jobs["cdv_prepare"] == len(cdv["datasets"])
    # Published files are fetched (and checksummed) by one job each, never read from the repository: the
    # UMBRELA template, the CDV authors' four question samples and their prompt file (whose templates one
    # job lists).
    assert jobs["fetch_source"] == 1 + len(cdv["datasets"]) + 1
    assert jobs["cdv_prompt_inventory"] == 1
    # Section 4.4: both ablated value functions on the cost experiment's random questions of each dataset.
    assert jobs["cdv_search_variant"] == 2 * len(cdv["datasets"])


def test_the_judge_prompt_is_the_official_umbrela_template(paper):
    judging, source = paper["judging"], paper["sources"]["umbrela_zeroshot"]
    assert judging["prompt"] == "source:umbrela_zeroshot" and judging["prompt_sha256"] is None
    assert source["url"] == (
        "https://raw.githubusercontent.com/castorini/umbrela/01cc3abfb11fdce82613cf4d58254bb52095c04e/"
        "src/umbrela/prompts/prompt_templates/qrel_zeroshot_bing.yaml"
    )
    assert source["sha256"] == "0acee5259241028d3edb2a4f6a142238f8616f661eda75c37197447f2df2d0e1"
    # §3.2.1: GAP is a fixed system prompt
    assert paper["personas"]["delivery"] == {"evidence": "prefix", "gap": "system"}


def test_dry_run_is_fast(plan):
    _, wall, cpu = plan
    # CPU seconds: wall time also counts waiting for a busy machine's cores (bench/bench_dag.py shows both).
    assert cpu < LIMIT_S, f"paper dry run took {cpu:.1f} s CPU ({wall:.1f} s wall); limit {LIMIT_S} s"


def resources_of(output: str, rule: str) -> dict[str, str]:
    block = re.search(rf"^rule {rule}:\n((?:    .*\n)*)", output, re.M)
    assert block, output[-3000:]
    line = re.search(r"^    resources: (.*)$", block.group(1), re.M).group(1)
    return dict(item.split("=", 1) for item in line.split(", "))


def test_the_served_cdv_job_asks_for_the_gpus_of_all_its_models(paper, workdir):
    target = "results/cdv/MMLU/qwen2.5-72b/qwen2.5-72b/eval/gemma-2-27b.jsonl"
    proc, _, _ = dry_run(workdir, target)
    assert proc.returncode == 0, proc.stderr[-4000:]
    resources = resources_of(proc.stdout + proc.stderr, "cdv_vllm_served")
    models = paper["models"]
    assert int(resources["gpu"]) == models["qwen2.5-72b"]["gpus"] + models["gemma-2-27b"]["gpus"] == 6
    assert int(resources["mem_mb"]) == paper["resources"]["llm_gpu"]["mem_mb"]


def test_the_classifier_job_is_a_gpu_job_when_a_prompt_classifier_runs_on_vllm(paper, workdir):
    proc, _, _ = dry_run(workdir, "results/cdv/classifier/metrics.json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    resources = resources_of(proc.stdout + proc.stderr, "cdv_classifier")
    models = paper["models"]
    vllm = [m for m in paper["cdv"]["classifier"]["prompt_models"] if models[m]["backend"] == "vllm"]
    assert vllm  # the study's prompt-based classifiers include open models
    # They load one after another: the largest decides the GPUs.
    assert int(resources["gpu"]) == max(models[m]["gpus"] for m in vllm) == 4
    assert int(resources["mem_mb"]) == paper["resources"]["llm_gpu"]["mem_mb"]


@pytest.mark.parametrize("model", ["llama-3.1-70b", "qwen2.5-7b", "gpt-4o"])
def test_vllm_cells_ask_for_the_models_gpus(paper, workdir, model):
    target = f"results/judging/dl20/judgments/{model}/baseline/umbrela.jsonl"
    proc, _, _ = dry_run(workdir, target)
    assert proc.returncode == 0, proc.stderr[-4000:]
    entry = paper["models"][model]
    # A vLLM judge's cell is written by its (dataset, model) job.
    resources = resources_of(
        proc.stdout + proc.stderr, "judge_vllm" if entry["backend"] == "vllm" else "judge"
    )
    expected = entry["gpus"] if entry["backend"] == "vllm" else 0
    assert int(resources.get("gpu", 0)) == expected


def test_vllm_models_load_once_per_dataset(paper, workdir):
    from bench.bench_dag import count_loads, per_model_dataset

    after = count_loads(workdir, grouped=True)
    totals = per_model_dataset(after)
    assert after and max(totals.values()) == 1, sorted(after.items(), key=lambda kv: -kv[1])[:3]
    # Each searching vLLM evaluator is loaded, per CDV dataset, by exactly one job: the served one.
    for model in ("qwen2.5-72b", "gemma-2-27b"):
        for dataset in paper["cdv"]["datasets"]:
            assert after[(model, dataset, "cdv_vllm_served")] == totals[(model, dataset)] == 1
    # Without serving, a searching evaluator is loaded by its search and by its evaluation.
    grouped = per_model_dataset(count_loads(workdir, grouped=True, served=False))
    assert grouped[("qwen2.5-72b", "MMLU")] == grouped[("gemma-2-27b", "MMLU")] == 2
    before = count_loads(workdir, grouped=False)
    assert max(before.values()) == 9  # a judge job per condition: 9 loads per (model, dataset)


SEVEN = {
    "gpt-4o-mini",
    "gemma-2-27b",
    "llama-3.1-8b",
    "qwen2.5-72b",
    "o1-mini",
    "gpt-4o",
    "claude-3.5-sonnet",
}


def test_cdv_experiments_are_the_papers(paper):
    cdv, models = paper["cdv"], paper["models"]
    self_search, scale_up = cdv["experiments"]["self_search"], cdv["experiments"]["scale_up"]
    # (a) proxy = victim for five models on 100 questions per dataset
    assert self_search["n"] == 100
    assert {(c["proxy"], c["victim"]) for c in self_search["cells"]} == {
        (m, m) for m in ("gpt-4o", "gpt-4o-mini", "llama-3.1-70b", "qwen2.5-72b", "gemma-2-27b")
    }
    # (b) GPT-4o-mini on 300 questions per dataset
    assert scale_up["n"] == 300 and scale_up["cells"] == [{"proxy": "gpt-4o-mini", "victim": "gpt-4o-mini"}]
    assert set(cdv["eval_models"]) == SEVEN and len(cdv["eval_models"]) == 7
    # (c) baselines by Claude; (d) mitigation on the evaluators
    assert cdv["baseline_model"] == "claude-3.5-sonnet" and cdv["mitigation"]["enabled"]
    # (e) labels from the scale-up cell, 80/10/10; prompt classifiers; the cost experiment
    classifier = cdv["classifier"]
    assert classifier["label_cells"] == scale_up["cells"]
    assert (classifier["validation_fraction"], classifier["test_fraction"]) == (0.1, 0.1)
    assert set(classifier["prompt_models"]) == SEVEN and classifier["kind"] == "trained"
    assert classifier["cost_study"]["enabled"] and classifier["cost_study"]["n"] * len(cdv["datasets"]) == 100
    assert (classifier["lora"]["learning_rate"], classifier["lora"]["epochs"]) == (1e-4, 5)
    # (f) DPO: 80/10/20 by question, lr 2e-4, 5 epochs, sigmoid
    dpo = cdv["dpo"]
    assert dpo["train"] and (dpo["test_fraction"], dpo["validation_fraction"]) == (0.2, 0.1)
    assert (dpo["learning_rate"], dpo["epochs"], dpo["loss_type"]) == (2e-4, 5, "sigmoid")
    # reasoning model and non-OpenAI model through OpenAI-compatible endpoints
    assert models["o1-mini"]["token_limit_param"] == "max_completion_tokens"
    assert "temperature" in models["o1-mini"]["unsupported_params"]
    assert models["claude-3.5-sonnet"]["base_url"].startswith("https://api.anthropic.com")


@pytest.mark.parametrize(
    ("victim", "sample"),
    [
        ("gemma-2-27b", "results/cdv/data/n100/MMLU.jsonl"),
        ("gpt-4o-mini", "results/cdv/data/n300/MMLU.jsonl"),
    ],
)
def test_each_cell_searches_its_experiments_sample(workdir, victim, sample):
    target = f"results/cdv/MMLU/{victim}/{victim}/search.jsonl"
    proc, _, _ = dry_run(workdir, target)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The job that writes the cell (cdv_search, or the served dataset job for a served victim); the dry run
    # lists the jobs it depends on too, in no fixed order.
    blocks = re.findall(r"^(?:local)?rule \w+:\n((?:    .*\n)*)", proc.stdout + proc.stderr, re.M)
    (block,) = [b for b in blocks if re.search(rf"^    output: .*\b{re.escape(target)}", b, re.M)]
    inputs = re.search(r"^    input: (.*)$", block, re.M).group(1).split(", ")
    assert sample in inputs


def test_cost_experiment_searches_selected_and_random_questions(workdir):
    proc, _, _ = dry_run(workdir, "results/tables/cdv_filter_cost.csv")
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout + proc.stderr
    for selection in ("selected", "random"):
        assert f"results/cdv/data/MMLU.{selection}.jsonl" in out
        assert f"results/cdv/MMLU.{selection}/gpt-4o-mini/gpt-4o-mini/search.summary.json" in out
    assert "results/cdv/classifier/pool.jsonl" in out


def threads_of(output: str, rule: str) -> int:
    """A dry-run job's threads (Snakemake prints the line only above 1)."""
    block = re.search(rf"^rule {rule}:\n((?:    .*\n)*)", output, re.M)
    assert block, output[-3000:]
    line = re.search(r"^    threads: (\d+)$", block.group(1), re.M)
    return int(line.group(1)) if line else 1


def test_embedding_jobs_take_the_configured_threads(paper, workdir, tmp_path):
    # The paper embeds large persona pools on every core it is given; the demo's pools are small, so its
    # embedding jobs (library imports, mostly) take one core each and run two at a time.
    demo = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    (tmp_path / "resources").symlink_to(ROOT / "resources")
    target = "results/judging/{}/personas/personahub.jsonl"
    for config, expected, where in (
        (PAPER_CONFIG, paper["embedding"]["threads"], workdir),
        (ROOT / "config" / "config.yaml", demo["embedding"]["threads"], tmp_path),
    ):
        dataset = next(iter(yaml.safe_load(config.read_text(encoding="utf-8"))["judging"]["datasets"]))
        proc, _, _ = dry_run(where, target.format(dataset), "--cores", "8", config_path=config)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert threads_of(proc.stdout + proc.stderr, "select_personas") == expected
    assert (paper["embedding"]["threads"], demo["embedding"]["threads"]) == (2, 1)
