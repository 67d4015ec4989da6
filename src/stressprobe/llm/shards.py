"""Append-only shard files: the response cache's storage, safe on a network file system shared by many hosts.

A cache is a directory. Every writer (one `ResponseCache` object in one job) appends to its own pair of
files, named after its host, pid and a random id and created with O_EXCL, so no file ever has two writers
and nothing depends on file locks or shared memory (which SQLite's WAL needs and NFS/Lustre/GPFS do not
give across hosts):

- `<name>.jsonl`: one line per response, `<crc32 of the rest, 8 hex> <key, 64 hex> <response JSON>\\t<JSON of
  key, model, request and time>\\n` (a tab never occurs inside JSON text, and a lookup parses only the
  response);
- `<name>.idx`: one fixed 48-byte entry per line of the data file (key, offset, length, check word), so a
  job opening the cache reads ~48 bytes per response instead of the responses themselves.

A record is committed by one `write()` to the data file followed by one to the index (the index entry is a
hint: a data line without one, e.g. a writer killed between the two writes, is found by scanning the data
file past the last indexed line). A reader trusts nothing it has not checked: index entries carry a check
word, data lines a crc32 and their key, and a torn or not-yet-visible last record is ignored (and read again
at the next refresh). Why JSON lines and not a SQLite file per writer: readers on other hosts read shards
while their writer appends, and only an append-only format whose records check themselves can be read
safely without locks; a reader of a live SQLite file needs the writer's locks.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

DATA_SUFFIX = ".jsonl"
INDEX_SUFFIX = ".idx"
TMP_PREFIX = ".tmp-"
ENTRY = struct.Struct("<32sQII")  # key (sha256 digest), offset, length, check word
ENTRY_DTYPE = np.dtype([("k", ">u8", (4,)), ("off", "<u8"), ("len", "<u4"), ("chk", "<u4")])
CHECK_SALT = 0xA5A5A5A5  # an all-zero entry (a hole in a file another host is still writing) fails the check
# How many entries added since the last merge stay in a dict before the sorted arrays are rebuilt.
MERGE_AT = 100_000
AUDIT_ENV = "STRESSPROBE_CACHE_AUDIT"


def check_word(k: np.ndarray, off: np.ndarray, length: np.ndarray) -> np.ndarray:
    """A cheap vectorised check of index entries (data lines carry a real crc32)."""
    x = (
        k[:, 0]
        ^ k[:, 1]
        ^ k[:, 2]
        ^ k[:, 3]
        ^ off.astype(np.uint64)
        ^ (length.astype(np.uint64) * 0x9E3779B1)
    )
    return ((x ^ (x >> np.uint64(32))) & np.uint64(0xFFFFFFFF)).astype(np.uint32) ^ np.uint32(CHECK_SALT)


def encode_entry(key: bytes, offset: int, length: int) -> bytes:
    k = np.frombuffer(key, dtype=">u8").reshape(1, 4)
    chk = int(check_word(k, np.array([offset], np.uint64), np.array([length], np.uint32))[0])
    return ENTRY.pack(key, offset, length, chk)


def encode_line(key: str, body: str) -> bytes:
    """One data line: crc32 over `key body`, the key, the record as canonical JSON."""
    rest = f"{key} {body}".encode()
    return b"%08x " % zlib.crc32(rest) + rest + b"\n"


def decode_line(line: bytes) -> tuple[str, bytes] | None:
    """(key, JSON body) of a complete, intact data line; None for a torn or damaged one."""
    if len(line) < 75 or not line.endswith(b"\n") or line[8:9] != b" " or line[73:74] != b" ":
        return None
    try:
        crc = int(line[:8], 16)
    except ValueError:
        return None
    rest = line[9:-1]
    if zlib.crc32(rest) != crc:
        return None
    return rest[:64].decode("ascii"), rest[65:]


def audit(path: Path, owner: str) -> None:
    """Record a write-open of a cache file (tests set the env var to check that no file has two writers)."""
    target = os.environ.get(AUDIT_ENV)
    if target:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {owner} {path}\n".encode())
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class ShardWriter:
    """The files of one writer: created exclusively, appended only, never opened for writing by anyone else."""

    def __init__(self, directory: Path, name: str, sync_interval_s: float = 1.0) -> None:
        self.data_path = directory / f"{name}{DATA_SUFFIX}"
        self.index_path = directory / f"{name}{INDEX_SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
        audit(self.data_path, name)
        self._data = os.open(self.data_path, flags, 0o644)
        audit(self.index_path, name)
        self._index = os.open(self.index_path, flags, 0o644)
        self.size = 0
        self.sync_interval_s = sync_interval_s
        self._synced = time.monotonic()

    def append(self, key: str, body: str) -> tuple[int, int]:
        """Commit one record; returns its (offset, length) in the data file.

        Written straight to the kernel (no user-space buffer), so a killed process loses nothing it
        appended; fsync (which makes it visible to other NFS clients and survives a power cut) runs at most
        once per `sync_interval_s` and at close, so a batch of thousands of answers is not thousands of syncs.
        """
        line = encode_line(key, body)
        offset = self.size
        _write_all(self._data, line)
        self.size += len(line)
        _write_all(self._index, encode_entry(bytes.fromhex(key), offset, len(line)))
        if time.monotonic() - self._synced >= self.sync_interval_s:
            self.sync()
        return offset, len(line)

    def sync(self) -> None:
        os.fsync(self._data)
        os.fsync(self._index)
        self._synced = time.monotonic()

    def close(self) -> None:
        try:
            self.sync()
        finally:
            os.close(self._data)
            os.close(self._index)


class _Shard:
    """What a reader knows of one shard: how far its index and data have been read."""

    __slots__ = ("name", "data_path", "index_path", "index_pos", "covered")

    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.data_path = directory / f"{name}{DATA_SUFFIX}"
        self.index_path = directory / f"{name}{INDEX_SUFFIX}"
        self.index_pos = 0  # bytes of the index file read and found intact
        self.covered = 0  # data bytes [0, covered) whose records are all in the reader's index


class ShardIndex:
    """Where each key's record is, over every shard of a cache directory; read-only, refreshed on demand.

    Sorted numpy arrays (first 8 key bytes as the search prefix, the full key to confirm) hold what was seen
    at open; entries seen later go to a dict until there are enough to merge.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.shards: list[_Shard] = []
        self._by_name: dict[str, int] = {}
        self._prefix = np.empty(0, np.uint64)
        self._keys = np.empty((0, 4), np.uint64)
        self._loc = np.empty((0, 3), np.uint64)  # shard, offset, length
        self._recent: dict[bytes, tuple[int, int, int]] = {}
        self.last_refresh = 0.0
        self.refresh_cost = 0.0  # seconds the last full refresh took

    # --- building --------------------------------------------------------------------------------------
    def refresh(self, only: str | None = None) -> None:
        """Read what shards gained since the last refresh (all shards, or the one named `only`)."""
        start = time.monotonic()
        new_keys: list[np.ndarray] = []
        new_loc: list[np.ndarray] = []
        if only is None:
            self._discover()
            targets = range(len(self.shards))
        else:
            if only not in self._by_name:
                self._add_shard(only)
            targets = [self._by_name[only]]
        for sid in targets:
            self._read_shard(sid, new_keys, new_loc)
        if new_keys:
            keys = np.concatenate(new_keys)
            loc = np.concatenate(new_loc)
            if len(self._prefix) == 0 or len(keys) + len(self._recent) >= MERGE_AT:
                self._merge(keys, loc)
            else:
                raw = keys.astype(">u8").tobytes()
                for i in range(len(keys)):
                    self._recent[raw[32 * i : 32 * i + 32]] = tuple(int(v) for v in loc[i])
        if only is None:
            self.last_refresh = start  # what was synced before this moment is now known
            self.refresh_cost = time.monotonic() - start

    def _discover(self) -> None:
        try:
            names = sorted(
                e.name[: -len(DATA_SUFFIX)]
                for e in os.scandir(self.directory)
                if e.name.endswith(DATA_SUFFIX) and not e.name.startswith(TMP_PREFIX)
            )
        except FileNotFoundError:
            return
        for name in names:
            if name not in self._by_name:
                self._add_shard(name)

    def _add_shard(self, name: str) -> None:
        self._by_name[name] = len(self.shards)
        self.shards.append(_Shard(self.directory, name))

    def _read_shard(self, sid: int, out_keys: list, out_loc: list) -> None:
        shard = self.shards[sid]
        try:
            with open(shard.index_path, "rb") as fh:
                fh.seek(shard.index_pos)
                raw = fh.read()
        except FileNotFoundError:
            raw = b""
        whole = len(raw) - len(raw) % ENTRY_DTYPE.itemsize
        if whole:
            entries = np.frombuffer(raw[:whole], dtype=ENTRY_DTYPE)
            k = entries["k"].astype(np.uint64)
            ok = (entries["chk"] == check_word(k, entries["off"], entries["len"])) & (entries["len"] > 0)
            # Stop at the first entry that fails (a hole or torn tail): what follows is read again later.
            n_ok = len(ok) if ok.all() else int(np.argmin(ok))
            if n_ok:
                out_keys.append(k[:n_ok])
                out_loc.append(
                    np.stack(
                        [
                            np.full(n_ok, sid, np.uint64),
                            entries["off"][:n_ok].astype(np.uint64),
                            entries["len"][:n_ok].astype(np.uint64),
                        ],
                        axis=1,
                    )
                )
                end = int((entries["off"][:n_ok].astype(np.uint64) + entries["len"][:n_ok]).max())
                shard.covered = max(shard.covered, end)
            shard.index_pos += n_ok * ENTRY_DTYPE.itemsize
        self._scan_data_tail(sid, out_keys, out_loc)

    def _scan_data_tail(self, sid: int, out_keys: list, out_loc: list) -> None:
        """Records past the last indexed one (a writer killed between its two writes, or an index not yet
        visible on this host): found by reading the data file itself, up to the first incomplete line."""
        shard = self.shards[sid]
        try:
            size = os.stat(shard.data_path).st_size
        except FileNotFoundError:
            return
        if size <= shard.covered:
            return
        with open(shard.data_path, "rb") as fh:
            fh.seek(shard.covered)
            tail = fh.read(size - shard.covered)
        pos = 0
        keys, locs = [], []
        while True:
            end = tail.find(b"\n", pos)
            if end < 0:
                break
            decoded = decode_line(tail[pos : end + 1])
            if decoded is None:
                break
            keys.append(bytes.fromhex(decoded[0]))
            locs.append((sid, shard.covered + pos, end + 1 - pos))
            pos = end + 1
        if keys:
            out_keys.append(np.frombuffer(b"".join(keys), dtype=">u8").reshape(-1, 4).astype(np.uint64))
            out_loc.append(np.array(locs, dtype=np.uint64))
            shard.covered += pos

    def _merge(self, keys: np.ndarray, loc: np.ndarray) -> None:
        if self._recent:
            raw = b"".join(self._recent)
            keys = np.concatenate([keys, np.frombuffer(raw, dtype=">u8").reshape(-1, 4).astype(np.uint64)])
            loc = np.concatenate([loc, np.array(list(self._recent.values()), dtype=np.uint64)])
            self._recent = {}
        keys = np.concatenate([self._keys, keys])
        loc = np.concatenate([self._loc, loc])
        order = np.argsort(keys[:, 0], kind="stable")
        self._keys, self._loc = keys[order], loc[order]
        self._prefix = self._keys[:, 0].copy()

    # --- lookup ----------------------------------------------------------------------------------------
    def find(self, keys: list[str], locations: bool = True) -> dict[str, tuple[int, int, int] | None]:
        """(shard, offset, length) of those hex `keys` the index holds (None with `locations=False`, which
        answers only whether they are held, several times faster for a million keys)."""
        if not keys:
            return {}
        blob = bytes.fromhex("".join(keys))  # one call for all keys: lookups of a whole grid stay cheap
        found: dict[str, tuple[int, int, int]] = {}
        if len(self._prefix):
            q = np.frombuffer(blob, dtype=">u8").reshape(-1, 4).astype(np.uint64)
            n = len(self._prefix)
            pos = np.searchsorted(self._prefix, q[:, 0])
            clipped = np.minimum(pos, n - 1)
            same_prefix = (pos < n) & (self._prefix[clipped] == q[:, 0])
            exact = same_prefix & (self._keys[clipped] == q).all(axis=1)
            hits = np.flatnonzero(exact)
            held = [keys[i] for i in hits]
            if locations:
                found = dict(zip(held, map(tuple, self._loc[clipped[hits]].tolist()), strict=True))
            else:
                found = dict.fromkeys(held)
            # Several entries can share a prefix (the same key in two shards, or, rarely, two keys).
            for i in np.flatnonzero(same_prefix & ~exact):
                j = int(pos[i])
                while j < n and self._prefix[j] == q[i, 0]:
                    if (self._keys[j] == q[i]).all():
                        found[keys[i]] = tuple(int(v) for v in self._loc[j])
                        break
                    j += 1
        if self._recent:
            for i, key in enumerate(keys):
                if key not in found:
                    location = self._recent.get(blob[32 * i : 32 * i + 32])
                    if location is not None:
                        found[key] = location
        return found

    def add(self, key: str, shard_name: str, offset: int, length: int) -> None:
        """An entry this process just wrote itself (no need to read it back)."""
        if shard_name not in self._by_name:
            self._add_shard(shard_name)
        sid = self._by_name[shard_name]
        self._recent[bytes.fromhex(key)] = (sid, offset, length)

    def read(self, locations: dict[str, tuple[int, int, int]]) -> dict[str, bytes]:
        """The JSON bodies at `locations`, checked (crc and key); damaged or unreadable ones are left out."""
        bodies: dict[str, bytes] = {}
        by_shard: dict[int, list[tuple[int, int, str]]] = {}
        for key, (sid, off, length) in locations.items():
            by_shard.setdefault(sid, []).append((off, length, key))
        for sid, items in by_shard.items():
            try:
                with open(self.shards[sid].data_path, "rb") as fh:
                    for off, length, key in sorted(items):
                        fh.seek(off)
                        decoded = decode_line(fh.read(length))
                        if decoded is not None and decoded[0] == key:
                            bodies[key] = decoded[1]
            except FileNotFoundError:
                continue
        return bodies

    def distinct_keys(self) -> int:
        base = {bytes(row) for row in self._keys.astype(">u8").view(np.uint8).reshape(-1, 32)}
        return len(base | set(self._recent))


def read_legacy_rows(path: Path) -> Iterator[tuple[str, str, str, str, float]]:
    """(key, model, request JSON, response JSON, created) of every response in an old single-file cache.

    Read-only first; then read-write, which lets SQLite recover answers still in a crashed job's WAL file;
    then as an immutable file (read-only media).
    """
    import sqlite3

    query = "SELECT key, model, request, response, created FROM responses ORDER BY key"
    for uri in (f"file:{path}?mode=ro", f"file:{path}?mode=rw", f"file:{path}?immutable=1"):
        try:
            db = sqlite3.connect(uri, uri=True)
            db.execute("SELECT 1 FROM responses LIMIT 1").fetchall()
        except sqlite3.Error:
            continue
        try:
            yield from db.execute(query)
        finally:
            db.close()
        return
    raise OSError(f"cannot read {path} as an SQLite response cache")


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def record_body(key: str, model: str, request: Any, response: Any, created: float) -> str:
    """One record's body: the response's canonical JSON, a tab, the rest (same text whether new or migrated)."""
    meta = {"created": created, "key": key, "model": model, "request": request}
    return f"{_canonical(response)}\t{_canonical(meta)}"


def parse_response(body: bytes) -> Any:
    """The response payload of a record body (the part before the tab)."""
    return json.loads(body[: body.index(b"\t")])


def parse_record(body: bytes) -> dict[str, Any]:
    """The whole record: created, key, model, request and response."""
    response, meta = body.split(b"\t", 1)
    return {**json.loads(meta), "response": json.loads(response)}
