"""What the client needs from a backend: a model identity for the cache, and a way to answer requests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from stressprobe.llm.types import Request, Response


class Backend:
    """A synchronous backend answers a batch of requests at once (`complete`).

    `batch_size` is how many requests the client claims and hands over per `complete` call: 1 for a
    backend that works one request at a time, larger for one that batches on a GPU.
    """

    kind = "base"
    batch_size = 1

    def __init__(self, name: str, identity: dict[str, Any]) -> None:
        self.name = name
        self.identity = identity
        self.retries = 0

    def order(self, requests: list[Request]) -> list[int]:
        """The order in which to compute `requests` (indices); answers still return in the original order."""
        return list(range(len(requests)))

    def complete(self, requests: list[Request]) -> list[Response]:
        """Answer each request; a transient failure that outlasted its retries is a Response with `error`
        set. A request that can never succeed as sent (a prompt longer than the context) raises ModelRefused
        (stressprobe.llm.failures), which stops the job."""
        raise NotImplementedError

    def close(self) -> None:
        """Free the model or connections."""


class AsyncBackend(Backend):
    """A backend of independent remote calls, answered concurrently (`acomplete`) on its own event loop."""

    def __init__(self, name: str, identity: dict[str, Any], concurrency: int) -> None:
        super().__init__(name, identity)
        self.concurrency = concurrency
        self._loop = asyncio.new_event_loop()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the backend's loop (one loop per client keeps connections warm)."""
        return self._loop.run_until_complete(coroutine)

    async def acomplete(self, request: Request) -> Response:
        """Answer one request, retrying transient failures; raises ModelRefused for a permanent one."""
        raise NotImplementedError

    def close(self) -> None:
        self._loop.close()
