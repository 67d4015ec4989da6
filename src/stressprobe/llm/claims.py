"""Claims: one job pays for each in-flight request, across every host that shares the cache directory.

Each owner (one job's cache) first writes its heartbeat `claims/<owner>.alive` (created with O_EXCL:
owner id, host, pid). To claim a key it hard-links that file as `claims/<key>`: link() fails if the name
exists, atomically on a local file system and on NFS, so exactly one job wins, and a claim is never seen
half-written. Another job that finds the link waits instead of paying. The owner removes it once the answer
is durably in its shard (fsync first, so whoever then finds no claim finds the answer). At close the owner
releases every claim at once when no other owner's live heartbeat is listed, and otherwise holds them for the
cache's HOLD_S (stressprobe.llm.cache), so that an owner that refreshed its index just before the last sync
cannot claim and pay again; an owner whose heartbeat is newer than its last index refresh re-reads it first.

Liveness is a lease, not a lock: a background thread touches the heartbeat every lease/4 seconds, and since
every claim is a link to that one inode, a claim's mtime is its owner's last beat. A waiter judges a claim
stale when that mtime has not changed for `lease_s` seconds of the waiter's own monotonic clock (no clock is
compared across hosts), at once when the owner is a dead process of this host, and at once when the mtime is
two leases old by the waiter's clock (a rerun long after a node died; clocks of a cluster's hosts agree to
far better than a lease). It takes a stale claim over by renaming the file to a name of its
own (of two hosts renaming one file, one succeeds), checking that it moved the stale owner's claim (else it
links a fresher one back) and creating the claim anew. So a job killed while holding claims delays the
others by at most the lease, and only its in-flight calls are asked again.

Heartbeats of owners that died are removed by the next owner to start (`sweep`): one silent for two leases
by the clocks (as a claim is then taken over at once), or one of a dead process of this host silent for a
lease; also a take-over's leftover (a killed taker's `.stale-*` file) once its taker's heartbeat is gone. A
removed heartbeat's claims stay links to its inode and are taken over as before; an owner that finds its
own heartbeat removed (it was stalled for two leases) writes it anew.

Every file here is written once, by its creator (claims are links to it); nothing relies on a file lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from stressprobe.llm.shards import audit

log = logging.getLogger(__name__)

CLAIMS_DIR = "claims"
ALIVE_SUFFIX = ".alive"
GRAVE_PREFIX = ".stale-"
LEASE_ENV = "STRESSPROBE_CLAIM_LEASE_S"
# Longer than twice NFS's longest attribute cache (acregmax, 60 s by default): a live owner's heartbeat,
# touched every lease/4, is always seen to change within the lease on another host.
DEFAULT_LEASE_S = 180.0
TICK_S = 1.0  # how often the background thread runs `on_tick` (the cache's sync-then-release)


def lease_seconds() -> float:
    """The claim lease: STRESSPROBE_CLAIM_LEASE_S when set, else the default."""
    raw = os.environ.get(LEASE_ENV)
    if not raw:
        return DEFAULT_LEASE_S
    try:
        lease = float(raw)
    except ValueError:
        lease = -1.0
    if lease <= 0:
        from stressprobe.errors import StressprobeError

        raise StressprobeError(f"{LEASE_ENV}={raw!r}: expected a positive number of seconds")
    return lease


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parse(text: str) -> tuple[str, str, int] | None:
    parts = text.split()
    if len(parts) != 3 or not parts[2].isdigit():
        return None  # damaged
    return parts[0], parts[1], int(parts[2])


class Claims:
    """One owner's claims in `<cache>/claims/`; the heartbeat thread starts at the first claim."""

    def __init__(
        self,
        cache_dir: Path,
        owner: str,
        host: str,
        lease_s: float,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.dir = cache_dir / CLAIMS_DIR
        self.owner, self.host, self.pid = owner, host, os.getpid()
        self.lease_s = lease_s
        self.on_tick = on_tick
        self.heartbeat = self.dir / f"{owner}{ALIVE_SUFFIX}"
        self.held: set[str] = set()
        self.taken_over = 0  # stale claims this owner took over (tests and logs read it)
        self._content = f"{owner} {host} {self.pid}\n"
        self.since = float("inf")  # monotonic time the heartbeat was last written (inf: not yet)
        self._seen: dict[str, tuple[int, float]] = {}  # holder -> (heartbeat mtime, when first seen so)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- this owner --------------------------------------------------------------------------------------
    def _start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_heartbeat()
        self.sweep()
        self._thread = threading.Thread(target=self._beat, name="claims-heartbeat", daemon=True)
        self._thread.start()

    def _write_heartbeat(self) -> None:
        audit(self.heartbeat, self.owner)
        fd = os.open(self.heartbeat, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, self._content.encode())
        finally:
            os.close(fd)
        # Once the file exists: an index refresh after this moment follows any owner's look for it.
        self.since = time.monotonic()

    def _heartbeat_back(self) -> None:
        """Our heartbeat was swept as an orphan (this owner stalled for two leases): write it anew."""
        log.warning("claims: heartbeat %s was removed as an orphan; writing it anew", self.heartbeat.name)
        with contextlib.suppress(FileExistsError):
            self._write_heartbeat()

    def _beat(self) -> None:
        touched = time.monotonic()
        while not self._stop.wait(min(TICK_S, self.lease_s / 4)):
            try:
                if time.monotonic() - touched >= self.lease_s / 4:
                    try:
                        os.utime(self.heartbeat)
                    except FileNotFoundError:
                        self._heartbeat_back()
                    touched = time.monotonic()
                if self.on_tick is not None:
                    self.on_tick()
            except Exception as exc:  # noqa: BLE001 - a lost heartbeat only lets others take over
                log.warning("claims heartbeat: %s", exc)

    def _create(self, key: str) -> bool:
        try:
            os.link(self.heartbeat, self.dir / key)
        except FileExistsError:
            return False
        except FileNotFoundError:  # our heartbeat, swept as an orphan
            self._heartbeat_back()
            return self._create(key)
        self.held.add(key)
        return True

    def try_claim(self, key: str) -> bool:
        """Whether this owner now holds `key` (created, already held, or taken over from a stale owner)."""
        with self._lock:
            if key in self.held:
                return True
            if self._thread is None:
                self._start()
            if self._create(key):
                return True
            path = self.dir / key
            try:
                text = path.read_text()
                mtime = os.stat(path).st_mtime_ns
            except FileNotFoundError:
                return self._create(key)  # released meanwhile
            # A damaged claim is judged like a silent owner: by its mtime.
            holder = _parse(text) or (f"?{key}", "", -1)
            if not self._stale(*holder, mtime):
                return False
            return self._take_over(key, text) and self._create(key)

    def release(self, keys: Iterable[str]) -> None:
        """Give claims up: the answers are durably stored, or the calls failed (others may try)."""
        with self._lock:
            for key in keys:
                if key in self.held:
                    self.held.discard(key)
                    (self.dir / key).unlink(missing_ok=True)

    def close(self) -> None:
        """Release every claim still held, stop the heartbeat and remove it (claims first, heartbeat last)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.release(list(self.held))
        if self._thread is not None:
            self.heartbeat.unlink(missing_ok=True)
            self._thread = None

    # --- other owners ------------------------------------------------------------------------------------
    def others_alive(self) -> bool:
        """Whether the directory lists a heartbeat not ours, other than a dead process's of this host.

        An owner that is not listed wrote its heartbeat later, so every answer synced before this call is
        in the index refreshes its claims rely on (see `ResponseCache.claim_many`)."""
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return False
        for entry in entries:
            if not entry.name.endswith(ALIVE_SUFFIX) or entry.name == self.heartbeat.name:
                continue
            try:
                holder = _parse(Path(entry.path).read_text())
            except FileNotFoundError:
                continue  # its owner closed meanwhile
            if holder is None or holder[1] != self.host or pid_alive(holder[2]):
                return True
        return False

    def sweep(self) -> int:
        """Remove the heartbeats of dead owners, then the take-over leftovers of takers without a heartbeat;
        return how many files went. Never this owner's own, never one that beat within the lease."""
        removed = 0
        now = time.time()
        for path in sorted(self.dir.glob(f"*{ALIVE_SUFFIX}")):
            if path == self.heartbeat:
                continue
            try:
                text, mtime = path.read_text(), os.stat(path).st_mtime_ns
            except FileNotFoundError:
                continue  # its owner closed, or another sweep took it
            if self._orphan(_parse(text), now - mtime / 1e9):
                path.unlink(missing_ok=True)
                removed += 1
        for grave in self.dir.glob(f"{GRAVE_PREFIX}*"):
            # `.stale-<key>-<taker>`: a live taker has its heartbeat (made before any take-over).
            taker = grave.name[len(GRAVE_PREFIX) :].partition("-")[2]
            if not (self.dir / f"{taker}{ALIVE_SUFFIX}").exists():
                grave.unlink(missing_ok=True)
                removed += 1
        if removed:
            log.info("claims: removed %d files of dead owners", removed)
        return removed

    def _orphan(self, holder: tuple[str, str, int] | None, silent_s: float) -> bool:
        """A heartbeat silent for two leases, or for one when it is a dead process's of this host."""
        if silent_s > 2 * self.lease_s:
            return True
        dead_here = holder is not None and holder[1] == self.host and not pid_alive(holder[2])
        return dead_here and silent_s > self.lease_s

    def _stale(self, holder: str, host: str, pid: int, mtime: int) -> bool:
        if host == self.host and not pid_alive(pid):
            return True
        if time.time() - mtime / 1e9 > 2 * self.lease_s:
            return True  # silent for two leases by the clocks (a rerun long after its owner died)
        now = time.monotonic()
        seen = self._seen.get(holder)
        if seen is None or seen[0] != mtime:
            self._seen[holder] = (mtime, now)
            return False
        return now - seen[1] >= self.lease_s

    def _take_over(self, key: str, stale_text: str) -> bool:
        """Move the stale claim out of the way; False when what moved was a fresher claim (put back)."""
        path = self.dir / key
        grave = self.dir / f"{GRAVE_PREFIX}{key}-{self.owner}"
        try:
            os.rename(path, grave)
        except FileNotFoundError:
            return True  # removed meanwhile: free to create
        try:
            moved = grave.read_text()
            if moved != stale_text:  # another host took it over first and claimed it afresh
                with contextlib.suppress(FileExistsError):
                    os.link(grave, path)
                return False
        finally:
            grave.unlink(missing_ok=True)
        self.taken_over += 1
        log.warning("response cache: took over the stale claim on %s of %s", key[:12], stale_text.split()[0])
        return True
