"""The persona study's pinned inputs: the encoder's weights by sha256, the pools' dataset revisions (and a
local pool file's sha256), each checked when loaded and recorded in provenance."""

from __future__ import annotations

import hashlib
import json
import zipfile

import pytest
import yaml

from stressprobe.config import validate_config
from stressprobe.embedding import load_embedder
from stressprobe.errors import StressprobeError
from stressprobe.io import package_file
from stressprobe.persona.pools import check_pinned, load_pool_records
from stressprobe.preflight import check_pools, preflight_markdown, problems, run_preflight
from stressprobe.provenance import provenance_record
from tests.support.helpers import ROOT

MODEL = "package:all_minilm_l6_v2/model.zip"
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def paper_config():
    return validate_config(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()), SCHEMA)


def shipped_weights_sha256() -> str:
    """The sha256 of model.safetensors inside the installed package's zip, read here independently."""
    with zipfile.ZipFile(package_file(MODEL, "test")) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith("model.safetensors")]
        return hashlib.sha256(archive.read(name)).hexdigest()


def test_paper_yaml_pins_the_shipped_minilm_weights_and_loading_checks_them():
    pinned = paper_config()["embedding"]["sha256"]
    assert pinned == shipped_weights_sha256()
    assert load_embedder(MODEL, sha256=pinned).embed(["a nurse"]).shape == (1, 384)
    wrong = "0" * 64
    with pytest.raises(StressprobeError, match=r"model.safetensors has sha256 53aa.*'embedding.sha256'"):
        load_embedder(MODEL, sha256=wrong)


def test_a_revision_must_be_a_commit_not_a_branch():
    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    config["personas"]["sources"]["uspersona"]["revision"] = "main"
    with pytest.raises(StressprobeError, match="revision"):
        validate_config(config, SCHEMA)
    config["personas"]["sources"]["uspersona"]["revision"] = "a" * 40
    assert validate_config(config, SCHEMA)["personas"]["sources"]["uspersona"]["revision"] == "a" * 40


def test_a_local_pool_file_is_checked_against_its_sha256(tmp_path):
    path = tmp_path / "pool.jsonl"
    path.write_text(json.dumps({"persona": "a chemist"}) + "\n")
    good = hashlib.sha256(path.read_bytes()).hexdigest()
    source = {"path": str(path), "limit": None, "sha256": good}
    assert list(load_pool_records(source, "personas.sources.personahub")) == [{"persona": "a chemist"}]
    with pytest.raises(StressprobeError, match=r"pool.jsonl: sha256 .*'personas.sources.personahub.sha256'"):
        load_pool_records({**source, "sha256": "f" * 64}, "personas.sources.personahub")


def test_provenance_records_the_pins():
    config = paper_config()
    config["personas"]["sources"]["uspersona"]["revision"] = "b" * 40
    record = provenance_record(config, "personas", None)
    assert record["pins"]["embedding"] == {"model": MODEL, "sha256": shipped_weights_sha256()}
    assert record["pins"]["persona_sources"]["uspersona"] == {
        "hf_dataset": "nvidia/Nemotron-Personas-USA",
        "hf_config": None,
        "revision": "b" * 40,
        "path": None,
        "sha256": None,
    }
    assert record["pins"]["persona_sources"]["personahub"]["hf_config"] == "persona"


def test_paper_yaml_refuses_an_unpinned_head_in_the_pool_job_and_the_preflight():
    config = paper_config()
    assert config["personas"]["unpinned"] == "refuse"
    sources = config["personas"]["sources"]
    assert [s["revision"] for s in sources.values()] == [None, None]  # no verifiable commit (P-pins)
    key = "personas.sources.uspersona"
    with pytest.raises(StressprobeError, match=rf"^{key}: nvidia/Nemotron-Personas-USA has no 'revision'.*"
                       rf"set '{key}\.revision'"):  # fmt: skip
        load_pool_records(sources["uspersona"], key, config["personas"]["unpinned"])
    lines = problems(run_preflight([], {}, 1, env={}, pools=sources, unpinned="refuse"))
    assert [line.split(":")[0] for line in lines] == ["personas.sources.personahub", key]
    pinned = {**sources["uspersona"], "revision": "c" * 40}
    assert problems(check_pools({"uspersona": pinned}, "refuse")) == []
    assert check_pools({"uspersona": pinned}, "refuse")[0].message.endswith("at revision " + "c" * 40)


def test_warn_reads_an_unpinned_head_loudly_and_the_bill_lists_it(caplog):
    source = paper_config()["personas"]["sources"]["personahub"]
    with caplog.at_level("WARNING"):
        check_pinned(source, "personas.sources.personahub", "warn")
    assert "UNPINNED POOL" in caplog.text and "proj-persona/PersonaHub has no 'revision'" in caplog.text
    findings = check_pools({"personahub": source, "local": {"path": "p.jsonl", "sha256": None}}, "warn")
    assert [f.level for f in findings] == ["ok", "warning"]
    markdown = preflight_markdown(findings)  # what the bill's Preflight section shows
    assert "**warning** `personas.sources.personahub`: personas.sources.personahub: proj-persona" in markdown
    assert "`personas.sources.local`: local file p.jsonl" in markdown
