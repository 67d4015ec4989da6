"""Model backends; each module is imported only when a model of that backend is opened."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.llm.backends.base import AsyncBackend, Backend

BACKENDS = {"llamacpp": "llamacpp", "openai": "openai", "vllm": "vllm"}

__all__ = ["AsyncBackend", "Backend", "BACKENDS", "backend_identity", "open_backend", "run_entry"]


def run_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The entry as it is run: its `substitute` (a current model for a retired one) replaces `model`.

    `model` stays the record of what the paper used; everything that sends or keys a request (backends,
    `vllm serve`, cache keys, the cost estimate) goes through here, so the id run is the id keyed.
    """
    if entry.get("substitute"):
        return {**entry, "model": entry["substitute"]}
    return dict(entry)


def open_backend(name: str, entry: dict[str, Any]) -> Backend:
    """Open the backend of registry entry `entry` (model `name`); config errors raise StressprobeError."""
    kind = entry.get("backend")
    if kind not in BACKENDS:
        raise StressprobeError(
            f"config models.{name}.backend: unknown backend {kind!r}; use one of {', '.join(BACKENDS)}"
        )
    module = importlib.import_module(f"stressprobe.llm.backends.{BACKENDS[kind]}")
    return module.open_backend(name, run_entry(entry))


def backend_identity(name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The model's identity in cache keys, computed without loading the model.

    The one definition: backends take it from here, and the cost estimate computes the same keys with it.
    """
    entry = run_entry(entry)
    if entry.get("backend") == "llamacpp":
        from stressprobe.llm.backends.llamacpp import llamacpp_identity

        return llamacpp_identity(name, entry)
    identity = {"backend": entry["backend"], "model": entry["model"]}
    if entry.get("extra_body"):
        # Server-side sampling fields change the answers (absent when empty: older keys stay valid).
        identity["extra_body"] = dict(entry["extra_body"])
    # The same request sent in another shape (no temperature, another token limit) is another question to
    # the model; only settings that differ from OpenAI's enter the key, so existing cache keys stay.
    if entry.get("tiny_temperature", "greedy") != "greedy":
        identity["tiny_temperature"] = entry["tiny_temperature"]  # vLLM samples where greedy decodes
    for key in ("token_limit_param", "unsupported_params", "system_role"):
        if entry.get(key) and entry[key] not in ("max_tokens", "system"):
            identity[key] = entry[key]
    return identity
