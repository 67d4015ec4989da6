"""The response cache: one SQLite file shared by every job, keyed by a content hash of the request.

Safe for several processes at once (WAL journal, busy timeout, short IMMEDIATE transactions) and for a
killed writer: each response is committed on its own as soon as it exists, so `kill -9` loses only the
calls that were in flight. A claims table makes sure that two jobs asking the same question at the same
time pay for it once: a job claims a key before calling the model, others wait for the answer.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import socket
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.llm.types import Request

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, model TEXT NOT NULL, request TEXT NOT NULL, response TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, claimed REAL NOT NULL
);
"""


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _enable_wal(db: sqlite3.Connection, wait_s: float = 120.0) -> None:
    """Switch the file to WAL mode (a no-op once it is).

    When two jobs open a new cache file at the same moment, SQLite refuses one switch at once instead of
    waiting (it would deadlock on the exclusive lock both want), so "locked" is retried here with backoff.
    """
    deadline = time.monotonic() + wait_s
    delay = 0.005
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


class ResponseCache:
    """A process's connection to the shared cache file."""

    def __init__(self, path: str | os.PathLike, claim_ttl_s: float = 1800.0) -> None:
        self.path = Path(path)
        self.claim_ttl_s = claim_ttl_s
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=120.0, isolation_level=None, check_same_thread=False
            )
            # busy_timeout first: switching to WAL itself needs a lock another opener may hold.
            self._db.execute("PRAGMA busy_timeout=120000")
            _enable_wal(self._db)
            # NORMAL is durable against a killed process (not against power loss) and never corrupts in WAL.
            self._db.execute("PRAGMA synchronous=NORMAL")
            with self._transaction():
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    self._db.execute(statement)
        except (sqlite3.Error, OSError) as exc:
            raise StressprobeError(
                f"cache.path {self.path}: cannot open the response cache ({exc}); "
                "check the path, free space and permissions"
            ) from None

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored payload of `key`, or None."""
        row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """Stored payloads of those `keys` that are in the cache."""
        found: dict[str, dict[str, Any]] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):  # stay below SQLite's bound-parameter limit
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for key, text in self._db.execute(
                f"SELECT key, response FROM responses WHERE key IN ({marks})", chunk
            ):
                found[key] = json.loads(text)
        return found

    def claim(self, key: str) -> Claim:
        """Try to become the one process that computes `key`; stale claims of dead owners are taken over."""
        with self._transaction():
            if self._db.execute("SELECT 1 FROM responses WHERE key = ?", (key,)).fetchone():
                return Claim.DONE
            row = self._db.execute(
                "SELECT owner, host, pid, claimed FROM claims WHERE key = ?", (key,)
            ).fetchone()
            if row is not None and row[0] != self.owner and not self._is_stale(*row[1:]):
                return Claim.BUSY
            if row is not None and row[0] != self.owner:
                log.warning("taking over a stale claim on %s from %s", key[:12], row[0])
            self._db.execute(
                "INSERT OR REPLACE INTO claims (key, owner, host, pid, claimed) VALUES (?, ?, ?, ?, ?)",
                (key, self.owner, self.host, self.pid, time.time()),
            )
            return Claim.MINE

    def _is_stale(self, host: str, pid: int, claimed: float) -> bool:
        if time.time() - claimed > self.claim_ttl_s:
            return True
        return host == self.host and not _pid_alive(pid)

    def put(self, key: str, model: str, record: dict[str, Any], payload: dict[str, Any]) -> None:
        """Store a completed response and drop its claim, in one committed transaction."""
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, model, request, response, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (key, model, canonical_json(record), canonical_json(payload), time.time()),
            )
            self._db.execute("DELETE FROM claims WHERE key = ?", (key,))

    def release(self, key: str) -> None:
        """Give up a claim (the call failed), so another process may try."""
        with self._transaction():
            self._db.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))

    def count(self) -> int:
        """Number of stored responses."""
        return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        """Release this process's remaining claims and close the connection."""
        try:
            with self._transaction():
                self._db.execute("DELETE FROM claims WHERE owner = ?", (self.owner,))
        finally:
            self._db.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT: takes the write lock up front so read-then-write cannot race."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
