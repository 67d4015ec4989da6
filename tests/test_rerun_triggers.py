"""Partial reruns and config-change reruns, checked with `snakemake -n` after one real run of the tiny config.

The run judges with two registry models (the tiny model and a copy of it under another name) so that
"only that model's cells" is distinguishable from "every cell". CDV is off: these checks are about the
judging grid and its analysis.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from tests.support.helpers import TINY_CONFIG, make_workdir, run_snakemake

pytestmark = pytest.mark.slow

OTHER = "smollm2-copy"
BLOCK = re.compile(r"^(?:local)?rule (\S+):\n((?:    .*\n)*)", re.M)


def planned_jobs(proc) -> list[dict]:
    """The jobs a dry run lists: rule, outputs and wildcards of each."""
    jobs = []
    for rule, body in BLOCK.findall(proc.stdout + proc.stderr):
        fields = dict(re.findall(r"^    (\w+): (.*)$", body, re.M))
        wildcards = dict(
            item.split("=", 1) for item in fields.get("wildcards", "").split(", ") if "=" in item
        )
        jobs.append({"rule": rule, "output": fields.get("output", "").split(", "), "wildcards": wildcards})
    return jobs


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A scratch workdir where the tiny judging grid has run once, and its config."""
    workdir = make_workdir(tmp_path_factory.mktemp("rerun") / "work")
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["models"][OTHER] = {**config["models"]["smollm2-135m"], "n_ctx": 1024}
    config["judging"]["models"] = ["smollm2-135m", OTHER]
    config["cdv"]["enabled"] = False
    path = write_config(workdir / "config.yaml", config)
    run_snakemake(workdir, configfile=path)
    assert not planned_jobs(run_snakemake(workdir, "-n", configfile=path)), "the first run left work undone"
    return workdir, config


def cell_file(config: dict, model: str, condition: str) -> str:
    dataset = next(iter(config["judging"]["datasets"]))
    return f"results/judging/{dataset}/judgments/{model}/{condition}.jsonl"


def test_targeting_one_cell_runs_only_that_cell(built):
    workdir, config = built
    target = cell_file(config, OTHER, "fixed/gap")
    jobs = planned_jobs(run_snakemake(workdir, "-n", "--force", target, configfile=workdir / "config.yaml"))
    assert [(j["rule"], j["output"][0]) for j in jobs] == [("judge", target)]


def test_forcerun_of_one_cell_reruns_only_what_depends_on_it(built):
    workdir, config = built
    target = cell_file(config, OTHER, "personahub/query")
    jobs = planned_jobs(
        run_snakemake(workdir, "-n", "--forcerun", target, configfile=workdir / "config.yaml")
    )
    cells = {
        (j["rule"], j["wildcards"]["model"], j["wildcards"]["role"])
        for j in jobs
        if "model" in j["wildcards"]
    }
    assert ("judge", OTHER, "query") in cells
    assert {rule for rule, _, _ in cells} <= {"judge", "judge_qrels", "ndcg"}
    assert all((model, role) == (OTHER, "query") for _, model, role in cells), cells
    assert not {"summarize", "prepare_dataset", "select_personas"} & {j["rule"] for j in jobs}
    assert any(j["rule"].startswith("analysis_") for j in jobs), "the analysis must follow the changed cell"


def test_editing_a_judge_model_reruns_its_cells_only(built, tmp_path):
    workdir, config = built
    edited = copy.deepcopy(config)  # same key order: params compare dicts in order
    edited["models"][OTHER]["n_ctx"] = 1536
    path = write_config(tmp_path / "edited.yaml", edited)
    jobs = planned_jobs(run_snakemake(workdir, "-n", configfile=path))
    judged = {j["wildcards"]["model"] for j in jobs if j["rule"] == "judge"}
    assert judged == {OTHER}
    assert len([j for j in jobs if j["rule"] == "judge"]) == len(config["judging"]["conditions"])
    per_cell = [
        j for j in jobs if j["rule"] in ("judge_qrels", "ndcg") and j["wildcards"].get("model") != OTHER
    ]
    assert not per_cell, per_cell
    assert not {"summarize", "prepare_dataset", "select_personas", "persona_pool"} & {j["rule"] for j in jobs}


def test_editing_a_figure_option_reruns_only_the_figures(built, tmp_path):
    workdir, config = built
    edited = copy.deepcopy(config)  # same key order: params compare dicts in order
    edited["analysis"]["dpi"] = config["analysis"].get("dpi", 100) + 50
    path = write_config(tmp_path / "edited.yaml", edited)
    jobs = [j for j in planned_jobs(run_snakemake(workdir, "-n", configfile=path)) if j["rule"] != "all"]
    assert jobs, "a figure option changed, so the figures must be redrawn"
    outputs = [out for j in jobs for out in j["output"] if not out.endswith("provenance.json")]
    assert outputs and all(out.startswith("results/figures/") for out in outputs), outputs
