"""A persona pool at a million rows: records streamed, embedded in resumable chunks, searched exactly.

Nemotron-Personas-USA has about a million records: held as Python dicts and embedded in one pass, the pool
job ran for hours with nothing to resume from (issue 31). Here the records are read one at a time, their
pool entries cut into chunks of `chunk_size`, and each chunk's entries (`NNNNN.jsonl`) and vectors
(`NNNNN.npy`, written last, atomically) are kept in a work folder beside the job's outputs. A killed or
timed-out job streams the records again (cheap next to embedding), finds the finished chunks by their
entries and embeds only the rest. A manifest keyed by the source, its revision and the model drops chunks of
another configuration. Retrieval reads the vectors memory-mapped in blocks and keeps, per query and role,
exactly the top `k` of the whole pool (`rank_candidates`).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from stressprobe.embedding import save_vectors
from stressprobe.errors import StressprobeError
from stressprobe.io import atomic_target, iter_jsonl, write_jsonl

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
# Pool rows per matrix product in retrieval: 65,536 × 384 float32 = 96 MB, whatever the pool's size.
BLOCK_ROWS = 65536


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def chunk_paths(work: Path, index: int) -> tuple[Path, Path]:
    return work / f"{index:05d}.jsonl", work / f"{index:05d}.npy"


def open_work_dir(work: Path, fingerprint: Mapping[str, Any]) -> None:
    """Create the chunk folder for `fingerprint`; chunks of another configuration are removed."""
    manifest = work / MANIFEST
    if manifest.is_file() and json.loads(manifest.read_text(encoding="utf-8")) != dict(fingerprint):
        log.warning("%s: chunks of another pool configuration removed", work)
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    if not manifest.is_file():
        with atomic_target(manifest) as tmp:
            tmp.write_text(json.dumps(dict(fingerprint), sort_keys=True), encoding="utf-8")


def chunk_done(entries: Sequence[Mapping[str, str]], texts_path: Path, vectors_path: Path) -> bool:
    """Whether a chunk's vectors exist for exactly these entries."""
    if not (vectors_path.is_file() and texts_path.is_file()):
        return False
    stored = [record for _, record in iter_jsonl(texts_path)]
    rows = np.load(vectors_path, mmap_mode="r").shape[0]
    return stored == list(entries) and rows == len(entries)


@dataclass(frozen=True)
class Budget:
    """The pool job's time: `runtime_s` (resources.persona_pool.runtime) counted from `started`
    (`time.monotonic()` when the job began), for about `total` entries (None: unknown, nothing projected)."""

    total: int | None
    runtime_s: float
    started: float


def check_projection(budget: Budget, done: int, rate: float) -> None:
    """At the first chunk embedded: log the job's texts/s and projected time; stop (one line, the finished
    chunk kept) when the projection exceeds the job's runtime, instead of being killed hours later."""
    if budget.total is None:
        log.info("first chunk: %.1f texts/s (the pool's size is unknown: no projection)", rate)
        return
    projected = time.monotonic() - budget.started + max(budget.total - done, 0) / rate
    log.info(
        "first chunk: %.1f texts/s; %d texts projected to take %.1f min (resources.persona_pool.runtime %g min)",
        rate,
        budget.total,
        projected / 60,
        budget.runtime_s / 60,
    )
    if projected > budget.runtime_s:
        raise StressprobeError(
            f"pool job: {rate:.1f} texts/s at its first chunk, so its {budget.total} texts would take about "
            f"{projected / 60:.1f} min, over resources.persona_pool.runtime ({budget.runtime_s / 60:g} min); "
            "raise resources.persona_pool.runtime or give the job a GPU (resources.persona_pool.gpu, "
            "embedding.pool_device); its finished chunks are kept"
        )


def embed_in_chunks(
    entries: Iterable[dict[str, str]],
    work: str | Path,
    chunk_size: int,
    embed: Callable[[list[str]], np.ndarray],
    fingerprint: Mapping[str, Any],
    budget: Budget | None = None,
) -> int:
    """Embed the pool's entries chunk by chunk into `work`, skipping finished chunks; the number of chunks.
    With a `budget`, the first chunk embedded checks the projected time (`check_projection`)."""
    work = Path(work)
    open_work_dir(work, fingerprint)
    count = done = 0
    projected = budget is None
    for index, chunk in enumerate(batched(entries, chunk_size)):
        texts_path, vectors_path = chunk_paths(work, index)
        count, done = index + 1, done + len(chunk)
        if chunk_done(chunk, texts_path, vectors_path):
            log.info("chunk %d (%d personas): embedded before, kept", index, len(chunk))
            continue
        write_jsonl(texts_path, chunk)
        start = time.monotonic()
        save_vectors(vectors_path, embed([entry["text"] for entry in chunk]))
        log.info("chunk %d (%d personas) embedded", index, len(chunk))
        if not projected:
            check_projection(budget, done, len(chunk) / max(time.monotonic() - start, 1e-9))
            projected = True
    return count


def assemble(work: str | Path, chunks: int, pool_path: str | Path, embeddings_path: str | Path) -> int:
    """Concatenate the chunks into `pool.jsonl` and one `.npy` (written through a memory map, so the
    vectors are never all in memory); the number of personas."""
    work = Path(work)
    shapes = [np.load(chunk_paths(work, i)[1], mmap_mode="r").shape for i in range(chunks)]
    rows, dim = sum(s[0] for s in shapes), shapes[0][1]
    with atomic_target(pool_path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for i in range(chunks):
            with open(chunk_paths(work, i)[0], encoding="utf-8") as chunk:
                shutil.copyfileobj(chunk, out)
    with atomic_target(embeddings_path, suffix=".npy") as tmp:
        target = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(rows, dim))
        start = 0
        for i in range(chunks):
            vectors = np.load(chunk_paths(work, i)[1])
            target[start : start + len(vectors)] = vectors
            start += len(vectors)
        target.flush()
        del target
    return rows


# ---- exact top-k retrieval over a memory-mapped pool ---------------------------------------------------


def block_candidates(keys: np.ndarray, k: int) -> np.ndarray:
    """Positions of a row's `k` largest keys and of every key tied with the k-th (so no block cut can drop
    a position the whole pool's stable ranking would keep)."""
    if len(keys) <= k:
        return np.arange(len(keys))
    threshold = np.partition(keys, len(keys) - k)[len(keys) - k]
    return np.flatnonzero(keys >= threshold)


def rank_candidates(
    query_vectors: np.ndarray,
    role_vectors: Mapping[str, np.ndarray],
    pool_vectors: np.ndarray,
    k: int,
    key_of: Mapping[str, Callable[[np.ndarray], np.ndarray]],
    block_rows: int = BLOCK_ROWS,
) -> dict[tuple[int, str], list[tuple[int, float]]]:
    """Per (query position, role): the top `k` pool positions with their cosine, ranked by `key_of[role]`
    of the cosine (largest first, ties in pool order), exactly as a stable sort of the whole pool would.

    `role_vectors[role]` holds one vector per query (the query itself, or its domain's vector).
    """
    found: dict[tuple[int, str], list[tuple[float, int, float]]] = {}
    for start in range(0, len(pool_vectors), block_rows):
        block = np.asarray(pool_vectors[start : start + block_rows], dtype=np.float32)
        for role, vectors in role_vectors.items():
            similarities = vectors @ block.T
            keys = key_of[role](similarities)
            for q in range(len(vectors)):
                for j in block_candidates(keys[q], k):
                    found.setdefault((q, role), []).append(
                        (float(keys[q, j]), start + int(j), float(similarities[q, j]))
                    )
    return {
        slot: [(index, similarity) for _, index, similarity in sorted(items, key=lambda c: (-c[0], c[1]))[:k]]
        for slot, items in found.items()
    }


def read_pool_entries(path: str | Path, positions: Iterable[int]) -> dict[int, dict[str, str]]:
    """The entries of `pool.jsonl` at the given positions, read in one pass without holding the rest."""
    wanted = set(positions)
    entries: dict[int, dict[str, str]] = {}
    for position, (_, record) in enumerate(iter_jsonl(path)):
        if position in wanted:
            entries[position] = record
            if len(entries) == len(wanted):
                break
    return entries
