"""The OpenAI Batch API for an `openai` model with `batch: true`: the same answers at the batch price.

A cell's uncached requests go out as batches: a JSONL input file uploaded to /v1/files (purpose `batch`), a
batch created on it (/v1/batches, endpoint /v1/chat/completions, window 24h), polled until it ends, and its
output and error files downloaded; each result line comes back to its request by `custom_id`, which is the
request's cache key. Inputs are split at the API's limits (50,000 requests or 200 MB per file).

Resumable: before a batch is created its ledger entry (input file id, then batch id, and the custom ids it
holds) is written to the ledger folder next to the response cache, and removed only once every answer of
that batch has been stored in the cache. A job killed while its batches run finds them there on its next
start and re-attaches to them (an entry without a batch id is looked up by its input file among the account's
batches) instead of paying again.

Nothing is dropped silently: a request whose batch failed, expired or was cancelled, or whose result line is
missing or a retryable error (429, 5xx), is sent again in a new batch, up to `max_retries` rounds; then, and
for non-retryable errors (4xx) at once, it comes back as a Response with `error` set (recorded, not cached).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from stressprobe.io import write_json
from stressprobe.llm.backends.base import Backend
from stressprobe.llm.backends.openai_protocol import (
    API_DEFAULTS,
    RETRYABLE_STATUS,
    api_settings,
    chat_arguments,
    connect,
    parse_completion,
    redact,
)
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)

ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
# The Batch API's documented limits of one input file.
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1000 * 1000
TERMINAL = {"completed", "failed", "expired", "cancelled"}
# A batch that failed validation fails again when resent; expired and cancelled ones may succeed.
RETRYABLE_BATCH_STATUS = {"expired", "cancelled"}

Store = Callable[[str, Request, Response], None]


def batch_line(custom_id: str, body: dict[str, Any]) -> bytes:
    """One line of a batch input file."""
    record = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def split_lines(sizes: list[int], max_requests: int, max_bytes: int) -> list[list[int]]:
    """Indices of input lines grouped into files of at most `max_requests` lines and `max_bytes` bytes.

    A single line larger than `max_bytes` still gets a file of its own (the API then reports it as an error).
    """
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, line_size in enumerate(sizes):
        if current and (len(current) >= max_requests or size + line_size > max_bytes):
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += line_size
    if current:
        groups.append(current)
    return groups


def retryable(status: int | None) -> bool:
    """Whether a failed request is worth sending again (no status: the line was missing)."""
    return status is None or status in RETRYABLE_STATUS or status >= 500


def open_backend(name: str, entry: dict[str, Any]) -> OpenAIBatchBackend:
    """Read the key, check the server answers, and build the backend."""
    return OpenAIBatchBackend(
        name,
        **connect(name, entry),
        poll_s=float(entry.get("batch_poll_s", 30.0)),
        max_requests=int(entry.get("batch_max_requests", MAX_REQUESTS)),
        max_bytes=int(entry.get("batch_max_bytes", MAX_BYTES)),
        api=api_settings(entry),
    )


class Ledger:
    """The batches a model has running, one JSON file per input file, in a folder next to the cache."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)

    def entries(self) -> list[dict[str, Any]]:
        if not self.folder.is_dir():
            return []
        found = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                found.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as exc:  # a foreign or damaged file: say so, never guess
                log.warning("ignoring unreadable batch ledger entry %s (%s)", path, exc)
        return found

    def write(self, entry: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / f"{entry['input_file_id']}.json", entry)

    def remove(self, entry: dict[str, Any]) -> None:
        (self.folder / f"{entry['input_file_id']}.json").unlink(missing_ok=True)


class OpenAIBatchBackend(Backend):
    """Answers requests through the Batch API; the client hands over all its claimed requests at once."""

    kind = "openai-batch"
    batch_size = sys.maxsize
    uses_batch_api = True

    def __init__(
        self,
        name: str,
        identity: dict[str, Any],
        model: str,
        base_url: str,
        api_key: str,
        timeout_s: float,
        max_retries: int,
        poll_s: float,
        max_requests: int,
        max_bytes: int,
        extra: dict[str, Any] | None = None,
        api: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(name, identity)
        from openai import OpenAI  # slow to import, and only the API backends need it

        self.model = model
        self.extra_body = extra or {}
        self.api = (
            api or API_DEFAULTS
        )  # the body in the model's API's shape, as the synchronous backend sends it
        self.max_retries = max_retries
        self.poll_s = poll_s
        self.max_requests = min(max_requests, MAX_REQUESTS)
        self.max_bytes = min(max_bytes, MAX_BYTES)
        self._api_key = api_key
        # The SDK's own retries are on here: these are cheap control calls (upload, create, poll, download).
        self._client = OpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=5)
        self.ledger = Ledger(Path("batches") / name)  # the client points it next to the cache

    def complete(self, requests: list[Request]) -> list[Response]:
        """Answer without the cache (a plain call): every request in batches, in order."""
        from stressprobe.llm.cache import cache_key

        keys = [cache_key(self.identity, r) for r in requests]
        answers: dict[str, Response] = {}
        self.run_batches(list(zip(keys, requests, strict=True)), lambda k, _r, a: answers.__setitem__(k, a))
        return [answers[k] for k in keys]

    def run_batches(self, items: list[tuple[str, Request]], store: Store) -> None:
        """Answer every (cache key, request) through batches, calling `store` once per key as answers arrive."""
        pending = dict(items)
        reasons: dict[str, str] = {}
        for key, request in list(pending.items()):
            if request.prefill is not None:
                # The chat API answers in a new turn: a prefix the model never saw would be read as its answer.
                store(
                    key,
                    request,
                    Response.failure(f"{self.name}: the OpenAI chat API cannot continue a prefilled answer"),
                )
                del pending[key]
        rounds = self.max_retries + 1
        for round_ in range(rounds):
            if not pending:
                return
            if round_:
                self.retries += len(pending)
                log.warning(
                    "%s: sending %d requests again in new batches (round %d/%d)",
                    self.name,
                    len(pending),
                    round_ + 1,
                    rounds,
                )
            jobs = self._attach(pending) if round_ == 0 else []
            attached = {k for job in jobs for k in job["custom_ids"]}
            jobs += self._submit({k: r for k, r in pending.items() if k not in attached})
            self._wait(jobs, pending, reasons, store)
        for key, request in pending.items():
            message = f"{self.name}: no answer after {rounds} batch rounds: {reasons.get(key, 'unknown')}"
            log.error("%s", message)
            store(key, request, Response.failure(message))

    # -- submitting and re-attaching --

    def _attach(self, pending: dict[str, Request]) -> list[dict[str, Any]]:
        """Ledger entries holding some of `pending`'s keys: batches a killed job left running."""
        jobs = []
        for entry in self.ledger.entries():
            if not set(entry.get("custom_ids", ())) & set(pending):
                continue
            if not entry.get("batch_id"):
                entry["batch_id"] = self._find_batch(entry["input_file_id"]) or self._create(entry)
                self.ledger.write(entry)
            log.info(
                "%s: re-attaching to batch %s (%d requests)",
                self.name,
                entry["batch_id"],
                len(entry["custom_ids"]),
            )
            jobs.append(entry)
        return jobs

    def _find_batch(self, input_file_id: str) -> str | None:
        """The batch created on an input file before a job was killed (its id never reached the ledger)."""
        for batch in self._client.batches.list(limit=100):
            if batch.input_file_id == input_file_id:
                return batch.id
        return None

    def _submit(self, todo: dict[str, Request]) -> list[dict[str, Any]]:
        """Upload and create batches for `todo`, split at the API's limits; each is in the ledger first."""
        keys = list(todo)
        lines = [batch_line(k, chat_arguments(self.model, todo[k], self.api, self.extra_body)) for k in keys]
        jobs = []
        for group in split_lines([len(line) for line in lines], self.max_requests, self.max_bytes):
            data = b"".join(lines[i] for i in group)
            uploaded = self._client.files.create(
                file=(f"stressprobe-{self.name}.jsonl", data, "application/jsonl"), purpose="batch"
            )
            entry = {
                "model": self.name,
                "input_file_id": uploaded.id,
                "batch_id": None,
                "custom_ids": [keys[i] for i in group],
                "created": time.time(),
            }
            # Written before the batch exists: a job killed in between finds the batch by its input file.
            self.ledger.write(entry)
            entry["batch_id"] = self._create(entry)
            self.ledger.write(entry)
            log.info(
                "%s: batch %s created with %d requests (%d bytes)",
                self.name,
                entry["batch_id"],
                len(group),
                len(data),
            )
            jobs.append(entry)
        return jobs

    def _create(self, entry: dict[str, Any]) -> str:
        batch = self._client.batches.create(
            input_file_id=entry["input_file_id"],
            endpoint=ENDPOINT,
            completion_window=COMPLETION_WINDOW,
            metadata={"stressprobe_model": self.name},
        )
        return batch.id

    # -- waiting and collecting --

    def _wait(
        self, jobs: list[dict[str, Any]], pending: dict[str, Request], reasons: dict[str, str], store: Store
    ) -> None:
        """Poll until every batch has ended; answers of each are stored as soon as it ends."""
        running = list(jobs)
        while running:
            still = []
            for entry in running:
                batch = self._client.batches.retrieve(entry["batch_id"])
                if batch.status in TERMINAL:
                    self._collect(entry, batch, pending, reasons, store)
                    self.ledger.remove(entry)
                else:
                    still.append(entry)
            running = still
            if running:
                time.sleep(self.poll_s)

    def _collect(
        self,
        entry: dict[str, Any],
        batch: Any,
        pending: dict[str, Request],
        reasons: dict[str, str],
        store: Store,
    ) -> None:
        """Store the answers and final errors of an ended batch; leave the retryable ones in `pending`."""
        results = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                results.update(self._read_results(file_id))
        batch_reason = f"batch {batch.id} {batch.status}"
        if batch.status == "failed":
            errors = getattr(getattr(batch, "errors", None), "data", None) or []
            batch_reason += f" ({errors[0].message})" if errors else ""
        answered = failed = 0
        for key in entry["custom_ids"]:
            if key not in pending:
                continue  # answered meanwhile (another job, or an earlier round)
            request = pending[key]
            line = results.get(key)
            if line is None:
                reasons[key] = f"{batch_reason}: no result for this request"
                if batch.status not in RETRYABLE_BATCH_STATUS and batch.status != "completed":
                    store(key, request, Response.failure(f"{self.name}: {reasons[key]}"))
                    del pending[key]
                    failed += 1
                continue
            response = line.get("response") or {}
            status = response.get("status_code")
            body = response.get("body") or {}
            if status == 200 and not line.get("error"):
                store(key, request, parse_completion(body, request))
                del pending[key]
                answered += 1
                continue
            error = line.get("error") or body.get("error") or {}
            message = redact(f"HTTP {status}: {error.get('message', 'error')}"[:200], self._api_key)
            reasons[key] = f"{batch_reason}: {message}"
            if not retryable(status):
                store(key, request, Response.failure(f"{self.name}: {message}"))
                del pending[key]
                failed += 1
        log.info(
            "%s: batch %s %s: %d answered, %d failed, %d to send again",
            self.name,
            batch.id,
            batch.status,
            answered,
            failed,
            sum(k in pending for k in entry["custom_ids"]),
        )

    def _read_results(self, file_id: str) -> dict[str, dict[str, Any]]:
        """custom_id -> result line of an output or error file."""
        text = self._client.files.content(file_id).text
        results = {}
        for line in _nonblank(text.splitlines()):
            record = json.loads(line)
            results[record["custom_id"]] = record
        return results

    def close(self) -> None:
        self._client.close()


def _nonblank(lines: Iterable[str]) -> Iterable[str]:
    return (line for line in lines if line.strip())
