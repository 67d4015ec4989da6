"""Reproducibility: the tiny config run twice, into two directories, gives byte-identical tables and figures,
and every results folder carries a provenance record.

Decisions:
- The two runs share one response cache (the issue's contract: same config + same cache). The first run fills
  it, the second answers every model call from it, so what is tested is everything downstream of the model:
  seeded sampling, shuffling, bootstrap, the tables and the figures. (A second model run would only retest
  llama.cpp's own determinism.)
- Figures are compared as PNG bytes: the figures are written with fixed metadata, and PNG has no timestamp.
  PDFs are compared too when both runs wrote one.
"""

from __future__ import annotations

import json

import pytest
import yaml

from stressprobe.provenance import git_commit
from tests.support.helpers import ROOT, TINY_CONFIG, make_workdir, run_snakemake

pytestmark = pytest.mark.slow

# Folders under results/ that hold no results of their own (bookkeeping: logs, timings, the shared cache).
NOT_RESULTS = {"logs", "benchmarks", "cache"}
PROVENANCE_FIELDS = {"config_sha256", "git_commit", "models", "packages", "seeds"}


def outputs(workdir, folder: str) -> dict[str, bytes]:
    base = workdir / "results" / folder
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The tiny config run in two working directories that share one cache."""
    tmp = tmp_path_factory.mktemp("repro")
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["cache"] = {"path": str(tmp / "cache" / "llm")}
    config_path = tmp / "tiny-shared-cache.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    workdirs = [make_workdir(tmp / name) for name in ("first", "second")]
    for workdir in workdirs:
        run_snakemake(workdir, configfile=config_path)
    return workdirs


def test_tables_are_byte_identical(two_runs):
    first, second = (outputs(w, "tables") for w in two_runs)
    assert first, "the tiny config wrote no tables"
    assert any(name.endswith(".csv") for name in first)
    assert first.keys() == second.keys()
    differing = [name for name in first if first[name] != second[name]]
    assert not differing, f"tables differ between identical runs: {differing}"


def test_figures_are_byte_identical(two_runs):
    first, second = (outputs(w, "figures") for w in two_runs)
    assert any(name.endswith(".png") for name in first), "the tiny config wrote no PNG figures"
    assert first.keys() == second.keys()
    differing = [name for name in first if first[name] != second[name]]
    assert not differing, f"figures differ between identical runs: {differing}"


def test_every_results_folder_has_a_provenance_record(two_runs):
    commit = git_commit(ROOT)
    for workdir in two_runs:
        folders = [p for p in (workdir / "results").iterdir() if p.is_dir() and p.name not in NOT_RESULTS]
        assert folders
        missing = [p.name for p in folders if not (p / "provenance.json").is_file()]
        assert not missing, f"results folders without provenance.json: {missing}"
        for folder in folders:
            record = json.loads((folder / "provenance.json").read_text())
            assert record.keys() >= PROVENANCE_FIELDS, folder.name
            assert len(record["config_sha256"]) == 64
            assert record["git_commit"] == commit
            assert record["models"]["smollm2-135m"]["gguf"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
            assert record["packages"]["stressprobe"] and record["packages"]["snakemake"]
            assert record["seeds"]["seed"] == yaml.safe_load(TINY_CONFIG.read_text())["seed"]
    # Same config, same code: the records are identical too (they carry no timestamps).
    first, second = (outputs(w, ".") for w in two_runs)
    records = [name for name in first if name.endswith("provenance.json")]
    assert all(first[name] == second[name] for name in records)
