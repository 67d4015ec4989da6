"""A million-row pool's machinery at test size: a pool job killed mid-way resumes at its last finished chunk
with the uninterrupted result, and retrieval over memory-mapped blocks is the exact stable top-k."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from stressprobe.embedding import load_embedder
from stressprobe.errors import StressprobeError
from stressprobe.persona.pool_build import Budget, assemble, chunk_paths, embed_in_chunks
from stressprobe.persona.pools import USPERSONA_PREFIX, iter_pool, pool_size, read_persona_records, retrieve
from tests.support.helpers import ROOT, make_workdir, run_snakemake, snakemake_command, workflow_env

MODEL = "package:all_minilm_l6_v2/model.zip"
CHUNK = 10
RECORDS = 160
FINGERPRINT = {"source": "test", "model": MODEL}
# The pool job's library calls, in a process the test can SIGKILL.
DRIVER = """
import sys
from stressprobe.embedding import load_embedder
from stressprobe.persona.pool_build import embed_in_chunks
from stressprobe.persona.pools import iter_pool, read_persona_records
pool, work, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
embedder = load_embedder(sys.argv[4], threads=1)
entries = iter_pool(read_persona_records(pool), "uspersona", pool)
embed_in_chunks(entries, work, chunk, embedder.embed, {"source": "test", "model": sys.argv[4]})
"""


@pytest.fixture
def pool_file(tmp_path):
    skills = ["welding", "tax law", "baking", "python", "sailing", "nursing", "chess", "accounting"]
    path = tmp_path / "pool.jsonl"
    with open(path, "w") as handle:
        for i in range(RECORDS):
            chosen = [skills[(i * 3 + j) % len(skills)] for j in range(1 + i % 4)]
            handle.write(
                json.dumps({"uuid": f"u{i}", "skills_and_expertise": f"{' and '.join(chosen)} {i}"}) + "\n"
            )
    return path


def test_a_killed_pool_job_resumes_at_its_last_chunk_with_the_same_result(tmp_path, pool_file):
    work = tmp_path / "chunks"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    job = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(pool_file), str(work), str(CHUNK), MODEL], env=env, cwd=ROOT
    )
    first = chunk_paths(work, 0)[1]
    deadline = time.monotonic() + 120
    while not first.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    job.send_signal(signal.SIGKILL)
    job.wait()
    assert first.exists(), "the job never finished its first chunk"
    finished = sorted(p.name for p in work.glob("*.npy"))
    chunks = RECORDS // CHUNK
    assert 1 <= len(finished) < chunks, finished  # killed mid-way, not after the end
    kept = {name: (work / name).stat().st_mtime_ns for name in finished}

    embedder = load_embedder(MODEL, threads=1)
    embedded: list[str] = []

    def embed(texts):
        embedded.extend(texts)
        return embedder.embed(texts)

    entries = list(iter_pool(read_persona_records(pool_file), "uspersona", "pool"))
    assert embed_in_chunks(iter(entries), work, CHUNK, embed, FINGERPRINT) == chunks
    # Only the unfinished chunks were embedded again; the finished chunk files were not rewritten.
    assert embedded == [e["text"] for e in entries[len(finished) * CHUNK :]]
    assert {name: (work / name).stat().st_mtime_ns for name in finished} == kept
    assemble(work, chunks, tmp_path / "pool_out.jsonl", tmp_path / "vectors.npy")

    fresh = tmp_path / "fresh"
    embed_in_chunks(iter(entries), fresh, CHUNK, embedder.embed, FINGERPRINT)
    assemble(fresh, chunks, tmp_path / "fresh.jsonl", tmp_path / "fresh.npy")
    resumed = np.load(tmp_path / "vectors.npy")
    assert (tmp_path / "pool_out.jsonl").read_text() == (tmp_path / "fresh.jsonl").read_text()
    np.testing.assert_array_equal(resumed, np.load(tmp_path / "fresh.npy"))
    # …and what one pass over all texts gives (batches differ, so float rounding only).
    np.testing.assert_allclose(resumed, embedder.embed([e["text"] for e in entries]), atol=2e-6)
    assert [json.loads(x)["text"] for x in (tmp_path / "pool_out.jsonl").read_text().splitlines()][:1] == [
        USPERSONA_PREFIX + "welding 0"
    ]


def test_chunks_of_another_configuration_are_not_reused(tmp_path):
    entries = [{"pid": str(i), "text": f"t{i}"} for i in range(4)]
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return np.ones((len(texts), 2), dtype=np.float32) * len(calls)

    embed_in_chunks(iter(entries), tmp_path, 2, embed, {"revision": "a"})
    embed_in_chunks(iter(entries), tmp_path, 2, embed, {"revision": "a"})
    assert len(calls) == 2  # the second run reused both chunks
    embed_in_chunks(iter(entries), tmp_path, 2, embed, {"revision": "b"})
    assert len(calls) == 4
    changed = [{**entries[0], "text": "other"}, *entries[1:]]
    embed_in_chunks(iter(changed), tmp_path, 2, embed, {"revision": "b"})
    assert calls[-1] == ["other", "t1"]  # a chunk whose entries changed is embedded again


@pytest.mark.parametrize("orthogonal", ["least_similar", "nearest_zero"])
def test_blockwise_retrieval_is_the_exact_stable_top_k(orthogonal):
    rng = np.random.default_rng(7)
    pool = rng.normal(size=(53, 8)).astype(np.float32)
    pool[[5, 20, 40, 51]] = pool[3]  # ties across block boundaries keep pool order
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    queries = np.stack([pool[3], -pool[3], rng.normal(size=8).astype(np.float32)])
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    domains = {"A": pool[7], "B": pool[3]}
    qids, query_domains = ["q0", "q1", "q2"], {"q0": "A", "q1": "B", "q2": "B"}
    expected = {}
    for i, q in enumerate(qids):
        s = pool @ queries[i]
        keys = {"query": s, "domain": pool @ domains[query_domains[q]], "orthogonal": -s}
        if orthogonal == "nearest_zero":
            keys["orthogonal"] = -np.abs(s)
        for role, key in keys.items():
            expected[(i, role)] = [int(j) for j in np.argsort(-key, kind="stable")[:3]]
    for block in (7, 1000):
        found = retrieve(qids, queries, query_domains, domains, pool, 3, orthogonal, block_rows=block)
        assert {slot: [j for j, _ in c] for slot, c in found.items()} == expected, block
    assert expected[(0, "query")] == [3, 5, 20]


def pool_config(workdir, pool, **more):
    """workdir/config.yaml: the pool rule's config for one uspersona pool file, in chunks of CHUNK."""
    config = workdir / "config.yaml"
    settings = {
        "embedding": {"pool_chunk": CHUNK, "pool_device": "cpu", "threads": 1},
        "personas": {"sources": {"uspersona": {"kind": "uspersona", "path": str(pool)}}},
    }
    config.write_text(json.dumps({**settings, **more}))
    return config


def test_the_pool_job_killed_by_its_scheduler_resumes_from_its_chunks(tmp_path, pool_file):
    """The persona_pool rule itself: SIGKILL snakemake and its job after the first chunk, rerun the target."""
    workdir = make_workdir(tmp_path / "work")
    config = pool_config(workdir, pool_file)
    target = "results/personas/uspersona/pool.jsonl"
    work = workdir / "results/personas/uspersona/chunks"
    job = subprocess.Popen(
        snakemake_command(workdir, config, target),
        env=workflow_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = chunk_paths(work, 0)[1]
    deadline = time.monotonic() + 300
    while not first.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    finished = len(list(work.glob("*.npy")))
    assert 1 <= finished < RECORDS // CHUNK, finished
    # What a user does after a killed run: unlock, and run the target again.
    run_snakemake(workdir, "--unlock", configfile=config)
    run_snakemake(workdir, target, "--rerun-incomplete", configfile=config)
    log = (workdir / "results/logs/personas/uspersona/pool.log").read_text()
    assert log.count("embedded before, kept") == finished
    assert not work.exists()  # removed once the outputs are complete
    entries = list(iter_pool(read_persona_records(pool_file), "uspersona", "pool"))
    assert [json.loads(line) for line in (workdir / target).read_text().splitlines()] == entries
    vectors = np.load(workdir / "results/personas/uspersona/embeddings.npy")
    expected = load_embedder(MODEL, threads=1).embed([e["text"] for e in entries])
    np.testing.assert_allclose(vectors, expected, atol=2e-6)


def test_a_pool_job_projected_over_its_runtime_stops_at_its_first_chunk_and_keeps_it(tmp_path, caplog):
    entries = [{"pid": str(i), "text": f"t{i}"} for i in range(40)]
    calls = []

    def embed(texts):  # about 1,000 texts/s
        calls.append(len(texts))
        time.sleep(len(texts) / 1000)
        return np.ones((len(texts), 2), dtype=np.float32)

    # 10 texts in ~0.01 s: 2,000,000 texts project to ~33 min, over a 1-minute runtime.
    budget = Budget(2_000_000, 60, time.monotonic())
    with pytest.raises(StressprobeError, match=r"^pool job: \d+\.\d texts/s at its first chunk, so its 2000000 texts "
                       r"would take about \d+\.\d min, over resources\.persona_pool\.runtime \(1 min\)"):  # fmt: skip
        embed_in_chunks(iter(entries), tmp_path / "w", 10, embed, {"s": 1}, budget)
    assert calls == [10] and chunk_paths(tmp_path / "w", 0)[1].is_file()  # stopped at once, its chunk kept
    with caplog.at_level("INFO"):
        assert (
            embed_in_chunks(
                iter(entries), tmp_path / "w", 10, embed, {"s": 1}, Budget(40, 60, time.monotonic())
            )
            == 4
        )
    assert calls == [10, 10, 10, 10]  # resumed after the kept chunk; the projection fits this time
    with caplog.at_level("INFO"):
        embed_in_chunks(
            iter(entries), tmp_path / "u", 40, embed, {"s": 1}, Budget(None, 0.001, time.monotonic())
        )
    assert "texts/s (the pool's size is unknown: no projection)" in caplog.text  # never stops without a size
    assert re.search(r"first chunk: \d+\.\d texts/s; 40 texts projected to take 0\.\d min", caplog.text)


def test_the_pool_job_stops_early_naming_its_runtime_when_the_pool_cannot_fit(tmp_path):
    """The persona_pool rule with a 1-minute runtime and 300,000 records: it stops after its first chunk."""
    pool = tmp_path / "big.jsonl"
    with open(pool, "w") as handle:
        handle.writelines(
            json.dumps({"uuid": f"u{i}", "skills_and_expertise": f"skill {i}"}) + "\n" for i in range(300_000)
        )
    assert pool_size({"path": str(pool), "limit": None}) == 300_000
    assert pool_size({"path": str(pool), "limit": 7}) == 7
    workdir = make_workdir(tmp_path / "work")
    config = pool_config(workdir, pool, resources={"persona_pool": {"mem_mb": 4000, "runtime": 1}})
    proc = run_snakemake(workdir, "results/personas/uspersona/pool.jsonl", configfile=config, check=False)
    assert proc.returncode != 0
    log = (workdir / "results/logs/personas/uspersona/pool.log").read_text()
    assert re.search(r"first chunk: [\d.]+ texts/s; 300000 texts projected to take [\d.]+ min", log)
    (line,) = [x for x in log.splitlines() if "over resources.persona_pool.runtime (1 min)" in x]
    assert "raise resources.persona_pool.runtime or give the job a GPU" in line
    assert sorted(p.name for p in (workdir / "results/personas/uspersona/chunks").glob("*.npy")) == [
        "00000.npy"
    ]
