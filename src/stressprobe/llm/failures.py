"""One failure policy for every backend (OpenAI, the Batch API, OpenAI-compatible servers, llama.cpp and vLLM,
in-process and served).

A failed call is either *transient* (HTTP 408/409/429, 5xx, a timeout, a dropped connection, a missing batch
line): the backend retries it with back-off, and one still failing after every retry comes back as a
Response with `error` set (never cached, so the next run asks again); or *permanent*: the request can never
succeed as sent (the model is not served, the prompt is longer than its context, it refuses a parameter, the
key is refused, or any other 4xx). A permanent failure stops the job with one line naming `models.<name>`,
the model id and the provider's reason; the answers that came back before it are in the cache already, so
the rerun after fixing the config pays nothing twice.
"""

from __future__ import annotations

import re
from typing import Any

from stressprobe.errors import StressprobeError, one_line_tail

TRANSIENT_STATUS = {408, 409, 429}
REASON_CHARS = 400

# A provider's wording of a prompt that does not fit: OpenAI's and vLLM's "maximum context length", vLLM's
# input processor's "maximum model length", llama.cpp's "exceed context window".
TOO_LONG = re.compile(r"maximum (context|model) length|context[ _]length|context window", re.IGNORECASE)
# A chat template's (or an API's) refusal of a system turn: Gemma-2's "System role not supported".
SYSTEM_REFUSED = re.compile(
    r"system role|system message|system turn|does not support 'system'", re.IGNORECASE
)
PARAMETER_CODES = {"unsupported_parameter", "unsupported_value"}
MODEL_CODES = {"model_not_found"}


def is_transient(status: int | None) -> bool:
    """Whether a failed call is worth sending again (no status: a timeout, a dropped connection)."""
    return status is None or status in TRANSIENT_STATUS or status >= 500


def classify(status: int | None, code: str | None, message: str) -> str:
    """The class of a failed call: "transient", or the permanent kind ("model", "context", "system",
    "parameter", "auth", "request"), from its HTTP status, the error's `code` and its message."""
    code = code if isinstance(code, str) else None
    if is_transient(status):
        return "transient"
    if code in MODEL_CODES or status == 404:
        return "model"
    if status in (401, 403):
        return "auth"
    if code == "context_length_exceeded" or TOO_LONG.search(message):
        return "context"
    if SYSTEM_REFUSED.search(message):
        return "system"
    if code in PARAMETER_CODES or re.search(r"unsupported (parameter|value)", message, re.IGNORECASE):
        return "parameter"
    return "request"


# What the line says of each permanent kind, and the fix (the backend may give a more precise one).
WHAT = {
    "model": ("model", "is not served: retired, or a wrong id"),
    "context": ("", "cannot take a prompt this long"),
    "system": ("system_role", "refuses a system turn"),
    "parameter": ("", "refuses a parameter of the request"),
    "auth": ("api_key_env", "was refused: the API key is not accepted for it"),
    "request": ("", "refuses the request as sent"),
}
FIX = {
    "model": "set models.{name}.substitute to a current model id (or correct models.{name}.model if misspelt)",
    "context": "shorten the inputs or use a model with a longer context",
    "system": "set models.{name}.system_role: user to fold system turns into the first user turn",
    "parameter": "list it under models.{name}.unsupported_params (or set its token_limit_param or system_role)",
    "auth": "check the key in the environment variable models.{name}.api_key_env names",
    "request": "it fails the same way on every rerun; fix the model's registry entry or the inputs",
}


class ModelRefused(StressprobeError):
    """A permanent failure: the job stops; `kind` is its class (see `classify`)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def refusal(
    name: str, model: str, kind: str, reason: str, key: str | None = None, fix: str | None = None
) -> ModelRefused:
    """The one line a permanent failure stops the job with: `models.<name>` (and the config key to change),
    the model id, the provider's reason, the fix, and that the answers received are kept."""
    default_key, what = WHAT[kind]
    key = default_key if key is None else key
    reason = one_line_tail(reason, 3)[:REASON_CHARS] or "no reason given"
    fix = fix or FIX[kind].format(name=name)
    return ModelRefused(
        f"config models.{name}{'.' + key if key else ''}: {model!r} {what} ({reason}); {fix}; "
        "the answers received so far stay cached",
        kind,
    )


def error_fields(body: Any) -> tuple[str | None, str]:
    """(code, message) of an OpenAI-style error body: `{"error": {...}}`, the inner object itself (as the
    SDK keeps it), or vLLM's older flat `{"object": "error", "message": ...}`."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            code = inner.get("code")
            return (code if isinstance(code, str) else None), str(inner.get("message") or "")
        return None, str(inner)
    return None, "" if body is None else str(body)
