"""System turns for models whose chat template has no system role.

Gemma-2's published template raises "System role not supported" on a conversation that opens with a system
turn; o1-mini's API refuses one. Such a model gets its system turns folded into the first user turn, on every
backend, as `models.<name>.system_role` says: `user` folds, `system` sends them as they are, and `auto` (the
default of the local backends, vLLM and llama.cpp) folds where the model's own chat template, rendered once
when the model is opened, refuses a system turn it does not need. Folding happens below the cache: the
request, and so its cache key, keep the system turn (docs/FIDELITY.md, "System turns").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

SETTINGS = ("auto", "system", "user")

# The conversations a template is probed with: a user turn alone, and the same after a system turn.
PROBE_USER = [{"role": "user", "content": "Which is larger, 2 or 3?"}]
PROBE_SYSTEM = [{"role": "system", "content": "Answer briefly."}, *PROBE_USER]


def fold_system_turns(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The conversation without system turns: their text (joined by blank lines) opens the first user turn,
    separated from it by a blank line; with no user turn, it becomes one at the start."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if system:
        first_user = next((m for m in rest if m["role"] == "user"), None)
        if first_user is None:
            rest.insert(0, {"role": "user", "content": system})
        else:
            first_user["content"] = f"{system}\n\n{first_user['content']}"
    return rest


def template_refusal(render: Callable[[list[dict[str, str]]], Any]) -> str | None:
    """Why a chat template refuses a system turn (its exception, one line), or None where it takes one.

    `render` renders a conversation with the template and raises where the template does. A template that
    cannot render a lone user turn either is not judged here (None): its first real call says what is wrong.
    """
    try:
        render(PROBE_USER)
    except Exception:  # any failure: not this module's to explain
        return None
    try:
        render(PROBE_SYSTEM)
    except Exception as exc:  # jinja2's TemplateError (Hugging Face, vLLM), ValueError (llama-cpp-python)
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return None


def folds(name: str, setting: str, render: Callable[[list[dict[str, str]]], Any] | None = None) -> bool:
    """Whether model `name` gets its system turns folded: `user` always, `system` never, `auto` where
    `render` (its chat template; None: no template to ask) refuses a system turn. Logs an `auto` fold."""
    if setting == "user":
        return True
    if setting != "auto" or render is None:
        return False
    refusal = template_refusal(render)
    if refusal is not None:
        log.info(
            "%s: the chat template refuses a system turn (%s); system turns are folded into the first user "
            "turn (models.%s.system_role: auto)",
            name,
            refusal,
            name,
        )
    return refusal is not None
