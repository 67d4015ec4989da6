"""What an OpenAI-compatible server does differently from OpenAI, and how the openai backend copes."""

from __future__ import annotations

import json

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, open_client
from stressprobe.llm.backends import backend_identity
from tests.support.openai_server import OpenAIServer

KEY_ENV = "STRESSPROBE_TEST_API_KEY"


def entry(server: OpenAIServer, **settings) -> dict:
    base = {"backend": "openai", "model": "test-model", "base_url": server.base_url, "api_key_env": KEY_ENV}
    return {"api": {**base, "backoff_s": 0.01, **settings}}


def test_samples_a_server_leaves_out_are_asked_for_one_by_one_with_successive_seeds(tmp_path):
    request = Request.chat(user="Tell me about rivers", n=3, temperature=0.8, seed=7)
    with (
        OpenAIServer(max_choices=1) as server,
        open_client(entry(server), "api", tmp_path / "c.sqlite") as client,
    ):
        (response,) = client.generate([request])
        bodies = [json.loads(body) for body in server.requests]
    assert len(response.texts) == 3
    assert sorted((b["n"], b["seed"]) for b in bodies) == [(1, 8), (1, 9), (3, 7)]
    assert response.completion_tokens > 0


def test_extra_body_reaches_the_server_and_the_cache_identity(tmp_path):
    with OpenAIServer() as server:
        models = entry(server, extra_body={"repeat_penalty": 1.0})
        with open_client(models, "api", tmp_path / "c.sqlite") as client:
            client.generate([Request.chat(user="hello")])
        (body,) = [json.loads(b) for b in server.requests]
    assert body["repeat_penalty"] == 1.0 and body["messages"][0]["content"] == "hello"
    plain = {"backend": "openai", "model": "m"}
    assert backend_identity("api", plain) == plain  # no extra_body: keys of older caches stay valid
    assert backend_identity("api", {**plain, "extra_body": {"top_k": 1}}) != plain


def test_extra_body_cannot_override_what_a_request_sets(tmp_path):
    with (
        OpenAIServer() as server,
        pytest.raises(StressprobeError, match=r"models.api.extra_body: temperature"),
    ):
        open_client(entry(server, extra_body={"temperature": 1.0}), "api", tmp_path / "c.sqlite")
