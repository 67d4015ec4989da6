"""The one entry point for model calls: cache first, claim, call the backend, commit, count.

A request is sent to a model at most once across jobs and reruns: answers come from the cache when they
exist; otherwise the client claims the key, calls the model and commits the answer immediately. A key
claimed by another live process, on this host or another, is waited for instead of being paid for twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.io import write_json
from stressprobe.llm.backends import AsyncBackend, Backend, open_backend
from stressprobe.llm.cache import Claim, ResponseCache, cache_key, request_record
from stressprobe.llm.progress import Progress
from stressprobe.llm.types import Request, Response
from stressprobe.llm.usage import Usage, effective_price, usage_record

log = logging.getLogger(__name__)

POLL_START_S = 0.02
POLL_MAX_S = 0.5


def open_client(models: dict[str, Any], name: str, cache_path: str | os.PathLike) -> Client:
    """A client for registry model `name`; config errors raise StressprobeError before any call."""
    if name not in (models or {}):
        known = ", ".join(sorted(models or {})) or "none"
        raise StressprobeError(
            f"config models: model {name!r} is not in the registry (known: {known}); add it under `models:` "
            "or fix the name"
        )
    entry = models[name]
    if not isinstance(entry, dict):
        raise StressprobeError(f"config models.{name}: expected a mapping with a `backend` key")
    backend = open_backend(name, entry)
    try:
        cache = ResponseCache(cache_path)
    except StressprobeError:
        backend.close()
        raise
    if getattr(backend, "uses_batch_api", False):
        from stressprobe.llm.backends.openai_batch import Ledger

        # Running batches are remembered next to the cache, which outlives any one job.
        backend.ledger = Ledger(Path(cache_path).parent / "batches" / name)
    return Client(name, backend, cache, price=effective_price(entry))


class Client:
    """Answers Requests for one model through the shared cache; use as a context manager."""

    def __init__(
        self, name: str, backend: Backend, cache: ResponseCache, price: dict[str, float] | None
    ) -> None:
        self.name = name
        self.backend = backend
        self.cache = cache
        self.price = price
        self.usage = Usage()
        self.progress = Progress(name, price)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def generate(self, requests: list[Request]) -> list[Response]:
        """Responses in the order of `requests`; identical requests are computed once."""
        keys = [cache_key(self.backend.identity, r) for r in requests]
        unique = dict(zip(keys, requests, strict=True))
        answers = {k: Response.from_payload(p) for k, p in self.cache.get_many(list(unique)).items()}
        todo = [(k, r) for k, r in unique.items() if k not in answers]
        self.progress.begin(len(unique), len(unique) - len(todo), self.usage)
        if todo:
            if getattr(self.backend, "uses_batch_api", False):
                self._run_batches(todo, answers)
            elif isinstance(self.backend, AsyncBackend):
                self.backend.run(self._run_async(todo, answers))
            else:
                self._run_sync(todo, answers)
        self.usage.retries = self.backend.retries
        responses = self._in_request_order(keys, answers)
        self.progress.finish(self.usage)
        return responses

    def _in_request_order(self, keys: list[str], answers: dict[str, Response]) -> list[Response]:
        """Map answers back to positions; every answer not computed here (or repeated) is a cache hit."""
        responses, seen = [], set()
        for key in keys:
            response = answers[key]
            if key in seen:
                response = dataclasses.replace(response, cached=True)
            if response.cached:
                self.usage.record_hit()
            seen.add(key)
            responses.append(response)
        return responses

    def _store(self, key: str, request: Request, response: Response) -> None:
        """Commit a fresh answer (or release the claim of a failed one: errors are never cached)."""
        self.usage.record_call(response)
        if response.error is None:
            self.cache.put(
                key, self.name, request_record(self.backend.identity, request), response.to_payload()
            )
        else:
            self.cache.release(key)
        self.progress.advance(self.usage)

    def _run_sync(self, todo: list[tuple[str, Request]], answers: dict[str, Response]) -> None:
        """Claim and compute in the backend's order, `batch_size` at a time; then wait for others' claims."""
        order = self.backend.order([r for _, r in todo])
        size = max(1, self.backend.batch_size)
        busy: list[tuple[str, Request]] = []
        for start in range(0, len(order), size):
            mine, held = self._claim_all([todo[i] for i in order[start : start + size]], answers)
            busy += held
            if mine:
                self._compute_sync(mine, answers)
        delay = POLL_START_S
        while busy:
            time.sleep(delay)
            delay = min(POLL_MAX_S, delay * 2)
            freed, busy = self._claim_all(busy, answers)
            for item in freed:
                self._compute_sync([item], answers)

    def _compute_sync(self, items: list[tuple[str, Request]], answers: dict[str, Response]) -> None:
        try:
            responses = self.backend.complete([r for _, r in items])
        except BaseException:
            for key, _ in items:
                self.cache.release(key)
            raise
        for (key, request), response in zip(items, responses, strict=True):
            self._store(key, request, response)
            answers[key] = response

    def _claim_all(
        self, todo: list[tuple[str, Request]], answers: dict[str, Response]
    ) -> tuple[list[tuple[str, Request]], list[tuple[str, Request]]]:
        """Claim every key: answers already stored go into `answers`; returns (claimed, held by others)."""
        mine, busy = [], []
        states = self.cache.claim_many([key for key, _ in todo])
        for key, request in todo:
            state = states[key]
            if state is Claim.MINE:
                mine.append((key, request))
            elif state is Claim.DONE:
                answers[key] = Response.from_payload(self.cache.get(key))
            else:
                busy.append((key, request))
        return mine, busy

    def _run_batches(self, todo: list[tuple[str, Request]], answers: dict[str, Response]) -> None:
        """Claim every key, send the claimed ones as batches (answers stored as each batch ends), then wait
        for keys other processes hold; one that comes free is sent in a batch of its own."""
        mine, busy = self._claim_all(todo, answers)

        def store(key: str, request: Request, response: Response) -> None:
            self._store(key, request, response)
            answers[key] = response

        try:
            if mine:
                self.backend.run_batches(mine, store)
            delay = POLL_START_S
            while busy:
                time.sleep(delay)
                delay = min(POLL_MAX_S, delay * 2)
                freed, still_busy = self._claim_all(busy, answers)
                if freed:
                    self.backend.run_batches(freed, store)
                busy = still_busy
        except BaseException:
            for key, _ in todo:
                if key not in answers:
                    self.cache.release(key)
            raise

    async def _run_async(self, todo: list[tuple[str, Request]], answers: dict[str, Response]) -> None:
        """One task per request; a key is claimed only once a concurrency slot is free (claims = calls).

        After the first failure that stops the job (a permanent one: ModelRefused), no further request is
        sent; the calls already in flight finish and their answers are committed (they are paid for), then
        that failure is raised."""
        slots = asyncio.Semaphore(self.backend.concurrency)
        stopped: list[Exception] = []

        async def answer(key: str, request: Request) -> None:
            delay = POLL_START_S
            while not stopped:
                async with slots:
                    if stopped:
                        return
                    state = self.cache.claim(key)
                    if state is Claim.MINE:
                        try:
                            response = await self.backend.acomplete(request)
                        except BaseException as exc:
                            self.cache.release(key)
                            if not isinstance(exc, Exception):
                                raise
                            stopped.append(exc)
                            return
                        self._store(key, request, response)
                        answers[key] = response
                        return
                if state is Claim.DONE:
                    answers[key] = Response.from_payload(self.cache.get(key))
                    return
                await asyncio.sleep(delay)
                delay = min(POLL_MAX_S, delay * 2)

        await asyncio.gather(*(answer(k, r) for k, r in todo))
        if stopped:
            raise stopped[0]

    def usage_record(self, usage: Usage | None = None) -> dict[str, Any]:
        """This job's usage so far (calls, cache hits, errors, retries, tokens, cost), as the sidecar holds
        it; or `usage`, a part of it (one cell's share of a job that asked several at once)."""
        return usage_record(self.name, self.backend.kind, usage or self.usage, self.price)

    def write_usage(self, path: str | os.PathLike, usage: Usage | None = None) -> None:
        """Write this job's usage sidecar (or the sidecar of `usage`, a part of it)."""
        write_json(path, self.usage_record(usage))

    def close(self) -> None:
        """Release claims and free the model/connections."""
        self.progress.close()
        try:
            self.backend.close()
        finally:
            self.cache.close()
