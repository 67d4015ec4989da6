"""How configs combine: with no config the demo runs; a `--configfile` describes the whole run (it is not
merged with the demo's config/config.yaml); several `--configfile` are merged in order, later over earlier;
`--config key=value` applies on top of them all. Checked on dry runs (and one cost estimate) in scratch
directories.
"""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.helpers import ROOT, SNAKEMAKE, TINY_CONFIG, run_snakemake, workflow_env
from tests.support.paper_dag import dry_run, job_counts, make_paper_workdir

DEMO_CONFIG = ROOT / "config" / "config.yaml"


def planned(proc: subprocess.CompletedProcess) -> tuple[dict[str, int], str]:
    """Job counts and the whole text of a dry run (every job's inputs and outputs)."""
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    return job_counts(text), text


def dry_run_without_config(workdir: Path) -> subprocess.CompletedProcess:
    """`snakemake -n` in `workdir` with no --configfile at all (what `snakemake -c2` does in the checkout)."""
    cmd = [*SNAKEMAKE, "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    return subprocess.run(cmd, capture_output=True, text=True, env=workflow_env(), timeout=300)


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_no_config_runs_the_demo(workdir):
    demo = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    jobs, text = planned(dry_run_without_config(workdir))
    judging = demo["judging"]
    assert jobs["judge"] == len(judging["datasets"]) * len(judging["models"]) * len(judging["conditions"])
    assert jobs["cdv_search"] == len(demo["cdv"]["datasets"]) * len(demo["cdv"]["cells"])
    for dataset in [*judging["datasets"], *demo["cdv"]["datasets"]]:
        assert f"/{dataset}/" in text, dataset


def test_paper_config_plans_only_its_own_grid(tmp_path):
    workdir = make_paper_workdir(tmp_path / "paper")
    jobs, text = planned(dry_run(workdir)[0])
    # 108 judge cells: API models one job per cell, each vLLM model one job of all 9 conditions per dataset.
    assert jobs["judge"] + 9 * jobs["judge_vllm"] == 2 * 6 * 9
    assert jobs["judge_vllm"] == 2 * 4
    assert "demo-" not in text, "the demo's datasets leaked into the paper's plan"
    assert "smollm2" not in text, "the demo's model leaked into the paper's plan"


def test_a_config_naming_one_dataset_plans_only_that_dataset(workdir):
    tiny = yaml.safe_load(TINY_CONFIG.read_text(encoding="utf-8"))
    assert list(tiny["judging"]["datasets"]) == ["demo-dl"] and list(tiny["cdv"]["datasets"]) == [
        "OpenbookQA"
    ]
    jobs, text = planned(run_snakemake(workdir, "-n"))
    assert jobs["judge"] == len(tiny["judging"]["conditions"])
    assert jobs["summarize"] == 1 and jobs["cdv_search"] == 1 and jobs["cdv_prepare"] == 1
    for other in ("demo-rag", "MMLU", "CommonsenseQA", "TruthfulQA"):
        assert other not in text, other


def test_configfiles_merge_in_order_and_config_applies_on_top(workdir, tmp_path):
    """The documented way to layer a small override on a complete config."""
    override = write_yaml(tmp_path / "override.yaml", {"judging": {"conditions": ["baseline/umbrela"]}})
    cmd = [*SNAKEMAKE, "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    cmd += ["--configfile", str(TINY_CONFIG), str(override)]
    jobs, text = planned(subprocess.run(cmd, capture_output=True, text=True, env=workflow_env(), timeout=300))
    assert jobs["judge"] == 1 and "demo-dl/judgments/smollm2-135m/baseline/umbrela" in text
    assert jobs["cdv_search"] == 1, "keys the override leaves out come from the config below it"
    # --config values are parsed as YAML of strings; a mapping is merged into the key like a config file.
    on_top = [*cmd, "--config", "judging={conditions: [fixed/gap]}"]
    jobs, text = planned(
        subprocess.run(on_top, capture_output=True, text=True, env=workflow_env(), timeout=300)
    )
    assert jobs["judge"] == 1 and "demo-dl/judgments/smollm2-135m/fixed/gap" in text


@pytest.mark.slow
def test_the_cost_estimate_lists_only_the_configs_cells(workdir, tmp_path):
    config = yaml.safe_load(TINY_CONFIG.read_text(encoding="utf-8"))
    # Fixed conditions only: the estimate then needs no persona retrieval (no embedding model).
    config["judging"]["conditions"] = ["baseline/umbrela", "fixed/gap"]
    path = write_yaml(tmp_path / "tiny-fixed.yaml", config)
    run_snakemake(workdir, "-f", "cost_estimate", configfile=path)
    with open(workdir / "results" / "cost" / "estimate.csv", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle) if row["study"] != "total"]
    judging = {(r["dataset"], r["cell"], r["model"]) for r in rows if r["study"] == "judging"}
    cells = {("demo-dl", condition, "smollm2-135m") for condition in config["judging"]["conditions"]}
    assert judging == cells | {("demo-dl", "summarize", "smollm2-135m")}
    assert {r["dataset"] for r in rows if r["study"].startswith("cdv")} == {"OpenbookQA"}
    assert {r["study"] for r in rows} == {"judging", "cdv (bound)"}
