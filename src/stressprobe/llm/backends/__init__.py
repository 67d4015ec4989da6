"""Model backends; each module is imported only when a model of that backend is opened."""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.llm.backends.base import AsyncBackend, Backend

BACKENDS = {"llamacpp": "llamacpp", "openai": "openai", "vllm": "vllm"}

__all__ = [
    "AsyncBackend",
    "Backend",
    "BACKENDS",
    "backend_identity",
    "chat_template_text",
    "open_backend",
    "run_entry",
]


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

        identity = llamacpp_identity(name, entry)
    else:
        identity = {"backend": entry["backend"], "model": entry["model"]}
    if entry.get("extra_body"):
        # Server-side sampling fields change the answers (absent when empty: older keys stay valid).
        identity["extra_body"] = dict(entry["extra_body"])
    # The same request sent in another shape (no temperature, another token limit, system turns folded) is
    # another question to the model; only settings that differ from OpenAI's enter the key, so existing cache
    # keys stay. `system_role: auto` folds only where the template refuses the unfolded request, which then
    # has no answer to share: it keeps the key of `system`.
    if entry.get("tiny_temperature", "greedy") != "greedy":
        identity["tiny_temperature"] = entry["tiny_temperature"]  # vLLM samples where greedy decodes
    for key in ("token_limit_param", "unsupported_params", "system_role"):
        if entry.get(key) and entry[key] not in ("max_tokens", "system", "auto"):
            identity[key] = entry[key]
    if entry.get("chat_template"):
        # Another template renders another prompt; its text, not its path, names it.
        identity["chat_template"] = chat_template_digest(name, entry)
    return identity


def chat_template_text(name: str, entry: Mapping[str, Any]) -> str:
    """The Jinja text of the entry's `chat_template` file; a missing file is a config error."""
    path = Path(str(entry["chat_template"]))
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StressprobeError(
            f"config models.{name}.chat_template: cannot read {path} ({exc.strerror or exc}); give the path "
            "of a Jinja chat template file, or remove the key to use the model's own template"
        ) from None


def chat_template_digest(name: str, entry: Mapping[str, Any]) -> str:
    return hashlib.sha256(chat_template_text(name, entry).encode("utf-8")).hexdigest()[:16]
