"""Switches of docs/FIDELITY.md not covered elsewhere: the orthogonal persona's reading and the judge's
system message. (Templates, persona delivery and `judging.unparsed`: tests/test_judge_template.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from stressprobe.config import validate_config
from stressprobe.errors import StressprobeError
from stressprobe.persona.judging import JudgeSettings
from stressprobe.persona.pools import select_personas
from stressprobe.persona.prompts import JudgeTemplate
from tests.support.helpers import ROOT

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
POOL = [{"pid": name, "text": f"persona {name}"} for name in ("same", "opposite", "unrelated", "close")]


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=float)
    return vector / np.linalg.norm(vector)


# cosines to the query (1, 0): same 1, opposite -1, unrelated 0, close 0.71
POOL_VECTORS = np.stack([unit(1, 0), unit(-1, 0), unit(0, 1), unit(1, 1)])


def orthogonal_of(reading: str | None) -> dict:
    options = {} if reading is None else {"orthogonal": reading}
    records = select_personas(
        ["q1"], np.stack([unit(1, 0)]), {"q1": "d"}, {"d": unit(1, 1)}, POOL, POOL_VECTORS, k=2, **options
    )
    (record,) = [r for r in records if r["role"] == "orthogonal"]
    return record


def test_orthogonal_reads_as_least_similar_by_default_or_nearest_zero():
    least = orthogonal_of(None)
    assert least == orthogonal_of("least_similar")
    assert least["pid"] == "opposite" and least["similarity"] == pytest.approx(-1)
    zero = orthogonal_of("nearest_zero")
    assert zero["pid"] == "unrelated" and zero["similarity"] == pytest.approx(0, abs=1e-9)
    assert [c["pid"] for c in zero["candidates"]] == ["unrelated", "close"]  # |cos| 0, then 0.71 (tie: order)
    with pytest.raises(StressprobeError, match="personas.orthogonal"):
        orthogonal_of("sideways")


def test_the_system_message_switch_replaces_or_drops_the_templates():
    template = JudgeTemplate("Q: {query}\nP: {passage}", "Own system.")
    assert template.with_system(None) == template
    helpful = template.with_system("You are a helpful assistant.")
    request = JudgeSettings(helpful.user, 8, system=helpful.system).request("q", "p", None)
    assert request.messages == (("system", "You are a helpful assistant."), ("user", "Q: q\nP: p"))
    assert template.with_system("").system is None


def test_defaults_of_the_switches_are_the_documented_ones():
    config = validate_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), SCHEMA)
    assert config["personas"]["orthogonal"] == "least_similar"
    assert config["personas"]["delivery"] == {"evidence": "prefix", "gap": "prefix"}
    assert config["judging"]["unparsed"] == "exclude"
    assert config["judging"]["system_message"] is None


@pytest.mark.parametrize("max_tokens", [24, 100])
def test_judge_requests_are_greedy_with_the_configured_token_limit(max_tokens):
    request = JudgeSettings("Q: {query}\nP: {passage}", max_tokens, logprobs=5).request("q", "p", None)
    assert (request.temperature, request.top_p, request.seed) == (0.0, 1.0, 0)
    assert request.max_tokens == max_tokens and request.logprobs == 5
