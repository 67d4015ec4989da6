"""The analysis rules in Snakemake: build every table and figure from judging-stage files, rerun nothing
on a second run, and rerun exactly the affected rules when an analysis config key changes.

The judging stage's outputs are synthetic files in the contract formats; `--allowed-rules` restricts the
DAG to the analysis rules, so those files count as given inputs and no model is ever called.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from analysis_fixtures import DatasetSpec, StudySpec, write_study_files
from helpers import ROOT, TINY_CONFIG, make_workdir, run_snakemake

RULES = re.findall(r"^rule (\w+):", (ROOT / "workflow" / "rules" / "analysis.smk").read_text(), flags=re.M)
TARGET_RULES = [r for r in RULES if r not in ("analysis_judgments", "analysis_systems")]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A workdir with the tiny config's judging cells as synthetic files, analysed once."""
    workdir = make_workdir(tmp_path_factory.mktemp("analysis_rules"))
    config = yaml.safe_load(TINY_CONFIG.read_text())
    judging = config["judging"]
    spec = StudySpec(
        datasets=[DatasetSpec(name, queries=5, runs=8, pairs_per_query=6) for name in judging["datasets"]],
        models=judging["models"],
        conditions=judging["conditions"],
    )
    write_study_files(workdir, spec)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    run_snakemake(workdir, *TARGET_RULES, *allowed(), configfile=configfile)
    return workdir, configfile, config


def allowed() -> list[str]:
    """Restrict the DAG to the analysis rules (last on the command line: the option takes several values)."""
    return ["--allowed-rules", *RULES]


def planned_rules(workdir: Path, configfile: Path) -> set[str]:
    """The rules a dry run would execute (parsed from its job table)."""
    proc = run_snakemake(workdir, "-n", *TARGET_RULES, *allowed(), configfile=configfile)
    return set(re.findall(r"^(analysis_\w+)\s+\d+", proc.stdout, flags=re.M))


@pytest.mark.slow
def test_every_table_and_figure_is_built_and_a_rerun_does_nothing(study):
    workdir, configfile, _ = study
    for name in (
        "kappa_agreement",
        "table3_win_rate",
        "table3_significance",
        "label_shift",
        "table4_ranking_agreement",
        "table5_rank_displacement",
        "table6_displacement_ci",
        "table7_sensitive_systems",
        "direction_consistency",
        "direction_consistency_counts",
        "persona_sources",
    ):
        for ext in ("csv", "md", "tex"):
            assert (workdir / "results" / "tables" / f"{name}.{ext}").stat().st_size > 0
    for name in ("figure1_kappa_heatmap", "label_shift", "figure2_ndcg_scatter"):
        for ext in ("png", "pdf"):
            assert (workdir / "results" / "figures" / f"{name}.{ext}").stat().st_size > 0
    assert planned_rules(workdir, configfile) == set()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (("rbo_phi",), 0.8, {"analysis_ranking_agreement", "analysis_persona_sources"}),
        (("bootstrap", "seed"), 7, {"analysis_displacement_ci"}),
        (("alpha",), 0.01, {"analysis_win_rate"}),
        (("top_k_sensitive",), 2, {"analysis_sensitive_systems"}),
        (("dpi",), 72, {"analysis_kappa_figure", "analysis_label_shift_figure", "analysis_ndcg_scatter"}),
    ],
)
def test_a_config_edit_reruns_exactly_the_affected_outputs(study, tmp_path, key, value, expected):
    workdir, _, config = study
    edited = yaml.safe_load(yaml.safe_dump(config))
    section = edited["analysis"]
    for part in key[:-1]:
        section = section.setdefault(part, {})
    section[key[-1]] = value
    configfile = tmp_path / "edited.yaml"
    configfile.write_text(yaml.safe_dump(edited))
    assert planned_rules(workdir, configfile) == expected


@pytest.mark.slow
def test_report_contains_every_table_and_figure(study, tmp_path):
    workdir, configfile, _ = study
    report = tmp_path / "report.zip"
    proc = run_snakemake(workdir, *TARGET_RULES, "--report", str(report), *allowed(), configfile=configfile)
    # docutils prints its messages as "<string>:3: (ERROR/3) Undefined substitution referenced: ...".
    assert not re.findall(r"\((?:WARNING|ERROR|SEVERE)/\d\).*", proc.stdout + proc.stderr)
    import zipfile

    names = "\n".join(zipfile.ZipFile(report).namelist())
    for name in (
        "table3_win_rate.csv",
        "table4_ranking_agreement.csv",
        "figure1_kappa_heatmap.png",
        "figure2_ndcg_scatter.png",
        "label_shift.png",
        "table7_sensitive_systems.csv",
    ):
        assert name in names
