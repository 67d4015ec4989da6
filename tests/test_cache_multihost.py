"""The response cache with jobs on several hosts sharing one directory (as on a cluster's network file system).

Each job is a separate process with its own host name: a UTS namespace of its own (`unshare --uts`, as
root) where the machine allows it, else the host name injected through STRESSPROBE_HOST. The tests would
catch a shared-writer design: every open of a cache file for writing is seen twice, by sampling the jobs'
/proc/<pid>/fd (+ fdinfo flags) while they run and by the cache's own audit log, and no file may have two
writers. Answers come from a real OpenAI-compatible server on 127.0.0.1 that counts what was paid for:
with the claims in the shared directory (claims.py), each distinct call is paid once, whichever hosts ask.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from stressprobe.llm.cache import HOST_ENV, iter_records
from stressprobe.llm.claims import CLAIMS_DIR, LEASE_ENV
from stressprobe.llm.shards import AUDIT_ENV, decode_line, parse_record
from tests.support.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "support" / "cache_job.py"
KEY_ENV = "STRESSPROBE_TEST_API_KEY"


def _uts_namespaces() -> bool:
    try:
        done = subprocess.run(["unshare", "--uts", "hostname", "probe-host"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


UTS = _uts_namespaces()


class Jobs:
    """Starts cache jobs on named hosts and watches which files each process holds open for writing."""

    def __init__(self, tmp: Path, cache: Path, base_url: str) -> None:
        self.tmp, self.cache, self.base_url = tmp, cache, base_url
        self.audit = tmp / "audit.log"
        self.procs: dict[str, subprocess.Popen] = {}
        self.writers: dict[str, set[int]] = defaultdict(set)  # file -> pids seen holding it open for writing
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def start(self, name: str, host: str, first: int, count: int, **env_extra: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}",
            KEY_ENV: "sk-test-unused",
            AUDIT_ENV: str(self.audit),
            **env_extra,
        }
        job = [sys.executable, str(JOB), str(self.cache), self.base_url, str(first), str(count)]
        job.append(str(self.tmp / f"{name}.json"))
        if UTS:
            # unshare and sh exec into python: the pid is the job's own.
            command = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *job]
        else:
            env[HOST_ENV] = host
            command = job
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs[name] = proc
        return proc

    def _sample(self) -> None:
        cache = str(self.cache)
        while not self._stop.is_set():
            for proc in list(self.procs.values()):
                fd_dir = f"/proc/{proc.pid}/fd"
                try:
                    fds = os.listdir(fd_dir)
                except OSError:
                    continue
                for fd in fds:
                    try:
                        target = os.readlink(f"{fd_dir}/{fd}")
                        if not target.startswith(cache):
                            continue
                        with open(f"/proc/{proc.pid}/fdinfo/{fd}") as fh:
                            flags = int(re.search(r"flags:\s*(\d+)", fh.read()).group(1), 8)
                    except (OSError, AttributeError):
                        continue
                    if flags & os.O_ACCMODE != os.O_RDONLY:
                        self.writers[target].add(proc.pid)
            time.sleep(0.002)

    def wait(self, name: str, timeout: float = 240) -> dict:
        proc = self.procs[name]
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-4000:]
        return json.loads((self.tmp / f"{name}.json").read_text())

    def stop(self) -> None:
        self._stop.set()
        self._sampler.join()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    def audited_writers(self) -> dict[str, set[int]]:
        opened: dict[str, set[int]] = defaultdict(set)
        for line in self.audit.read_text().splitlines():
            pid, _owner, path = line.split(" ", 2)
            opened[path].add(int(pid))
        return opened

    def assert_one_writer_per_file(self) -> None:
        audited = self.audited_writers()
        assert audited, "no cache file was opened for writing"
        assert self.writers, "the /proc sampler saw no cache file open for writing"
        for path, pids in {**audited, **self.writers}.items():
            assert len(audited.get(path, set()) | self.writers.get(path, set())) == 1, (
                f"{path}: writers {pids}"
            )
        # Sampled writes are all audited ones (the audit misses no write-open).
        assert set(self.writers) <= set(audited)
        # Nothing else in the shared directory: no SQLite file, journal, WAL or shared-memory index; the
        # claims directory holds heartbeats and links to them.
        assert {p.suffix for p in self.cache.iterdir() if p.name != CLAIMS_DIR} <= {".jsonl", ".idx"}
        claims = self.cache / CLAIMS_DIR
        assert {p.suffix for p in claims.iterdir() if p.suffix} <= {".alive"}


def pair_index(body_key: str) -> int:
    content = json.loads(body_key)["messages"][-1]["content"]
    return int(re.match(r"pair (\d+):", content).group(1))


def shard_hosts(cache: Path) -> dict[int, list[str]]:
    """For each request index, the hosts of the shards holding its answer (one entry per shard)."""
    hosts: dict[int, list[str]] = defaultdict(list)
    for data in cache.glob("*.jsonl"):
        host = data.name.rsplit("-", 2)[0]
        for line in data.read_bytes().splitlines(keepends=True):
            decoded = decode_line(line)
            if decoded is None:
                break  # the torn last record of a killed job
            record = parse_record(decoded[1])
            hosts[int(re.match(r"pair (\d+):", record["request"]["messages"][-1][1]).group(1))].append(host)
    return hosts


@pytest.mark.timeout(600)
def test_jobs_on_three_hosts_share_one_cache_without_sharing_a_file(tmp_path, capsys):
    cache = tmp_path / "shared" / "llm"
    hosts = ["node-a", "node-b", "node-c"]
    # Six jobs, two per host; job j asks pairs 20j .. 20j+59, so neighbours share 40 of their 60 calls.
    plan = {f"job{j}": (hosts[j % 3], 20 * j, 60) for j in range(6)}
    with OpenAIServer(latency=0.05) as server:
        jobs = Jobs(tmp_path, cache, server.base_url)
        try:
            for name, (host, first, count) in plan.items():
                jobs.start(name, host, first, count)
            results = {name: jobs.wait(name) for name in plan}
        finally:
            jobs.stop()
        paid = Counter({pair_index(body): n for body, n in server.requests.items()})

    assert {r["host"] for r in results.values()} == set(hosts)
    jobs.assert_one_writer_per_file()
    # Every answer is found afterwards, the same that each job got.
    stored = {
        int(re.search(r"pair (\d+):", r["request"]["messages"][-1][1]).group(1)): r
        for r in iter_records(cache)
    }
    assert set(stored) == set(range(160))
    for name, (_, first, count) in plan.items():
        texts = [stored[i]["response"]["texts"][0] for i in range(first, first + count)]
        assert results[name]["texts"] == texts
    # Each paid call is stored (in its payer's shard), and each distinct call is paid once, though 120
    # of them are asked on two or three hosts at once.
    held = shard_hosts(cache)
    asked_by: dict[int, set[str]] = defaultdict(set)
    for host, first, count in plan.values():
        for i in range(first, first + count):
            asked_by[i].add(host)
    for i in range(160):
        assert paid[i] == len(held[i]), f"pair {i}: paid {paid[i]} times, stored {len(held[i])} times"
    assert sum(r["calls_made"] for r in results.values()) == sum(paid.values())
    duplicates = sum(paid.values()) - 160
    shared = sum(len(a) > 1 for a in asked_by.values())
    with capsys.disabled():
        print(
            f"\n[multi-host cache] uts namespaces: {UTS}; 6 jobs on 3 hosts, 160 distinct calls "
            f"({shared} asked on >1 host): {sum(paid.values())} paid, {duplicates} cross-host duplicates; "
            f"calls by times paid: {dict(sorted(Counter(paid.values()).items()))}"
        )
    assert shared == 120
    assert duplicates == 0, (
        f"{duplicates} calls paid more than once: {sorted(i for i in paid if paid[i] > 1)}"
    )
    # Every claim was given up and every heartbeat removed when its job closed.
    assert not list((cache / CLAIMS_DIR).iterdir())


LEASE_S = 2.0  # the kill test's claim lease (the default, minutes, suits a cluster's file system)


@pytest.mark.timeout(600)
def test_kill_9_loses_only_the_calls_in_flight(tmp_path):
    cache = tmp_path / "shared" / "llm"
    lease = {LEASE_ENV: str(LEASE_S)}
    with OpenAIServer(latency=0.05) as server:
        jobs = Jobs(tmp_path, cache, server.base_url)
        try:
            victim = jobs.start("victim", "node-k", 0, 400, **lease)
            jobs.start("neighbour", "node-n", 1000, 120, **lease)  # another host's job, running on
            # Kill once the victim has committed some answers (on a loaded machine that takes a while).
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                shard = [p for p in cache.glob("node-k-*.jsonl") if p.stat().st_size > 20_000]
                if shard:
                    break
                time.sleep(0.01)
            assert shard, "the victim committed nothing within 120 s"
            os.kill(victim.pid, signal.SIGKILL)
            victim.communicate()
            assert victim.returncode == -signal.SIGKILL
            committed = {i for i, held in shard_hosts(cache).items() if i < 400 and "node-k" in held}
            neighbour = jobs.wait("neighbour")
            started = time.monotonic()
            rerun = jobs.start("rerun", "node-r", 0, 400, **lease)
            rerun_result = jobs.wait("rerun")
            rerun_s = time.monotonic() - started
        finally:
            jobs.stop()
        paid = Counter({pair_index(body): n for body, n in server.requests.items()})

    assert rerun.returncode == 0
    jobs.assert_one_writer_per_file()
    assert 0 < len(committed) < 400, "the kill landed after the job had finished"
    # The rerun pays exactly for what the victim had not committed...
    assert rerun_result["calls_made"] == 400 - len(committed)
    # ...so whatever was paid twice was in flight at the kill: at most 4 calls (the job's concurrency).
    in_flight = sum(paid[i] for i in range(400)) - 400
    assert 0 <= in_flight <= 4, in_flight
    # The dead job's claims on those calls held the rerun up for about one lease, not longer: it took them
    # over (a stale heartbeat of another host) instead of waiting for ever.
    assert in_flight <= rerun_result["taken_over"] <= 4, rerun_result["taken_over"]
    assert rerun_s < 60, rerun_s
    assert neighbour["calls_made"] == 120 and len(neighbour["texts"]) == 120
    stored = iter_records(cache)
    assert len(stored) == 520
