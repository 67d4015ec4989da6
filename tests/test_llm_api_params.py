"""Per-model API differences (o1-mini, Claude through an OpenAI-compatible endpoint) in the request bodies a
real local server receives."""

from __future__ import annotations

import json

import pytest

from stressprobe.llm import Request, open_client
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.failures import ModelRefused
from tests.support.openai_server import OpenAIServer

KEY_ENV = "STRESSPROBE_TEST_API_KEY"


def entry(server: OpenAIServer, model: str, **settings) -> dict:
    return {
        "backend": "openai",
        "model": model,
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        **settings,
    }


def received(server: OpenAIServer) -> list[dict]:
    return [json.loads(body) for body in server.requests]


ASK = Request.chat(system="Answer with one letter.", user="Q? A. x B. y\nAnswer: <letter>", max_tokens=1024)


def test_reasoning_model_gets_max_completion_tokens_no_temperature_and_no_system_role(tmp_path):
    o1 = {
        "token_limit_param": "max_completion_tokens",
        "unsupported_params": ["temperature", "top_p"],
        "system_role": "user",
    }
    with OpenAIServer() as server:
        with open_client(
            {"o1-mini": entry(server, "o1-mini", **o1)}, "o1-mini", tmp_path / "c.sqlite"
        ) as client:
            (response,) = client.generate([ASK])
        (body,) = received(server)
    assert response.error is None and response.text.endswith(("A", "B"))
    assert body["max_completion_tokens"] == 1024 and "max_tokens" not in body
    assert "temperature" not in body and "top_p" not in body and body["seed"] == 0
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert body["messages"][0]["content"].startswith("Answer with one letter.\n\nQ? A. x")


def test_default_entry_sends_the_openai_shape_and_claude_needs_no_setting(tmp_path):
    with OpenAIServer() as server:
        models = {"claude": entry(server, "claude-3-5-sonnet-20241022")}
        with open_client(models, "claude", tmp_path / "c.sqlite") as client:
            client.generate([ASK])
        (body,) = received(server)
    assert body["max_tokens"] == 1024 and body["temperature"] == 0.0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["model"] == "claude-3-5-sonnet-20241022"


def test_logprobs_from_a_model_without_them_stop_the_job_without_a_call(tmp_path):
    # A study that reads logprobs would silently get none: a permanent failure (stressprobe.llm.failures).
    with OpenAIServer() as server:
        models = {"m": entry(server, "m", unsupported_params=["logprobs"])}
        refused = pytest.raises(ModelRefused, match=r"config models\.m\.unsupported_params: .*no logprobs")
        with open_client(models, "m", tmp_path / "c.sqlite") as client, refused:
            client.generate([Request.chat(user="Give ##final score", logprobs=5)])
        assert server.total_requests == 0


def test_api_shape_enters_the_cache_key_only_when_it_differs():
    plain = {"backend": "openai", "model": "gpt-4o"}
    assert backend_identity("m", plain) == plain
    assert (
        backend_identity("m", {**plain, "token_limit_param": "max_tokens", "system_role": "system"}) == plain
    )
    changed = backend_identity("m", {**plain, "unsupported_params": ["temperature"]})
    assert changed["unsupported_params"] == ["temperature"]
