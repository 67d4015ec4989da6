"""The response cache: a directory of per-job shards shared by every job, keyed by a content hash of the request.

Safe for many jobs on many hosts over a network file system (NFS, Lustre, GPFS): each job appends only to
shard files it alone created (see `shards.py`), reads everyone's shards read-only, and relies on no file
lock or shared memory for correctness. A killed job loses only the calls that were in flight: each response
is committed by its own `write()` as soon as it exists, and a torn last record is ignored.

Claims (two jobs asking the same question at once pay for it once, on one host or on many) are files in
the shared directory, created exclusively and held under an expiring lease (see `claims.py`):
`tests/test_cache_multihost.py` checks that jobs on three hosts pay each distinct call once.

`cache.path` names the directory. An old single-file cache `X.sqlite` is read once into a shard of the
directory `X` (a path ending in `.sqlite` means that directory), so no paid answer is lost.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.llm.claims import Claims, lease_seconds
from stressprobe.llm.shards import (
    DATA_SUFFIX,
    INDEX_SUFFIX,
    TMP_PREFIX,
    ShardIndex,
    ShardWriter,
    decode_line,
    encode_entry,
    encode_line,
    parse_record,
    parse_response,
    read_legacy_rows,
    record_body,
)
from stressprobe.llm.types import Request

log = logging.getLogger(__name__)

# How long an answer's claim outlives the answer's sync while another owner is alive: a job that made a
# claim within HOLD_S of its last index refresh knows that no answer of that key was synced before the
# refresh (see claim_many).
HOLD_S = 1.0
HOST_ENV = (
    "STRESSPROBE_HOST"  # overrides the host name in shard names and claims (for tests without namespaces)
)


class Claim(enum.Enum):
    """Outcome of trying to claim a key before calling the model."""

    MINE = "mine"  # call the model, then `put` (or `release` on failure)
    DONE = "done"  # someone already stored the answer: read it
    BUSY = "busy"  # another live process is computing it: wait and try again


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal strings."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_record(identity: dict[str, Any], request: Request) -> dict[str, Any]:
    """Everything that determines a response: model identity, messages and decoding parameters."""
    return {
        "model": identity,
        "messages": [list(m) for m in request.messages],
        "decoding": request.decoding(),
    }


def cache_key(identity: dict[str, Any], request: Request) -> str:
    """sha256 of the canonical request record (never contains an endpoint or a key)."""
    return hashlib.sha256(canonical_json(request_record(identity, request)).encode("utf-8")).hexdigest()


def host_name() -> str:
    """This host's name as shard names and claims use it."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


def cache_locations(path: str | os.PathLike) -> tuple[Path, Path]:
    """(shard directory, old single-file cache) of a configured `cache.path`.

    `results/cache/llm` and `results/cache/llm.sqlite` name the same cache: the directory `llm` and, if
    it exists, the old file `llm.sqlite` beside it, read once.
    """
    path = Path(path)
    if path.suffix == ".sqlite":
        return path.with_suffix(""), path
    return path, path.with_name(path.name + ".sqlite")


def cache_exists(path: str | os.PathLike) -> bool:
    """Whether a cache (directory or old file) exists at `cache.path`."""
    directory, legacy = cache_locations(path)
    return directory.is_dir() or legacy.is_file()


class ResponseCache:
    """A job's view of the shared cache: reads every shard, writes only its own (created at its first put).

    `read_only=True` (the cost estimate) writes nothing and takes no claims.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        lease_s: float | None = None,
        read_only: bool = False,
        refresh_interval_s: float = 0.25,
    ) -> None:
        self.path = Path(path)
        self.directory, self.legacy = cache_locations(path)
        self.read_only = read_only
        self.refresh_interval_s = refresh_interval_s
        self.host = host_name()
        self.pid = os.getpid()
        # The owner names this writer's shard: host, pid and a random id, so it is unique across hosts.
        self.owner = f"{_safe(self.host)}-{self.pid}-{uuid.uuid4().hex[:12]}"
        self._writer: ShardWriter | None = None
        self._write_lock = threading.Lock()  # the writer and its pending claims, shared with the heartbeat
        self._pending: list[str] = []  # keys stored, not yet synced
        self._synced: list[tuple[float, list[str]]] = []  # (when synced, keys): claims released HOLD_S later
        self.claims: Claims | None = None
        try:
            if self.directory.exists() and not self.directory.is_dir():
                raise OSError(f"{self.directory} is a file, the cache is now a directory of shards")
            if not read_only or self.legacy.is_file():
                self.directory.mkdir(parents=True, exist_ok=True)
            if self.legacy.is_file():
                self._migrate()
            self.index = ShardIndex(self.directory)
            self.index.refresh()
        except (sqlite3.Error, OSError) as exc:
            raise StressprobeError(
                f"cache.path {self.path}: cannot open the response cache ({exc}); "
                "check the path, free space and permissions"
            ) from None
        if not read_only:
            lease = lease_seconds() if lease_s is None else lease_s
            self.claims = Claims(self.directory, self.owner, self.host, lease, on_tick=self._flush)

    # --- old single-file caches ------------------------------------------------------------------------
    def _migrate(self) -> None:
        """Copy an old `llm.sqlite` into one shard, once (the shard's name is the old file's size and mtime).

        Written under temporary names and renamed, index last: jobs converting at the same moment write the
        same shard, and a half-written conversion is never read.
        """
        stat = self.legacy.stat()
        name = f"legacy-{stat.st_size}-{stat.st_mtime_ns}"
        if (self.directory / f"{name}{INDEX_SUFFIX}").exists():
            return
        tmp = self.directory / f"{TMP_PREFIX}{name}-{self.owner}"
        size = count = 0
        with open(f"{tmp}{DATA_SUFFIX}", "wb") as data, open(f"{tmp}{INDEX_SUFFIX}", "wb") as index:
            for key, model, request, response, created in read_legacy_rows(self.legacy):
                body = record_body(key, model, json.loads(request), json.loads(response), created)
                line = encode_line(key, body)
                data.write(line)
                index.write(encode_entry(bytes.fromhex(key), size, len(line)))
                size += len(line)
                count += 1
            for fh in (data, index):
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(f"{tmp}{DATA_SUFFIX}", self.directory / f"{name}{DATA_SUFFIX}")
        os.replace(f"{tmp}{INDEX_SUFFIX}", self.directory / f"{name}{INDEX_SUFFIX}")
        log.info(
            "response cache: converted %s into %s/%s (%d responses)",
            self.legacy,
            self.directory,
            name,
            count,
        )

    # --- claims (every host, files in the shared directory; see claims.py) -----------------------------
    def claim(self, key: str) -> Claim:
        """Try to become the one process (on any host) that computes `key`."""
        return self.claim_many([key])[key]

    def claim_many(self, keys: list[str]) -> dict[str, Claim]:
        """Claim every key not yet stored: MINE (call the model, then `put` or `release`), DONE or BUSY."""
        keys = list(dict.fromkeys(keys))
        stored = set(self.index.read(self._find(keys, refresh=True)))
        states = dict.fromkeys(stored, Claim.DONE)
        created = []
        for key in keys:
            if key not in stored:
                mine = self.claims is None or self.claims.try_claim(key)
                states[key] = Claim.MINE if mine else Claim.BUSY
                if mine:
                    created.append(key)
        since = self.claims.since if self.claims is not None else 0.0
        last = self.index.last_refresh
        if created and (time.monotonic() - last >= HOLD_S or last <= since):
            # An owner removes a claim HOLD_S after its answer is synced, or at once where it lists no other
            # heartbeat (ours was then not yet written): so an answer whose claim was gone when ours was made
            # is in any refresh since HOLD_S ago that followed our heartbeat; else read what shards gained.
            self.index.refresh()
            late = set(self.index.read(self.index.find(created)))
            self.release(late)
            states.update(dict.fromkeys(late, Claim.DONE))
        return states

    def release(self, keys: list[str] | set[str] | str) -> None:
        """Give up claims (the call failed, or the answer was found), so another process may try."""
        if self.claims is not None:
            self.claims.release([keys] if isinstance(keys, str) else keys)

    def _flush(self, wait: bool = False) -> None:
        """Sync this job's shard, and release the claims of answers synced HOLD_S ago (with `wait`, all of
        them: at once where no other owner is alive, else after waiting as long as needed). Run every
        second by the heartbeat thread, and at close."""
        with self._write_lock:
            if self._pending:
                if self._writer is not None:
                    self._writer.sync()
                self._synced.append((time.monotonic(), self._pending))
                self._pending = []
        # Listed after the sync: an owner not listed now makes its claims' refreshes later (see claim_many).
        alone = wait and self.claims is not None and not self.claims.others_alive()
        if wait and self._synced and not alone:
            time.sleep(max(0.0, self._synced[-1][0] + HOLD_S - time.monotonic()))
        with self._write_lock:
            now = time.monotonic()
            due = [keys for synced, keys in self._synced if alone or now - synced >= HOLD_S]
            self._synced = self._synced[len(due) :]
        for keys in due:
            self.release(keys)

    # --- reading ---------------------------------------------------------------------------------------
    def _find(self, keys: list[str], refresh: bool, locations: bool = True) -> dict[str, Any]:
        """Locations of `keys`; on a miss, read what the shards gained (at most once per refresh interval)."""
        found = self.index.find(keys, locations)
        # Often enough to find answers other jobs just made, rarely enough that re-reading the shards (slow
        # on a network file system with many of them) takes at most a tenth of the job's time.
        interval = max(self.refresh_interval_s, 10 * self.index.refresh_cost)
        stale = time.monotonic() - self.index.last_refresh >= interval
        if refresh and stale and len(found) < len(keys):
            missing = [k for k in keys if k not in found]  # (keys may repeat)
            if missing:
                self.index.refresh()
                found.update(self.index.find(missing, locations))
        return found

    def _readable(self, key: str, refresh: bool) -> bool:
        """Whether `key` is stored intact (an index entry whose record is not yet visible or damaged is not)."""
        return bool(self.index.read(self._find([key], refresh=refresh)))

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored payload of `key`, or None."""
        return self.get_many([key]).get(key)

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """Stored payloads of those `keys` that are in the cache."""
        bodies = self.index.read(self._find(list(dict.fromkeys(keys)), refresh=True))
        return {key: parse_response(body) for key, body in bodies.items()}

    def contains_many(self, keys: list[str]) -> set[str]:
        """Which of `keys` the cache holds, without reading the responses (the cost estimate's question)."""
        return set(self._find(list(keys), refresh=True, locations=False))

    def count(self) -> int:
        """Number of distinct stored responses."""
        self.index.refresh()
        return self.index.distinct_keys()

    # --- writing ---------------------------------------------------------------------------------------
    def put(self, key: str, model: str, record: dict[str, Any], payload: dict[str, Any]) -> None:
        """Commit a completed response to this job's shard; its claim goes once the shard is synced."""
        if self.read_only:
            raise RuntimeError("a read-only response cache cannot store responses")
        try:
            with self._write_lock:
                if self._writer is None:
                    self._writer = ShardWriter(self.directory, self.owner)
                body = record_body(key, model, record, payload, time.time())
                offset, length = self._writer.append(key, body)
                self._pending.append(key)
        except OSError as exc:
            raise StressprobeError(
                f"cache.path {self.path}: cannot store a response ({exc}); check free space and permissions"
            ) from None
        self.index.add(key, self.owner, offset, length)

    def close(self) -> None:
        """Sync and close this job's shard, then release its claims (answered or not) and its heartbeat."""
        try:
            self._flush(wait=True)
            with self._write_lock:
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
        finally:
            if self.claims is not None:
                self.claims.close()
                self.claims = None


def _safe(name: str) -> str:
    """A host name as a file-name part."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "host"


def iter_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every stored record (key, model, request, response, created) of a cache, one per distinct key."""
    directory, legacy = cache_locations(path)
    if legacy.is_file():
        ResponseCache(path, read_only=True).close()  # converts it
    records: dict[str, dict[str, Any]] = {}
    if not directory.is_dir():
        return []
    for data_path in sorted(directory.glob(f"*{DATA_SUFFIX}")):
        if data_path.name.startswith(TMP_PREFIX):
            continue
        with open(data_path, "rb") as fh:
            for line in fh:
                decoded = decode_line(line)
                if decoded is None:
                    break  # a torn last record
                if decoded[0] not in records:
                    records[decoded[0]] = parse_record(decoded[1])
    return list(records.values())


def compact(path: str | os.PathLike) -> tuple[int, int]:
    """Merge every shard of a cache into one, one record per key; returns (shards before, records kept).

    Run it while no job uses the cache (readers holding the old shards' locations would miss them). The
    merged shard is written under a temporary name and renamed, index last, before the old shards go, so
    a crash at any point leaves every answer readable (at worst twice).
    """
    directory, legacy = cache_locations(path)
    if legacy.is_file():
        ResponseCache(path, read_only=True).close()  # converts it first
    if not directory.is_dir():
        raise StressprobeError(f"cache.path {path}: no response cache there")
    old = sorted(p for p in directory.glob(f"*{DATA_SUFFIX}") if not p.name.startswith(TMP_PREFIX))
    name = f"compact-{_safe(host_name())}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    tmp = directory / f"{TMP_PREFIX}{name}"
    seen: set[str] = set()
    size = 0
    with open(f"{tmp}{DATA_SUFFIX}", "wb") as data, open(f"{tmp}{INDEX_SUFFIX}", "wb") as index:
        for shard in old:
            with open(shard, "rb") as fh:
                for line in fh:
                    decoded = decode_line(line)
                    if decoded is None:
                        break  # a torn last record
                    if decoded[0] in seen:
                        continue
                    seen.add(decoded[0])
                    data.write(line)
                    index.write(encode_entry(bytes.fromhex(decoded[0]), size, len(line)))
                    size += len(line)
        for fh in (data, index):
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(f"{tmp}{DATA_SUFFIX}", directory / f"{name}{DATA_SUFFIX}")
    os.replace(f"{tmp}{INDEX_SUFFIX}", directory / f"{name}{INDEX_SUFFIX}")
    for shard in old:
        shard.with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)
        shard.unlink()
    return len(old), len(seen)


def main(argv: list[str] | None = None) -> None:
    """`python -m stressprobe.llm.cache compact PATH`: merge a cache's shards (while no job runs)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m stressprobe.llm.cache", description=main.__doc__)
    parser.add_argument("command", choices=["compact"])
    parser.add_argument("path", help="the cache directory (cache.path), or an old .sqlite file to convert")
    args = parser.parse_args(argv)
    try:
        shards, kept = compact(args.path)
    except (OSError, StressprobeError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"{args.path}: {shards} shards merged into one, {kept} responses")


if __name__ == "__main__":
    main()
