"""Any OpenAI-compatible chat completions API (OpenAI, `vllm serve`, llama.cpp's server) via `AsyncOpenAI`.

The client's own retries are off (`max_retries=0`): this module retries 429/5xx/timeouts/dropped connections
itself, with exponential backoff and full jitter, so every retry is logged and the budget is bounded. A call
that still fails comes back as a Response with `error` set; one that can never succeed as sent (404, 401/403,
any other 4xx) raises ModelRefused at once and stops the job (stressprobe.llm.failures). The API key is read from the environment variable
named in the registry entry and never written anywhere; error messages are scrubbed of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from typing import Any

import httpx

from stressprobe.llm.backends.base import AsyncBackend, Backend
from stressprobe.llm.backends.openai_protocol import (
    API_DEFAULTS,
    api_settings,
    chat_arguments,
    check_supported,
    connect,
    parse_completion,
    redact,
)
from stressprobe.llm.failures import classify, error_fields, refusal
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0
CONNECTIONS_PER_CLIENT = 16


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


def backoff_delay(attempt: int, base_s: float, retry_after: float | None) -> float:
    """Seconds to wait before retry `attempt` (0-based): the server's Retry-After, else full jitter."""
    if retry_after is not None:
        return min(retry_after, MAX_BACKOFF_S)
    return random.uniform(0, min(MAX_BACKOFF_S, base_s * 2**attempt))


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
        check_supported(self.name, self.model, request, self.api, self.continues_prefill)
        arguments = chat_arguments(self.model, request, self.api, self.extra_body)
        if request.prefill is not None:
            # vLLM's chat extensions: continue the final (assistant) message instead of opening a new turn.
            arguments.update(add_generation_prompt=False, continue_final_message=True)
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            outcome = await self._attempt(arguments, request)
            if isinstance(outcome, Response):
                return outcome
            reason = self.describe(outcome)
            kind = self.classify(outcome)
            if kind != "transient":
                log.error("%s: the request can never succeed as sent: %s", self.name, reason)
                raise refusal(self.name, self.model, kind, reason)
            if attempt == attempts - 1:
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

    def classify(self, exc: Exception) -> str:
        """The failure's class (stressprobe.llm.failures.classify) from its status and error body."""
        code, message = error_fields(getattr(exc, "body", None))
        return classify(getattr(exc, "status_code", None), code, message or str(exc))

    def describe(self, exc: Exception) -> str:
        """A short, key-free description of a failed call: the provider's own message where it sent one."""
        status = getattr(exc, "status_code", None)
        code, message = error_fields(getattr(exc, "body", None))
        if status is not None and message:
            kind = f"HTTP {status}" + (f" {code}" if code else "")
            return redact(f"{kind}: {message[:200]}", self._api_key)
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
