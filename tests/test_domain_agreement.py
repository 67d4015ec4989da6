"""Agreement of a user's query→domain file with the automatic assignment: κ, confusion, the rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from stressprobe.errors import StressprobeError
from stressprobe.persona import domain_agreement
from stressprobe.persona import pools as personas
from stressprobe.persona.data import read_topics
from tests.support.helpers import ROOT, TINY_CONFIG, make_workdir, run_snakemake


def kappa_by_definition(first, second):
    """(p_o − p_e) / (1 − p_e) with the raters' marginal shares."""
    first, second = list(first), list(second)
    n = len(first)
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    expected = sum((first.count(c) / n) * (second.count(c) / n) for c in set(first) | set(second))
    return (observed - expected) / (1 - expected)


def test_nominal_kappa_matches_the_definition_and_is_undefined_when_chance_explains_all():
    first = ["A", "A", "B", "C", "B", "A"]
    second = ["A", "B", "B", "C", "B", "C"]
    assert domain_agreement.nominal_kappa(first, second, ["A", "B", "C", "D"]) == pytest.approx(
        kappa_by_definition(first, second)
    )
    assert math.isnan(domain_agreement.nominal_kappa(["A", "A"], ["A", "A"], ["A", "B"]))
    assert math.isnan(domain_agreement.nominal_kappa([], [], ["A"]))
    assert domain_agreement.nominal_kappa(["A", "B"], ["B", "A"], ["A", "B"]) == pytest.approx(-1.0)


TAXONOMY = {
    "domains": [{"name": "Alpha", "description": "alpha things"}, {"name": "Beta", "description": "b"}]
}


def fake_embed(texts):
    """A test double: texts mentioning 'alpha' point one way, every other text the other way."""
    return np.array([[1.0, 0.0] if "alpha" in t.lower() else [0.0, 1.0] for t in texts])


def test_dataset_agreement_compares_the_file_with_the_automatic_assignment(tmp_path):
    taxonomy = tmp_path / "taxonomy.yaml"
    taxonomy.write_text(yaml.safe_dump(TAXONOMY))
    topics = {"q1": "alpha query", "q2": "beta query", "q3": "alpha again", "q4": "gamma"}
    mapping = tmp_path / "domains.tsv"
    mapping.write_text("q1\tAlpha\nq2\tAlpha\nq3\tAlpha\nq4\tBeta\nunused\tBeta\n")
    result = domain_agreement.dataset_agreement(topics, mapping, taxonomy, fake_embed)
    # automatic: q1 Alpha, q2 Beta, q3 Alpha, q4 Beta
    assert (result["queries"], result["agreeing"], result["agreement"]) == (4, 3, 0.75)
    file_domains, automatic = ["Alpha", "Alpha", "Alpha", "Beta"], ["Alpha", "Beta", "Alpha", "Beta"]
    assert result["kappa"] == pytest.approx(kappa_by_definition(file_domains, automatic))
    assert result["confusion"] == {"Alpha": {"Alpha": 2, "Beta": 1}, "Beta": {"Beta": 1}}
    assert result["disagreements"] == [{"qid": "q2", "file": "Alpha", "automatic": "Beta"}]
    summary, confusion = domain_agreement.agreement_tables({"demo": result})
    assert summary.iloc[0].tolist() == ["demo", 4, 3, 75.0, pytest.approx(result["kappa"])]
    assert confusion.values.tolist() == [
        ["demo", "Alpha", "Alpha", 2],
        ["demo", "Alpha", "Beta", 1],
        ["demo", "Beta", "Beta", 1],
    ]


def test_a_bad_mapping_file_is_the_persona_stage_error(tmp_path):
    taxonomy = tmp_path / "taxonomy.yaml"
    taxonomy.write_text(yaml.safe_dump(TAXONOMY))
    mapping = tmp_path / "domains.tsv"
    mapping.write_text("q1\tGamma\n")
    with pytest.raises(StressprobeError, match=r"domains\.tsv:1: domain 'Gamma' is not in the taxonomy"):
        domain_agreement.dataset_agreement({"q1": "x"}, mapping, taxonomy, fake_embed)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["demo-dl", "demo-rag"])
def test_demo_mapping_against_minilm_matches_the_persona_stage_assignment(dataset):
    from stressprobe.embedding import load_embedder

    embedder = load_embedder("package:all_minilm_l6_v2/model.zip")
    folder = ROOT / "resources" / "demo" / "judging" / dataset
    taxonomy = ROOT / "resources" / "taxonomy" / "domains.yaml"
    topics = read_topics(folder / "topics.tsv")
    result = domain_agreement.dataset_agreement(topics, folder / "domains.tsv", taxonomy, embedder.embed)
    # The automatic side is what the persona stage assigns without a file.
    automatic = personas.domains_for_queries(dataset, topics, None, str(taxonomy), embedder.embed)
    mapping = personas.read_domain_mapping(folder / "domains.tsv", topics, None)
    names = [d.name for d in personas.read_taxonomy(taxonomy)]
    assert result["queries"] == len(topics) == 10
    assert result["agreeing"] == sum(mapping[q] == automatic[q] for q in topics)
    expected = domain_agreement.nominal_kappa(list(mapping.values()), [automatic[q] for q in mapping], names)
    assert result["kappa"] == pytest.approx(expected)


@pytest.mark.slow
def test_rule_writes_json_and_tables_for_datasets_with_a_mapping_file(tmp_path):
    workdir = make_workdir(tmp_path / "work")
    config = yaml.safe_load(TINY_CONFIG.read_text())
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    proc = run_snakemake(workdir, "results/tables/domain_agreement.csv", configfile=configfile)
    # The run ends on where its results are: the two tables it built, in the run's own folder.
    assert "tables: 2 in results/tables/ (each also as .md and .tex)" in proc.stderr
    result = json.loads((workdir / "results" / "data" / "demo-dl" / "domain_agreement.json").read_text())
    queries = len(read_topics(workdir / "results" / "data" / "demo-dl" / "topics.tsv"))
    assert result["queries"] == queries
    assert sum(n for row in result["confusion"].values() for n in row.values()) == queries
    summary = pd.read_csv(workdir / "results" / "tables" / "domain_agreement.csv")
    assert summary["dataset"].tolist() == ["demo-dl"] and summary["agreeing"][0] == result["agreeing"]
    for name in ("domain_agreement", "domain_confusion"):
        for ext in ("md", "tex"):
            assert (workdir / "results" / "tables" / f"{name}.{ext}").is_file()
    # Switched off, the outputs are not part of the workflow's targets.
    config["personas"] = {**config["personas"], "domain_agreement": False}
    configfile.write_text(yaml.safe_dump(config))
    proc = run_snakemake(workdir, "-n", "--forceall", configfile=configfile)
    assert "domain_agreement" not in proc.stdout
