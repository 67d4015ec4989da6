"""Heartbeats of dead owners (llm/claims.py) are removed by the next owner that starts, only after their
lease; their claims are still taken over, and a live owner whose heartbeat went writes it anew."""

from __future__ import annotations

import multiprocessing
import os
import time

from stressprobe.llm.claims import Claims

FORK = multiprocessing.get_context("fork")
LEASE_S = 30.0


def dead_pid() -> int:
    child = FORK.Process(target=lambda: None)
    child.start()
    child.join()  # reaped: the pid no longer names a live process
    return child.pid


def heartbeat(directory, owner, host, pid, silent_s):
    """A heartbeat as its owner left it, last touched `silent_s` ago."""
    path = directory / f"{owner}.alive"
    path.write_text(f"{owner} {host} {pid}\n")
    then = time.time() - silent_s
    os.utime(path, (then, then))
    return path


def test_only_dead_owners_heartbeats_after_their_lease_are_swept(tmp_path):
    claims_dir = tmp_path / "claims"
    claims_dir.mkdir()
    me = Claims(tmp_path, "me", "here", LEASE_S)
    gone = dead_pid()
    kept = [
        heartbeat(claims_dir, "dead-recent", "here", gone, LEASE_S / 2),  # dead, but within its lease
        heartbeat(claims_dir, "live-elsewhere", "there", 1, LEASE_S * 1.5),  # another host, one lease
        heartbeat(claims_dir, "live-here", "here", os.getpid(), LEASE_S * 1.5),  # a live process
    ]
    swept = [
        heartbeat(claims_dir, "dead-here", "here", gone, LEASE_S * 1.5),
        heartbeat(claims_dir, "silent-elsewhere", "there", 1, LEASE_S * 3),  # silent two leases
    ]
    # A dead owner's claim is a link to its heartbeat: it outlives the heartbeat and is still taken over.
    key = "a" * 64
    os.link(swept[0], claims_dir / key)
    # A take-over killed mid-way leaves `.stale-<key>-<taker>`: removed once its taker's heartbeat is gone.
    orphan_grave = claims_dir / f".stale-{'b' * 64}-dead-here"
    orphan_grave.write_text("x")
    live_grave = claims_dir / f".stale-{'c' * 64}-live-here"
    live_grave.write_text("x")
    assert me.try_claim(key)  # the first claim starts the owner: its heartbeat, then the sweep
    try:
        assert all(path.exists() for path in kept) and not any(path.exists() for path in swept)
        assert not orphan_grave.exists() and live_grave.exists()
        assert me.heartbeat.exists() and me.taken_over == 1
        assert os.stat(claims_dir / key).st_ino == os.stat(me.heartbeat).st_ino  # the claim is ours now
    finally:
        me.close()
    assert not me.heartbeat.exists() and not (claims_dir / key).exists()


def test_an_owner_whose_heartbeat_was_swept_writes_it_anew_and_keeps_claiming(tmp_path):
    me = Claims(tmp_path, "me", "here", LEASE_S)
    try:
        assert me.try_claim("d" * 64)
        me.heartbeat.unlink()  # as a sweep does to an owner stalled for two leases
        assert me.try_claim("e" * 64)
        assert me.heartbeat.read_text().split()[:2] == ["me", "here"]
        assert os.stat(tmp_path / "claims" / ("e" * 64)).st_ino == os.stat(me.heartbeat).st_ino
        other = Claims(tmp_path, "other", "here", LEASE_S)
        try:
            assert not other.try_claim("e" * 64)  # a live owner's claim: busy
        finally:
            other.close()
    finally:
        me.close()
    assert not list((tmp_path / "claims").iterdir())
