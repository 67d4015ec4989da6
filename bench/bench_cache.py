"""Benchmark: the response cache at paper scale (≈ 1M cached responses in many shards).

Builds a cache of synthetic judge responses for a grid of DL20-sized cells (11,340 pairs each; UMBRELA-like
prompts with ~1 KB passages, 5 top log-probabilities per answer), written in the shard format by one writer
per chunk of `--shard-size` responses (not timed). Then it times, on the same cache:

1. opening the cache (reading every shard's key index);
2. one judge cell as a job runs it: open + `Client.generate` of its 11,340 requests, 0 model calls; then
   a cell of 11,340 requests the cache lacks (claims, instant answers, commits) and claims alone, batched
   and one key at a time (claims are files in the shared directory: llm/claims.py);
3. the whole-grid dry cost estimate: `cost.CacheView` + `cost.estimate_cell` of every cell (the functions
   `estimate_cost` runs), which must find every call cached (0 to call); the lookup part is printed apart
   from computing the request keys;

and, with `--reference` (default), the same lookups in the old layout (one SQLite file, the old
`get_many` query), printing the ratio.

    python -m bench.bench_cache [--cells 88] [--shard-size 2000] [--dir DIR] [--no-reference]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sqlite3
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path

from stressprobe.cost import CacheView, estimate_cell
from stressprobe.llm import Request, Response
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.backends.base import Backend
from stressprobe.llm.cache import Claim, ResponseCache, cache_key, request_record
from stressprobe.llm.client import Client
from stressprobe.llm.shards import DATA_SUFFIX, INDEX_SUFFIX, encode_entry, encode_line, record_body

QUERIES, PASSAGES = 54, 210  # 11,340 pairs per cell, as DL20 in the paper
MODELS = ["gpt-4o", "gpt-4o-mini", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-72b", "m7", "m8"]
SYSTEM = "You are a search quality rater evaluating the relevance of passages."
WORDS = [
    "river",
    "bank",
    "interest",
    "rate",
    "flood",
    "plain",
    "policy",
    "water",
    "model",
    "judge",
    "relevance",
    "passage",
    "query",
    "answer",
]


def grid(cells: int) -> list[tuple[str, str, dict, list[Request]]]:
    """(model, condition, registry entry, requests) of `cells` cells; passages shared by every cell."""
    rng = random.Random(0)
    passages = [" ".join(rng.choice(WORDS) for _ in range(170)) for _ in range(QUERIES * PASSAGES)]
    out = []
    for c in range(cells):
        model, condition = MODELS[c % len(MODELS)], f"persona-{c // len(MODELS)}"
        entry = {"backend": "openai", "model": f"{model}-2024"}
        requests = [
            Request.chat(
                system=SYSTEM,
                user=f"[{condition}] Query: q{q}\nPassage: {passages[q * PASSAGES + p]}\n##final score:",
                max_tokens=8,
                logprobs=5,
            )
            for q in range(QUERIES)
            for p in range(PASSAGES)
        ]
        out.append((model, condition, entry, requests))
    return out


def payload(i: int) -> dict:
    tokens = ["##", "final", " score", ":", f" {i % 4}"]
    top = [{t: -0.01, "x": -4.2, "y": -5.1, "z": -6.3, "w": -7.0} for t in tokens]
    return {
        "texts": [f"##final score: {i % 4}"],
        "prompt_tokens": 310,
        "completion_tokens": 5,
        "top_logprobs": top,
    }


def build(directory: Path, cells, shard_size: int, reference: Path | None) -> int:
    """Write every cell's responses into shards of `shard_size` (and the old single file); returns the count."""
    directory.mkdir(parents=True)
    data, index, shard, written = bytearray(), bytearray(), 0, 0
    db = None
    if reference is not None:
        db = sqlite3.connect(reference)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, request TEXT NOT NULL, "
            "response TEXT NOT NULL, created REAL NOT NULL)"
        )

    def flush() -> None:
        nonlocal data, index, shard
        name = f"bench-{shard:05d}-000000000000"
        (directory / f"{name}{DATA_SUFFIX}").write_bytes(data)
        (directory / f"{name}{INDEX_SUFFIX}").write_bytes(index)
        data, index, shard = bytearray(), bytearray(), shard + 1

    for model, _, entry, requests in cells:
        identity = backend_identity(model, entry)
        rows = []
        for request in requests:
            key = cache_key(identity, request)
            record, answer = request_record(identity, request), payload(written)
            line = encode_line(key, record_body(key, model, record, answer, 1.0))
            index += encode_entry(bytes.fromhex(key), len(data), len(line))
            data += line
            written += 1
            if db is not None:
                rows.append((key, model, json.dumps(record), json.dumps(answer), 1.0))
            if written % shard_size == 0:
                flush()
        if db is not None:
            db.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)", rows)
            db.commit()
    if data:
        flush()
    if db is not None:
        db.close()
    return written


class NoCalls(Backend):
    """A backend that counts calls; a rerun from a complete cache must make none."""

    kind = "bench"

    def __init__(self, identity: dict) -> None:
        super().__init__("bench", identity)
        self.calls = 0

    def complete(self, requests: list[Request]) -> list[Response]:
        self.calls += len(requests)
        return [Response(texts=["?"]) for _ in requests]


def old_get_many(db: sqlite3.Connection, keys: list[str]) -> dict[str, dict]:
    """The old layout's lookup, as `ResponseCache.get_many` ran it before shards."""
    found = {}
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), 500):
        chunk = unique[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for key, text in db.execute(f"SELECT key, response FROM responses WHERE key IN ({marks})", chunk):
            found[key] = json.loads(text)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=88, help="judge cells of 11,340 requests (88 ≈ 1M)")
    parser.add_argument("--shard-size", type=int, default=2000, help="responses per shard (one writer each)")
    parser.add_argument(
        "--dir",
        help="where to build the cache, kept and reused by the next run (default: a temporary directory)",
    )
    parser.add_argument("--no-reference", action="store_true", help="skip the old single-file layout")
    args = parser.parse_args()

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-cache-"))
    try:
        t = time.perf_counter()
        cells = grid(args.cells)
        total = sum(len(c[3]) for c in cells)
        print(
            f"grid: {args.cells} cells x {len(cells[0][3])} requests = {total:,} ({time.perf_counter() - t:.1f} s)"
        )
        cache_dir, reference = root / "llm", (None if args.no_reference else root / "old.sqlite")
        if cache_dir.is_dir():
            print(f"reusing the cache built before in {root}")
        else:
            t = time.perf_counter()
            build(cache_dir, cells, args.shard_size, reference)
            print(f"built in {time.perf_counter() - t:.1f} s (not timed below)")
        shards = len(list(cache_dir.glob(f"*{DATA_SUFFIX}")))
        size = sum(p.stat().st_size for p in cache_dir.iterdir())
        idx = sum(p.stat().st_size for p in cache_dir.glob(f"*{INDEX_SUFFIX}"))
        print(
            f"cache: {total:,} responses in {shards} shards ({size / 1e9:.2f} GB; key indexes {idx / 1e6:.0f} MB)"
        )
        rows_out: list[tuple[str, float, float]] = []

        def timed(label: str, fn, *a):
            wall, cpu = time.perf_counter(), time.process_time()
            result = fn(*a)
            rows_out.append((label, time.perf_counter() - wall, time.process_time() - cpu))
            return result

        timed(
            "open the cache (read every key index)", lambda: ResponseCache(cache_dir, read_only=True).close()
        )

        model, _, entry, requests = cells[len(cells) // 2]
        backend = NoCalls(backend_identity(model, entry))

        def judge_cell():
            with Client(model, backend, ResponseCache(cache_dir), price=None) as client:
                return client.generate(requests)

        responses = timed(f"judge cell of {len(requests):,} requests: open + generate", judge_cell)
        assert backend.calls == 0 and all(r.cached for r in responses), "a cached cell made model calls"

        # Claims at this scale: requests the cache lacks, claimed (a link in claims/ each, one index refresh
        # per batch), answered by an instant backend, stored, released; then claims alone. The shards these
        # steps write are removed afterwards, so that a rerun with --dir finds the same cache.
        salt = uuid.uuid4().hex
        fresh = [Request.chat(user=f"fresh {salt} {i}", max_tokens=8) for i in range(len(requests))]
        owners = []

        def fresh_cell():
            with Client(model, backend, ResponseCache(cache_dir), price=None) as client:
                owners.append(client.cache.owner)
                return client.generate(fresh)

        timed(f"new cell of {len(fresh):,} requests: claim, call (instant), store, release", fresh_cell)
        assert backend.calls == len(fresh), "every new request is called once"
        new_keys = [hashlib.sha256(f"claim {salt} {i}".encode()).hexdigest() for i in range(len(fresh))]

        def claim_batch():
            with closing(ResponseCache(cache_dir)) as cache:
                owners.append(cache.owner)
                states = cache.claim_many(new_keys)
                cache.release(new_keys)
            return states

        states = timed(f"  claims alone: {len(new_keys):,} new keys in one batch, then released", claim_batch)
        assert set(states.values()) == {Claim.MINE}
        one_by_one = new_keys[:200]

        def claim_each():
            with closing(ResponseCache(cache_dir)) as cache:
                owners.append(cache.owner)
                for key in one_by_one:
                    assert cache.claim(key) is Claim.MINE
                cache.release(one_by_one)

        timed(f"  claims alone: {len(one_by_one)} keys one at a time (the async path)", claim_each)
        for owner in owners:
            for suffix in (DATA_SUFFIX, INDEX_SUFFIX):
                (cache_dir / f"{owner}{suffix}").unlink(missing_ok=True)

        def estimate():
            view = CacheView(cache_dir)
            try:
                return [
                    estimate_cell("judging", "dl20", cond, m, e, reqs, view) for m, cond, e, reqs in cells
                ]
            finally:
                view.close()

        estimate_rows = timed(f"whole-grid dry cost estimate ({total:,} calls)", estimate)
        to_call = sum(r.to_call for r in estimate_rows)
        assert sum(r.cached for r in estimate_rows) == total and to_call == 0, (
            "the estimate found uncached calls"
        )
        all_keys = [cache_key(backend_identity(m, e), r) for m, _, e, reqs in cells for r in reqs]
        cell_keys = [cache_key(backend.identity, r) for r in requests]

        def new_lookups(keys):
            with closing(ResponseCache(cache_dir, read_only=True)) as cache:
                return cache.contains_many(keys)

        found = timed("  its cache part: open + which of the grid's keys are cached", new_lookups, all_keys)
        assert len(found) == total

        print(f"\n{'step (shards)':<64}{'wall s':>8}{'CPU s':>8}")
        for label, wall, cpu in rows_out:
            print(f"{label:<64}{wall:>8.2f}{cpu:>8.2f}")
        print(
            f"{'model calls made by the cell / calls the estimate says to make':<64}{backend.calls:>8}{to_call:>8}"
        )

        if reference is not None and reference.is_file():

            def old_lookups(keys):
                with closing(sqlite3.connect(reference)) as db:
                    return old_get_many(db, keys)

            def new_get_many(keys):
                with closing(ResponseCache(cache_dir, read_only=True)) as cache:
                    return cache.get_many(keys)

            rows_out.clear()
            old_cell = timed("old", old_lookups, cell_keys)
            new_cell = timed("new", new_get_many, cell_keys)
            assert new_cell == old_cell
            old_grid = timed("old", old_lookups, all_keys)
            new_grid = timed("new", new_lookups, all_keys)
            assert len(old_grid) == len(new_grid) == total
            (_, ocw, occ), (_, ncw, ncc), (_, ogw, ogc), (_, ngw, ngc) = rows_out
            print(f"\n{'open + look up, same keys':<40}{'old SQLite':>16}{'shards':>16}{'old/new':>9}")
            print(f"{'':<40}{'wall s   CPU s':>16}{'wall s   CPU s':>16}{'(CPU)':>9}")
            print(
                f"{'one cell, get_many (answers)':<40}{ocw:>8.2f}{occ:>8.2f}{ncw:>8.2f}{ncc:>8.2f}{occ / ncc:>9.2f}"
            )
            print(
                f"{'whole grid, which keys are cached':<40}{ogw:>8.2f}{ogc:>8.2f}{ngw:>8.2f}{ngc:>8.2f}{ogc / ngc:>9.2f}"
            )
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
