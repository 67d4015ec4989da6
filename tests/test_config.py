"""Config validation: defaults are filled, and every mistake is one line naming the key."""

import copy

import pytest
import yaml

from stressprobe.config import referenced_models, validate_config
from stressprobe.errors import StressprobeError
from tests.support.helpers import ROOT, TINY_CONFIG

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def load(path):
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize(
    "path", [ROOT / "config" / "config.yaml", TINY_CONFIG, ROOT / "config" / "paper.yaml"]
)
def test_shipped_configs_validate(path):
    if not path.exists():
        pytest.skip(f"{path.name} not present")
    config = validate_config(load(path), SCHEMA)
    assert config["seed"] == load(path).get("seed", 42)


def test_defaults_are_filled_from_the_schema():
    config = validate_config({}, SCHEMA)
    assert config["cache"]["path"] == "results/cache/llm"
    assert config["embedding"]["model"].startswith("package:")


def test_explicit_values_are_kept():
    config = validate_config({"seed": 7, "cache": {"path": "elsewhere.sqlite"}}, SCHEMA)
    assert (config["seed"], config["cache"]["path"]) == (7, "elsewhere.sqlite")


BASE = {"models": {"m": {"backend": "llamacpp", "gguf": "x.gguf"}}}


@pytest.mark.parametrize(
    "patch, key, words",
    [
        ({"sed": 1}, "<top level>", "'sed' was unexpected"),
        ({"seed": "x"}, "seed", "not of type 'integer'"),
        ({"models": {"m": {"backend": "foo"}}}, "models.m.backend", "is not one of"),
        ({"models": {"m": {"backend": "llamacpp"}}}, "models.m", "'gguf' is a required property"),
        ({"models": {"m": {"backend": "openai", "model": "x", "concurency": 3}}}, "models.m", "'concurency'"),
        (
            {"models": {"m": {"backend": "llamacpp", "gguf": "x", "n_ctx": "big"}}},
            "models.m.n_ctx",
            "integer",
        ),
        ({"judging": {"models": ["nope"]}}, "judging.models[0]", "'nope' is not in the 'models' registry"),
        # A family's default fills only when it is absent: a partial one is an error, not a KeyError later.
        ({"resources": {"small": {"mem_mb": 2000}}}, "resources.small", "'runtime' is a required property"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(patch, key, words):
    config = copy.deepcopy(BASE)
    config.update(patch)
    with pytest.raises(StressprobeError) as err:
        validate_config(config, SCHEMA)
    message = str(err.value)
    assert "\n" not in message
    assert f"config key '{key}'" in message
    assert words in message


def test_referenced_models_lists_every_place_a_model_is_named():
    config = {
        "judging": {"models": ["a", "b"], "summarizer": "c"},
        "cdv": {"cells": [{"proxy": "d", "victim": "e"}], "eval_models": ["f"], "semantic_model": "g"},
    }
    assert [name for _, name in referenced_models(config)] == ["a", "b", "c", "d", "e", "f", "g"]
