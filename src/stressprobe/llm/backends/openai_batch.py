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

Nothing is dropped silently: a request whose batch expired or was cancelled, or whose result line is missing
or a transient error (429, 5xx), is sent again in a new batch, up to `max_retries` rounds; then it comes back
as a Response with `error` set (recorded, not cached). A batch that failed validation (an unknown model, a
malformed file) or a result line with a permanent error (404, 400, 401/403) stops the job with one line
(stressprobe.llm.failures), once every answer of the batches that have ended is stored; batches still running
stay in the ledger, and the rerun re-attaches to them. A control call (upload, create, list, poll, download)
the API refuses (a rejected key, an unknown batch), or that still fails after the SDK's own retries, stops the
job with one line too, naming the call; the ledger keeps what was created, so the rerun pays nothing twice.
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

from stressprobe.errors import StressprobeError
from stressprobe.io import write_json
from stressprobe.llm.backends.base import Backend
from stressprobe.llm.backends.openai_protocol import (
    api_settings,
    chat_arguments,
    check_supported,
    connect,
    parse_completion,
    redact,
)
from stressprobe.llm.failures import ModelRefused, classify, error_fields, refusal
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)

ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
# The Batch API's documented limits of one input file.
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1000 * 1000
TERMINAL = {"completed", "failed", "expired", "cancelled"}

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
        self.api = api or api_settings({})
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
        for request in pending.values():
            check_supported(self.name, self.model, request, self.api, continues_prefill=False)
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
        for batch in self._control("batches.list", self._client.batches.list, limit=100):
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
            uploaded = self._control(
                "files.create",
                self._client.files.create,
                file=(f"stressprobe-{self.name}.jsonl", data, "application/jsonl"),
                purpose="batch",
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
        batch = self._control(
            "batches.create",
            self._client.batches.create,
            input_file_id=entry["input_file_id"],
            endpoint=ENDPOINT,
            completion_window=COMPLETION_WINDOW,
            metadata={"stressprobe_model": self.name},
        )
        return batch.id

    def _control(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A control call; one that can never succeed, or still fails after the SDK's retries, stops the job
        with one line naming the call (the batches already created stay in the ledger)."""
        import openai

        try:
            return call(*args, **kwargs)
        except openai.APIStatusError as exc:
            code, message = error_fields(exc.body)
            status = exc.status_code
            reason = redact(
                f"{what}: HTTP {status}{' ' + code if code else ''}: {message or exc}", self._api_key
            )
            kind = classify(status, code, message)
            if kind == "auth":
                raise refusal(self.name, self.model, kind, reason) from None
            if kind != "transient":
                # Not a verdict on a request (a 404 here is an unknown file or batch, not a model).
                fix = f"check models.{self.name}.base_url and the account; the ledger is {self.ledger.folder}"
                raise refusal(self.name, self.model, "request", reason, fix=fix) from None
            failure = reason
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            failure = redact(f"{what}: {type(exc).__name__}: {exc}", self._api_key)
        raise StressprobeError(
            f"config models.{self.name}.base_url: the Batch API still fails after the SDK's retries ({failure}); "
            "rerun when it answers: the batches already created are re-attached from the ledger, none is paid "
            "twice"
        ) from None

    # -- waiting and collecting --

    def _wait(
        self, jobs: list[dict[str, Any]], pending: dict[str, Request], reasons: dict[str, str], store: Store
    ) -> None:
        """Poll until every batch has ended; answers of each are stored as soon as it ends."""
        running = list(jobs)
        while running:
            still = []
            for entry in running:
                batch = self._control("batches.retrieve", self._client.batches.retrieve, entry["batch_id"])
                if batch.status in TERMINAL:
                    refused = self._collect(entry, batch, pending, reasons, store)
                    self.ledger.remove(entry)  # every answer it holds is stored
                    if refused is not None:
                        raise refused
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
    ) -> ModelRefused | None:
        """Store the answers of an ended batch and leave the transiently failed ones in `pending`; return the
        first permanent failure (which stops the job once the batch's answers are stored), if any."""
        if batch.status == "failed":
            # Failed validation (an unknown model, a malformed file): it fails the same way when resent.
            errors = getattr(getattr(batch, "errors", None), "data", None) or []
            first = errors[0] if errors else None
            code = getattr(first, "code", None)
            reason = redact(
                f"batch {batch.id} failed: {code or 'error'}: {getattr(first, 'message', '')}", self._api_key
            )
            kind = classify(400, code, reason)
            return refusal(self.name, self.model, kind, reason)
        results = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                results.update(self._read_results(file_id))
        batch_reason = f"batch {batch.id} {batch.status}"
        answered, refused = 0, None
        for key in entry["custom_ids"]:
            if key not in pending:
                continue  # answered meanwhile (another job, or an earlier round)
            request = pending[key]
            line = results.get(key)
            if line is None:
                reasons[key] = f"{batch_reason}: no result for this request"
                continue
            response = line.get("response") or {}
            status = response.get("status_code")
            body = response.get("body") or {}
            if status == 200 and not line.get("error"):
                store(key, request, parse_completion(body, request))
                del pending[key]
                answered += 1
                continue
            code, text = error_fields(line.get("error") or body)
            message = redact(
                f"HTTP {status}{' ' + code if code else ''}: {text or 'error'}"[:200], self._api_key
            )
            reasons[key] = f"{batch_reason}: {message}"
            kind = classify(status, code, text)
            if kind != "transient" and refused is None:
                refused = refusal(self.name, self.model, kind, message)
        log.info(
            "%s: batch %s %s: %d answered, %d to send again%s",
            self.name,
            batch.id,
            batch.status,
            answered,
            sum(k in pending for k in entry["custom_ids"]),
            "; a request can never succeed as sent: stopping" if refused else "",
        )
        return refused

    def _read_results(self, file_id: str) -> dict[str, dict[str, Any]]:
        """custom_id -> result line of an output or error file."""
        text = self._control("files.content", self._client.files.content, file_id).text
        results = {}
        for line in _nonblank(text.splitlines()):
            record = json.loads(line)
            results[record["custom_id"]] = record
        return results

    def close(self) -> None:
        self._client.close()


def _nonblank(lines: Iterable[str]) -> Iterable[str]:
    return (line for line in lines if line.strip())
