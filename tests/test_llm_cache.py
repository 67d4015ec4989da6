"""The response cache: keys, hits and misses, claims, concurrent writers and a writer killed mid-write.

Many hosts, the old single-file cache and torn records: tests/test_cache_multihost.py, test_cache_shards.py.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import time

import pytest

from stressprobe.llm import Request, Response, label_distribution
from stressprobe.llm.backends.base import Backend
from stressprobe.llm.cache import Claim, ResponseCache, cache_key, iter_records
from stressprobe.llm.client import Client

IDENTITY = {"backend": "fake", "model": "m"}
FORK = multiprocessing.get_context("fork")


class CountingBackend(Backend):
    """Test double: answers with the prompt reversed and counts the calls it receives."""

    kind = "fake"

    def __init__(self, fail: bool = False) -> None:
        super().__init__("fake", IDENTITY)
        self.calls: list[Request] = []
        self.fail = fail

    def complete(self, requests: list[Request]) -> list[Response]:
        self.calls.extend(requests)
        if self.fail:
            return [Response.failure("boom") for _ in requests]
        return [
            Response(texts=[r.messages[-1][1][::-1]] * r.n, prompt_tokens=3, completion_tokens=2)
            for r in requests
        ]


def make_client(tmp_path, backend=None) -> Client:
    return Client("fake", backend or CountingBackend(), ResponseCache(tmp_path / "c.sqlite"), price=None)


def test_key_depends_on_every_decoding_field_but_not_on_int_vs_float():
    base = Request.chat(user="q")
    keys = {
        cache_key(IDENTITY, r)
        for r in [
            base,
            Request.chat(user="q", seed=1),
            Request.chat(user="q", n=2),
            Request.chat(user="q", temperature=0.5),
            Request.chat(user="q", top_p=0.9),
            Request.chat(user="q", max_tokens=65),
            Request.chat(user="q", logprobs=5),
            Request.chat(user="q", stop=("x",)),
            Request.chat(system="s", user="q"),
        ]
    }
    assert len(keys) == 9
    assert cache_key(IDENTITY, Request.chat(user="q", temperature=0)) == cache_key(IDENTITY, base)
    assert cache_key({"backend": "fake", "model": "other"}, base) != cache_key(IDENTITY, base)


def test_miss_then_hit_and_usage(tmp_path):
    backend = CountingBackend()
    requests = [Request.chat(user=f"q{i}") for i in range(5)]
    with make_client(tmp_path, backend) as client:
        first = client.generate(requests)
        second = client.generate(requests)
        client.write_usage(tmp_path / "u.json")
    assert len(backend.calls) == 5
    assert [r.text for r in first] == [r.text for r in second] == [f"q{i}"[::-1] for i in range(5)]
    assert not any(r.cached for r in first) and all(r.cached for r in second)
    usage = json.loads((tmp_path / "u.json").read_text())
    assert (usage["calls_made"], usage["cache_hits"], usage["errors"]) == (5, 5, 0)
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["cost_usd"]) == (15, 10, 0)


def test_cache_survives_reopen_and_serves_another_client(tmp_path):
    with make_client(tmp_path) as client:
        client.generate([Request.chat(user="abc")])
    backend = CountingBackend()
    with make_client(tmp_path, backend) as client:
        (response,) = client.generate([Request.chat(user="abc")])
    assert backend.calls == [] and response.cached and response.text == "cba"


def test_distinct_seeds_and_n_are_separate_entries_and_duplicates_run_once(tmp_path):
    backend = CountingBackend()
    requests = [Request.chat(user="q", seed=s, temperature=0.7) for s in range(3)] + [
        Request.chat(user="q", n=2),
        Request.chat(user="q", n=2),
    ]
    with make_client(tmp_path, backend) as client:
        responses = client.generate(requests)
        assert client.cache.count() == 4
    assert len(backend.calls) == 4
    assert [len(r.texts) for r in responses] == [1, 1, 1, 2, 2]
    assert responses[4].cached and not responses[3].cached


def test_errors_are_never_cached(tmp_path):
    backend = CountingBackend(fail=True)
    with make_client(tmp_path, backend) as client:
        (first,) = client.generate([Request.chat(user="q")])
        (second,) = client.generate([Request.chat(user="q")])
        assert client.cache.count() == 0
        assert client.usage.errors == 2
    assert first.error == "boom" and second.error == "boom" and first.texts == []
    assert len(backend.calls) == 2


def _dead_pid() -> int:
    child = FORK.Process(target=lambda: None)
    child.start()
    child.join()  # reaped: the pid no longer names a live process
    return child.pid


def _claim_file(cache: ResponseCache, key: str, owner: str, host: str, pid: int) -> None:
    """A claim as another owner left it (a file of its own, so its mtime never changes)."""
    (cache.directory / "claims").mkdir(exist_ok=True)
    (cache.directory / "claims" / key).write_text(f"{owner} {host} {pid}\n")


def test_claims_busy_for_live_owner_and_taken_over_when_owner_dead_or_expired(tmp_path):
    path = tmp_path / "c"
    mine, other = ResponseCache(path, lease_s=0.5), ResponseCache(path, lease_s=0.5)
    key = "a" * 64
    assert mine.claim(key) is Claim.MINE
    assert other.claim(key) is Claim.BUSY  # a live owner (this process, heartbeat running)
    mine.put(key, "m", {}, {"texts": ["x"]})
    mine._flush(wait=True)  # the claim goes HOLD_S after the shard is synced (the heartbeat thread does it)
    # Claims are files in the shared directory, one per in-flight key; none is left once answered.
    assert not (path / "claims" / key).exists()
    assert other.claim(key) is Claim.DONE and other.get(key) == {"texts": ["x"]}
    _claim_file(mine, "d" * 64, "dead-owner", mine.host, _dead_pid())
    _claim_file(mine, "e" * 64, "silent-owner", "elsewhere", 1)  # no heartbeat ever changes
    os.link(mine.claims.heartbeat, path / "claims" / ("f" * 64))  # a live owner's claim: its heartbeat
    assert other.claim("d" * 64) is Claim.MINE  # dead owner on this host: at once
    assert other.claim("e" * 64) is Claim.BUSY  # first seen: the lease starts now
    time.sleep(0.3)
    assert other.claim("e" * 64) is Claim.BUSY
    time.sleep(0.4)
    assert other.claim("e" * 64) is Claim.MINE  # silent for a whole lease: taken over
    for _ in range(4):
        assert other.claim("f" * 64) is Claim.BUSY  # its owner's heartbeat keeps changing
        time.sleep(0.25)
    assert other.claims.taken_over == 2
    (path / "claims" / ("f" * 64)).unlink()  # written above by hand: no owner releases it
    mine.close()
    other.close()
    assert not list((path / "claims").iterdir()), "claims and heartbeats outlived their owners"


def _sleeps(monkeypatch) -> list[float]:
    """The seconds of every `time.sleep` call from here on (the real sleep still runs)."""
    calls: list[float] = []
    real = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (calls.append(s), real(s))[1])
    return calls


def _answer_and_close(path, key: str) -> None:
    writer = ResponseCache(path)
    assert writer.claim(key) is Claim.MINE
    writer.put(key, "m", {}, {"texts": ["paid"]})
    writer.close()


def test_a_job_alone_releases_its_claims_at_close_without_waiting(tmp_path, monkeypatch):
    sleeps = _sleeps(monkeypatch)
    _answer_and_close(tmp_path / "c", "a" * 64)
    assert sleeps == []  # no other owner's heartbeat: nobody can be inside the hold's window
    assert not list((tmp_path / "c" / "claims").iterdir())


def test_a_close_holds_the_claims_while_another_owner_could_have_missed_the_answer(tmp_path, monkeypatch):
    path, key = tmp_path / "c", "a" * 64
    # Refreshes only when its claims' rule asks: what it knows of the shards is from its last claim.
    other = ResponseCache(path, refresh_interval_s=3600)
    assert other.claim("b" * 64) is Claim.MINE  # alive: its heartbeat is listed
    sleeps = _sleeps(monkeypatch)
    _answer_and_close(path, key)
    assert len(sleeps) == 1 and sleeps[0] > 0
    assert other.claim(key) is Claim.DONE  # released at once, it would be MINE: paid twice
    other.close()


def test_an_owner_that_starts_after_a_close_without_waiting_reads_the_shards_before_it_pays(tmp_path):
    path, key = tmp_path / "c", "a" * 64
    other = ResponseCache(path, refresh_interval_s=3600)  # index read at open, no heartbeat yet
    _answer_and_close(path, key)  # alone: released at once
    assert other.claim(key) is Claim.DONE and other.get(key) == {"texts": ["paid"]}
    other.close()


def _key(i: int) -> str:
    return f"{i:064x}"


def _write_many(path: str, start: int, count: int) -> None:
    cache = ResponseCache(path)
    for i in range(start, start + count):
        key = _key(i)
        if cache.claim(key) is Claim.MINE:
            cache.put(key, "m", {"i": i}, {"texts": [f"t{i}"]})
    cache.close()


def test_two_processes_writing_concurrently(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ResponseCache(path).close()
    writers = [FORK.Process(target=_write_many, args=(path, start, 300)) for start in (0, 200)]  # 100 overlap
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert [w.exitcode for w in writers] == [0, 0]
    rows = {r["key"]: r for r in iter_records(path)}
    assert len(rows) == 500
    assert all(rows[_key(i)]["response"]["texts"] == [f"t{i}"] for i in range(500))
    cache = ResponseCache(path)
    assert cache.count() == 500
    cache.close()
    assert not list((tmp_path / "c" / "claims").iterdir()), "claims outlived the writers"


def _write_forever(path: str) -> None:
    _write_many(path, 0, 10**9)


def test_writer_killed_mid_write_leaves_a_readable_cache(tmp_path):
    path = str(tmp_path / "c.sqlite")
    for _ in range(3):
        writer = FORK.Process(target=_write_forever, args=(path,))
        writer.start()
        time.sleep(0.4)
        os.kill(writer.pid, signal.SIGKILL)
        writer.join()
    rows = iter_records(path)
    assert len(rows) > 10
    assert all(r["response"]["texts"] == [f"t{int(r['key'], 16)}"] for r in rows)
    # The dead writers' claims do not block a new writer.
    _write_many(path, 0, len(rows) + 5)
    cache = ResponseCache(path, read_only=True)
    assert cache.count() == len(rows) + 5
    cache.close()


def test_unwritable_cache_is_a_one_line_error(tmp_path):
    from stressprobe.errors import StressprobeError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StressprobeError, match="cache.path") as info:
        ResponseCache(blocker / "c.sqlite")
    assert "\n" not in str(info.value)


def test_request_validation_and_label_distribution():
    with pytest.raises(ValueError):
        Request.chat(user="q", n=0)
    with pytest.raises(ValueError):
        Request.chat(user="q", logprobs=21)
    assert Request.chat(user="q", stop=["a"]).stop == ("a",)
    assert label_distribution(None) is None
    assert label_distribution([{"Hello": -0.1}]) is None
    dist = label_distribution([{"The": -0.1}, {" 2": -0.5, "3": -1.5, "x": -0.2}, {"0": 0.0}])
    assert sum(dist.values()) == pytest.approx(1.0)
    assert dist["2"] / dist["3"] == pytest.approx(math.exp(-0.5) / math.exp(-1.5))
    assert dist["0"] == dist["1"] == 0.0
