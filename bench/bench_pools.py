"""A persona pool job's throughput and memory, for sizing the million-row pools (issue 31).

    python -m bench.bench_pools [--n 20000] [--chunk 5000] [--retrieval 1000000] [--device auto]

Embeds `--n` synthetic persona texts (USPersona-shaped: "A persona with the following skills: ...", 8-20
skills each) through the pool job's own path (`iter_pool` → `embed_in_chunks` → `assemble`), then times exact
top-3 retrieval (the three roles of 86 queries) over `--retrieval` random unit vectors memory-mapped from
disk. Prints texts/s, the process's peak resident memory (and the GPU's peak where one is used) and the
retrieval time, and what a run needs to fit config/paper.yaml's `resources.persona_pool` (the texts/s that
`--rows` pool texts need within its runtime, beside the measured rate); bench/RESULTS.md keeps the figures
and the sizing derived from them.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from stressprobe.embedding import cuda_available, load_embedder
from stressprobe.persona.pool_build import assemble, embed_in_chunks
from stressprobe.persona.pools import iter_pool, retrieve

MODEL = "package:all_minilm_l6_v2/model.zip"
PAPER = Path(__file__).resolve().parent.parent / "config" / "paper.yaml"
SKILLS = [
    "project management",
    "negotiation",
    "welding",
    "tax preparation",
    "bread baking",
    "python programming",
    "sailing",
    "wound care",
    "chess strategy",
    "bookkeeping",
    "public speaking",
    "carpentry",
    "grant writing",
    "data analysis",
    "customer service",
    "landscape design",
    "spanish translation",
    "forklift operation",
    "event planning",
    "first aid",
]


def synthetic_records(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        chosen = rng.choice(len(SKILLS), size=int(rng.integers(8, 21)), replace=True)
        yield {"uuid": f"u{i}", "skills_and_expertise_list": [f"{SKILLS[j]} {i % 97}" for j in chosen]}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def paper_fit(rows: int, rate: float, peak_mb: float, resources: dict) -> list[str]:
    """What `rows` pool texts need to fit `resources` (paper.yaml's resources.persona_pool), beside this run."""
    runtime, mem = resources["runtime"], resources["mem_mb"]
    needed = rows / (runtime * 60)
    minutes = rows / rate / 60
    return [
        f"paper.yaml resources.persona_pool: runtime {runtime} min, mem_mb {mem}, gpu {resources.get('gpu', 0)}",
        f"  {rows} texts within {runtime} min need >= {needed:.1f} texts/s (the job's whole time: model load "
        "and streaming included)",
        f"  this run: {rate:.1f} texts/s -> {minutes:.0f} min: {'fits' if minutes <= runtime else 'does NOT fit'}; "
        f"peak RSS {peak_mb:.0f} MB: {'fits' if peak_mb <= mem else 'does NOT fit'}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--chunk", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--retrieval", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=86)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--rows", type=int, default=1_000_000, help="pool texts to size for (Nemotron: 1M)")
    args = parser.parse_args()
    gpu = args.device == "cuda" or (args.device == "auto" and cuda_available())
    embedder = load_embedder(MODEL, args.batch, threads=args.threads, device="cuda" if gpu else "cpu")
    print(
        f"device {'cuda' if gpu else 'cpu'}, threads {args.threads}, batch {args.batch}, load {os.getloadavg()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        entries = iter_pool(synthetic_records(args.n), "uspersona", "synthetic")
        chunks = embed_in_chunks(entries, work / "chunks", args.chunk, embedder.embed, {"bench": args.n})
        rows = assemble(work / "chunks", chunks, work / "pool.jsonl", work / "embeddings.npy")
        seconds = time.perf_counter() - start
        print(f"embedded {rows} texts in {seconds:.1f} s: {rows / seconds:.1f} texts/s")
        print(f"1M texts at this rate: {1e6 / (rows / seconds) / 60:.0f} min")
        print(f"peak RSS after embedding: {peak_rss_mb():.0f} MB")
        resources = yaml.safe_load(PAPER.read_text(encoding="utf-8"))["resources"]["persona_pool"]
        print("\n".join(paper_fit(args.rows, rows / seconds, peak_rss_mb(), resources)))
        if gpu:
            import torch

            print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**20:.0f} MB")
        rng = np.random.default_rng(1)
        path = work / "random.npy"
        vectors = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(args.retrieval, 384))
        for s in range(0, args.retrieval, 100_000):
            block = rng.normal(size=(min(100_000, args.retrieval - s), 384)).astype(np.float32)
            vectors[s : s + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
        vectors.flush()
        del vectors
        pool_vectors = np.load(path, mmap_mode="r")
        queries = rng.normal(size=(args.queries, 384)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        qids = [str(i) for i in range(args.queries)]
        start = time.perf_counter()
        retrieve(qids, queries, dict.fromkeys(qids, "d"), {"d": queries[0]}, pool_vectors, 3)
        print(
            f"exact top-3 retrieval, 3 roles x {args.queries} queries over {args.retrieval} vectors: "
            f"{time.perf_counter() - start:.1f} s"
        )
        print(f"peak RSS overall: {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
