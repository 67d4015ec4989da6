"""Provenance records: stable, complete, free of secrets and timestamps."""

import json

from stressprobe.provenance import config_hash, git_commit, model_identities, provenance_record, seeds
from tests.support.helpers import ROOT


def test_config_hash_ignores_key_order_but_not_values():
    assert config_hash({"a": 1, "b": {"c": 2}}) == config_hash({"b": {"c": 2}, "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_seeds_are_found_at_any_depth():
    config = {"seed": 42, "analysis": {"bootstrap": {"seed": 7}}, "cdv": {"split_seed": 3, "n": 5}}
    assert seeds(config) == {"seed": 42, "analysis.bootstrap.seed": 7, "cdv.split_seed": 3}


def test_model_identities_keep_ids_and_drop_connection_details():
    models = {
        "gpt": {
            "backend": "openai",
            "model": "gpt-4o",
            "api_key_env": "OPENAI_API_KEY",
            "base_url": "http://h",
        },
        "smol": {"backend": "llamacpp", "gguf": "x.gguf", "n_threads": 2},
    }
    assert model_identities(models) == {
        "gpt": {"backend": "openai", "model": "gpt-4o"},
        "smol": {"backend": "llamacpp", "gguf": "x.gguf"},
    }


def test_record_is_deterministic_and_names_the_commit():
    config = {"seed": 1, "models": {"smol": {"backend": "llamacpp", "gguf": "x.gguf"}}}
    commit = git_commit(ROOT)
    first = json.dumps(provenance_record(config, "tables", commit), sort_keys=True)
    second = json.dumps(provenance_record(config, "tables", commit), sort_keys=True)
    assert first == second
    record = json.loads(first)
    assert record["packages"]["stressprobe"] is not None
    assert record["packages"]["vllm"] is None or isinstance(record["packages"]["vllm"], str)
    assert record["seeds"] == {"seed": 1}


def test_git_commit_outside_a_repository_is_none(tmp_path):
    assert git_commit(tmp_path) is None
