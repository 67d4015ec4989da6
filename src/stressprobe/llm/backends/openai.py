"""Any OpenAI-compatible chat completions API (OpenAI, `vllm serve`, llama.cpp's server) via `AsyncOpenAI`.

The client's own retries are off (`max_retries=0`): this module retries 429/5xx/timeouts/dropped connections
itself, with exponential backoff and full jitter, so every retry is logged and the budget is bounded. A call
that still fails comes back as a Response with `error` set. The API key is read from the environment variable
named in the registry entry and never written anywhere; error messages are scrubbed of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import re
from typing import Any

import httpx

from stressprobe.errors import StressprobeError
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.backends.base import AsyncBackend, Backend
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
PREFLIGHT_TIMEOUT_S = 5.0
MAX_BACKOFF_S = 60.0
RETRYABLE_STATUS = {408, 409, 429}
CONNECTIONS_PER_CLIENT = 16
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


def open_backend(name: str, entry: dict[str, Any]) -> Backend:
    """Read the key, check the server answers, and build the backend (the Batch API's with `batch: true`)."""
    if entry.get("batch", False):
        from stressprobe.llm.backends import openai_batch

        return openai_batch.open_backend(name, entry)
    return OpenAIBackend(
        name,
        **connect(name, entry),
        concurrency=int(entry.get("concurrency", 16)),
        backoff_s=float(entry.get("backoff_s", 1.0)),
        api=api_settings(entry),
    )


# A model entry's `unsupported_params` (temperature, top_p, seed, stop, logprobs) are parameters its API
# refuses (o1-mini takes no temperature): they are left out of the body and the API's own default applies;
# a request that needs logprobs from such a model fails instead of silently getting none.
API_DEFAULTS = {"token_limit_param": "max_tokens", "unsupported_params": (), "system_role": "system"}


def api_settings(entry: dict[str, Any]) -> dict[str, Any]:
    """How this model's API differs from OpenAI's chat completions (defaults: not at all)."""
    settings = {key: entry.get(key) or default for key, default in API_DEFAULTS.items()}
    settings["unsupported_params"] = tuple(settings["unsupported_params"])
    return settings


def backoff_delay(attempt: int, base_s: float, retry_after: float | None) -> float:
    """Seconds to wait before retry `attempt` (0-based): the server's Retry-After, else full jitter."""
    if retry_after is not None:
        return min(retry_after, MAX_BACKOFF_S)
    return random.uniform(0, min(MAX_BACKOFF_S, base_s * 2**attempt))


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
        messages = fold_system_messages(messages)
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


def fold_system_messages(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """System messages prepended to the first user message, for APIs without a system role (o1-mini)."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if system:
        first_user = next((m for m in rest if m["role"] == "user"), None)
        if first_user is None:
            rest.insert(0, {"role": "user", "content": system})
        else:
            first_user["content"] = f"{system}\n\n{first_user['content']}"
    return rest


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


class OpenAIBackend(AsyncBackend):
    """Concurrent chat completions with bounded, logged retries."""

    kind = "openai"
    # Whether the server continues a prefilled final assistant message (vLLM's `continue_final_message`).
    continues_prefill = False

    def __init__(
        self,
        name: str,
        identity: dict[str, Any],
        model: str,
        base_url: str,
        api_key: str,
        concurrency: int,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        extra: dict[str, Any] | None = None,
        api: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(name, identity, concurrency)
        self.api = api or API_DEFAULTS
        from openai import AsyncOpenAI  # slow to import, and only this backend needs it

        self.model = model
        self.extra_body = extra or {}
        self._warned_n = False
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._api_key = api_key
        # httpx's pool slows down badly with many connections (64 in one pool: ~10x fewer calls/s), so the
        # slots are spread over several small clients; a request borrows a slot and uses its client.
        self._slots: asyncio.Queue[Any] = asyncio.Queue()
        self._clients = []
        for start in range(0, concurrency, CONNECTIONS_PER_CLIENT):
            size = min(CONNECTIONS_PER_CLIENT, concurrency - start)
            limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
            client = AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout_s,
                max_retries=0,
                http_client=httpx.AsyncClient(limits=limits, timeout=timeout_s),
            )
            self._clients.append(client)
            for _ in range(size):
                self._slots.put_nowait(client)

    async def acomplete(self, request: Request) -> Response:
        response = await self._complete_once(request)
        if response.error is None and len(response.texts) < request.n:
            response = await self._fill_samples(request, response)
        return response

    async def _fill_samples(self, request: Request, response: Response) -> Response:
        """Ask for the samples a server left out (llama.cpp's server ignores `n`), one call each.

        Sample i is asked with seed `seed + i`, as the in-process llama.cpp backend draws it; a failed one
        fails the whole response (never fewer samples than asked for).
        """
        if not self._warned_n:
            log.warning(
                "%s: the server returned %d of %d samples; asking for the rest one at a time",
                self.name,
                len(response.texts),
                request.n,
            )
            self._warned_n = True
        texts, completion = list(response.texts), response.completion_tokens
        for i in range(len(texts), request.n):
            sample = await self._complete_once(
                dataclasses.replace(request, n=1, seed=request.seed + i, logprobs=0)
            )
            if sample.error is not None or not sample.texts:
                return Response.failure(sample.error or f"{self.name}: sample {i} came back empty")
            texts.append(sample.texts[0])
            completion += sample.completion_tokens
        return dataclasses.replace(response, texts=texts, completion_tokens=completion)

    async def _complete_once(self, request: Request) -> Response:
        if request.prefill is not None and not self.continues_prefill:
            # The chat API answers in a new turn: a prefix the model never saw would be read as its answer.
            return Response.failure(f"{self.name}: the OpenAI chat API cannot continue a prefilled answer")
        if request.logprobs and "logprobs" in self.api["unsupported_params"]:
            return Response.failure(f"{self.name}: this model's API returns no logprobs (unsupported_params)")
        arguments = chat_arguments(self.model, request, self.api, self.extra_body)
        if request.prefill is not None:
            # vLLM's chat extensions: continue the final (assistant) message instead of opening a new turn.
            arguments.update(add_generation_prompt=False, continue_final_message=True)
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            outcome = await self._attempt(arguments, request)
            if isinstance(outcome, Response):
                return outcome
            status = getattr(outcome, "status_code", None)
            reason = self.describe(outcome)
            retryable = status is None or status in RETRYABLE_STATUS or status >= 500
            if not retryable or attempt == attempts - 1:
                tried = f"after {attempt + 1} attempt{'s' if attempt else ''}"
                log.error("%s: call failed %s: %s", self.name, tried, reason)
                return Response.failure(f"{self.name}: {reason} {tried}")
            delay = backoff_delay(attempt, self.backoff_s, retry_after_seconds(outcome))
            self.retries += 1
            log.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.2f s",
                self.name,
                attempt + 1,
                attempts,
                reason,
                delay,
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns")

    async def _attempt(self, arguments: dict[str, Any], request: Request) -> Response | Exception:
        """One HTTP call on a borrowed slot: the Response, or the transient exception to retry on."""
        import openai

        client = await self._slots.get()
        try:
            # The client's low-level `post` (its documented way to call any endpoint) with the body as is:
            # `chat.completions.create` spends ~3 ms of CPU per call re-validating the arguments and
            # building typed objects, which caps throughput at high concurrency.
            reply = await client.post("/chat/completions", body=arguments, cast_to=httpx.Response)
            return parse_completion(reply.json(), request)
        except (openai.APITimeoutError, openai.APIConnectionError, openai.APIStatusError) as exc:
            return exc
        except ValueError as exc:  # a 200 whose body is not JSON: retry like a server error
            return openai.APIConnectionError(message=f"malformed response ({exc})", request=reply.request)
        finally:
            self._slots.put_nowait(client)

    def describe(self, exc: Exception) -> str:
        """A short, key-free description of a failed call."""
        status = getattr(exc, "status_code", None)
        kind = type(exc).__name__ + (f" HTTP {status}" if status is not None else "")
        return redact(f"{kind}: {str(exc)[:200]}", self._api_key)

    def close(self) -> None:
        for client in self._clients:
            self.run(client.close())
        super().close()


def retry_after_seconds(exc: Exception) -> float | None:
    """The Retry-After header of a 429/503 answer, in seconds, when the server sent one."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


_KEY_PATTERN = re.compile(r"\b(sk|key)-[A-Za-z0-9_*\-]{6,}")


def redact(text: str, api_key: str) -> str:
    """Remove the key (and anything key-shaped, e.g. OpenAI's partly masked echo) from a message."""
    if api_key and api_key != KEYLESS_PLACEHOLDER:
        text = text.replace(api_key, "***")
    return _KEY_PATTERN.sub("***", text)
