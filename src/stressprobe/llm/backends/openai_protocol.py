"""The OpenAI chat-completions protocol that the synchronous backend (openai.py) and the Batch API's
(openai_batch.py) both speak: the key from the environment, the reachability check, the request body in the
shape a model's API takes, the answer's parsing, and the key scrubbed from messages. One module both import,
so neither imports the other's internals.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import httpx

from stressprobe.errors import StressprobeError
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.failures import refusal
from stressprobe.llm.system_turns import fold_system_turns
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
PREFLIGHT_TIMEOUT_S = 5.0
KEYLESS_PLACEHOLDER = "EMPTY"


def read_api_key(name: str, entry: dict[str, Any]) -> str:
    """The key from `os.environ[api_key_env]`.

    OpenAI proper needs it; a self-hosted `base_url` server often has no key, so an unset variable
    sends the placeholder "EMPTY" there.
    """
    variable = entry.get("api_key_env", "OPENAI_API_KEY")
    key = os.environ.get(variable)
    if key:
        return key
    if entry.get("base_url"):
        log.info("%s: %s is not set; sending no real key to %s", name, variable, entry["base_url"])
        return KEYLESS_PLACEHOLDER
    raise StressprobeError(
        f"config models.{name}.api_key_env: environment variable {variable} is not set; "
        f"export {variable}=<your API key> (keys never go in the config)"
    )


def preflight(name: str, base_url: str, api_key: str) -> None:
    """GET {base_url}/models once: an unreachable server or a rejected key stops the job before any call."""
    url = base_url.rstrip("/") + "/models"
    try:
        reply = httpx.get(url, headers={"Authorization": f"Bearer {api_key}"}, timeout=PREFLIGHT_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise StressprobeError(
            f"config models.{name}.base_url: cannot reach {base_url} ({type(exc).__name__}); "
            "start the server or fix base_url"
        ) from None
    if reply.status_code in (401, 403):
        raise StressprobeError(
            f"config models.{name}.api_key_env: {base_url} rejected the API key (HTTP {reply.status_code}); "
            "check the key in that environment variable"
        )


def connect(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """What the synchronous and the batch backend are both built with: identity, model, endpoint, key
    (once the server has answered), timeout, retries and extra request fields."""
    if not entry.get("model"):
        raise StressprobeError(f"config models.{name}.model: missing; give the model id the API expects")
    api_key = read_api_key(name, entry)
    base_url = entry.get("base_url") or OPENAI_BASE_URL
    preflight(name, base_url, api_key)
    return {
        "identity": backend_identity(name, entry),
        "model": entry["model"],
        "base_url": base_url,
        "api_key": api_key,
        "timeout_s": float(entry.get("timeout_s", 60)),
        "max_retries": int(entry.get("max_retries", 6)),
        "extra": extra_body(name, entry),
    }


# A model entry's `unsupported_params` (temperature, top_p, seed, stop, logprobs) are parameters its API
# refuses (o1-mini takes no temperature): they are left out of the body and the API's own default applies;
# a request that needs logprobs from such a model fails instead of silently getting none.
API_DEFAULTS = {"token_limit_param": "max_tokens", "unsupported_params": (), "system_role": "system"}


def api_settings(entry: dict[str, Any]) -> dict[str, Any]:
    """How this model's API differs from OpenAI's chat completions (defaults: not at all)."""
    settings = {key: entry.get(key) or default for key, default in API_DEFAULTS.items()}
    settings["unsupported_params"] = tuple(settings["unsupported_params"])
    return settings


def extra_body(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The entry's `extra_body`: further request fields for a server's own sampling settings.

    An OpenAI-compatible server may decode differently from OpenAI unless told (llama.cpp's server applies
    `repeat_penalty` 1.1 by default; `vllm serve` applies the model's generation_config.json), so these go
    in every request. The fields the Request sets itself cannot be overridden here.
    """
    extra = dict(entry.get("extra_body") or {})
    clash = sorted(
        set(extra) & set(chat_arguments("", Request.chat(user="-"))) | set(extra) & {"messages", "model"}
    )
    if clash:
        raise StressprobeError(
            f"config models.{name}.extra_body: {', '.join(clash)} is set by each request; remove it from extra_body"
        )
    return extra


def chat_arguments(
    model: str, request: Request, api: dict[str, Any] | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The chat.completions.create arguments for a Request, in the shape the model's API takes (`api`,
    from `api_settings`): the name of the output-token limit, the parameters it refuses, the system role; plus a server's `extra` fields."""
    api = api or API_DEFAULTS
    messages = request.message_dicts()
    if api["system_role"] == "user":
        messages = fold_system_turns(messages)
    elif api["system_role"] != "system":
        messages = [{**m, "role": api["system_role"]} if m["role"] == "system" else m for m in messages]
    arguments: dict[str, Any] = {
        **(extra or {}),
        "model": model,
        "messages": messages,
        api["token_limit_param"]: request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "n": request.n,
        "seed": request.seed,
    }
    if request.stop:
        arguments["stop"] = list(request.stop)
    for name in api["unsupported_params"]:
        arguments.pop(name, None)
    if request.logprobs:
        arguments["logprobs"] = True
        arguments["top_logprobs"] = request.logprobs
    return arguments


def check_supported(
    name: str, model: str, request: Request, api: dict[str, Any], continues_prefill: bool
) -> None:
    """Raise ModelRefused (the job stops) for a request this model's API cannot answer as asked: a prefilled
    answer where the chat API opens a new turn (the prefix would be read as the model's answer), or
    logprobs from a model whose API returns none (the study would silently get none)."""
    if request.prefill is not None and not continues_prefill:
        raise refusal(
            name,
            model,
            "parameter",
            "the OpenAI chat API cannot continue a prefilled answer",
            key="answer_prefill",
            fix=f"remove models.{name}.answer_prefill (only vLLM models continue a prefilled answer)",
        )
    if request.logprobs and "logprobs" in api["unsupported_params"]:
        raise refusal(
            name,
            model,
            "parameter",
            "its API returns no logprobs (unsupported_params lists logprobs)",
            key="unsupported_params",
            fix="a study that reads logprobs needs another model",
        )


def parse_completion(completion: dict[str, Any], request: Request) -> Response:
    """A Response from a chat completion's JSON (missing content counts as empty text)."""
    choices = sorted(completion.get("choices") or [], key=lambda c: c.get("index", 0))
    texts = [((c.get("message") or {}).get("content") or "") for c in choices]
    top_logprobs = None
    content = ((choices[0].get("logprobs") or {}).get("content") or []) if choices else []
    if request.logprobs and content:
        top_logprobs = [
            {t["token"]: t["logprob"] for t in item.get("top_logprobs") or []} for item in content
        ]
    usage = completion.get("usage") or {}
    return Response(
        texts=texts,
        top_logprobs=top_logprobs,
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
    )


_KEY_PATTERN = re.compile(r"\b(sk|key)-[A-Za-z0-9_*\-]{6,}")


def redact(text: str, api_key: str) -> str:
    """Remove the key (and anything key-shaped, e.g. OpenAI's partly masked echo) from a message."""
    if api_key and api_key != KEYLESS_PLACEHOLDER:
        text = text.replace(api_key, "***")
    return _KEY_PATTERN.sub("***", text)
