"""The judging layer's own cost per request at scale, against a server that answers at once.

    python -m bench.bench_scale [--sizes 10000 100000 1000000] [--concurrency 64]

For each size N: one judge cell of N pairs through the whole layer (judge requests built from a template,
the response cache with its claims, the HTTP backend, answer parsing, the judgment records, qrels and usage
sidecar written as the judge job writes them), beside a bare asyncio loop sending the same N request
bodies to the same server with the same concurrency and reading each answer's text. Both talk to
tests/support/openai_server.py in its own process with no latency, so what separates them is the layer's
work per request. Then the layer again with every answer in the cache (a rerun): requests/s, and the time
a rerun of the paper DAG's ~1.2M judge requests takes at that rate. Each side runs in a fresh process, so
its peak memory is its own. Prints one row per size: both throughputs, their ratio, both peaks, the cache's
size, and the cached rerun.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAPER_JUDGE_REQUESTS = 1_200_000
TEMPLATE = (
    "Judge how relevant the passage is to the query, from 0 (not relevant) to 3 (perfectly relevant).\n"
    "Query: {query}\nPassage: {passage}\nAnswer with ##final score: <0-3>"
)
PAIRS_PER_QUERY = 200  # DL20's judged pairs per query, roughly


def pairs(count: int) -> tuple[list[dict], dict[str, str]]:
    """`count` summarized pairs over count/200 queries, each text distinct (nothing repeats)."""
    summaries = [
        {
            "qid": f"q{i // PAIRS_PER_QUERY}",
            "docid": f"d{i}",
            "summary": f"Passage {i} says something about topic {i // PAIRS_PER_QUERY} in a few words.",
            "status": "ok",
        }
        for i in range(count)
    ]
    topics = {s["qid"]: f"what is topic {s['qid']}" for s in summaries}
    return summaries, topics


def run_layer(base_url: str, count: int, concurrency: int, workdir: Path) -> dict:
    """One judge cell of `count` pairs through the layer; seconds from the first request to the last file."""
    from bench.bench_api import bench_models
    from stressprobe.io import write_jsonl
    from stressprobe.llm import open_client
    from stressprobe.persona.data import format_qrels
    from stressprobe.persona.judging import JudgeSettings, judge_cell, judgment_qrels

    summaries, topics = pairs(count)
    personas = dict.fromkeys(topics)
    settings = JudgeSettings(TEMPLATE, max_tokens=8)
    start = time.perf_counter()
    with open_client(bench_models(base_url, concurrency, timeout_s=60), "bench", workdir / "cache") as client:
        records = judge_cell(client, summaries, topics, personas, settings)
        write_jsonl(workdir / "cell.jsonl", records)
        (workdir / "cell.qrels").write_text(format_qrels(judgment_qrels(records)))
        client.write_usage(workdir / "cell.usage.json")
        usage = client.usage_record()
    elapsed = time.perf_counter() - start
    if usage["errors"] or sum(r["status"] != "ok" for r in records):
        raise SystemExit("failed or unparsed answers; the benchmark needs a clean run")
    return {"seconds": elapsed, "calls": usage["calls_made"], "hits": usage["cache_hits"]}


def run_bare(base_url: str, count: int, concurrency: int) -> dict:
    """The same request bodies from a bare asyncio loop: send, read the text, nothing else."""
    import httpx

    from stressprobe.persona.judging import JudgeSettings

    summaries, topics = pairs(count)
    requests = JudgeSettings(TEMPLATE, max_tokens=8).cell_requests(summaries, topics, dict.fromkeys(topics))
    bodies = [
        {"model": "test-model", "messages": r.message_dicts(), "max_tokens": 8, "temperature": 0.0}
        for r in requests
    ]

    async def main() -> int:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        slots = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as http:

            async def one(body: dict) -> int:
                async with slots:
                    reply = await http.post("/chat/completions", json=body)
                    return len(reply.json()["choices"][0]["message"]["content"])

            return sum(await asyncio.gather(*(one(b) for b in bodies)))

    start = time.perf_counter()
    asyncio.run(main())
    return {"seconds": time.perf_counter() - start, "calls": count}


def one_side(args: argparse.Namespace) -> None:
    """A child process: one side at one size; prints its result as JSON with its peak memory."""
    workdir = Path(args.workdir)
    if args.side == "bare":
        result = run_bare(args.base_url, args.size, args.concurrency)
    else:
        result = run_layer(args.base_url, args.size, args.concurrency, workdir)
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def child(side: str, size: int, base_url: str, concurrency: int, workdir: Path) -> dict:
    command = [sys.executable, "-m", "bench.bench_scale", "--side", side, "--size", str(size)]
    command += ["--base-url", base_url, "--concurrency", str(concurrency), "--workdir", str(workdir)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--side", choices=("bare", "layer"), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        one_side(args)
        return
    from tests.support.openai_server import OpenAIServer

    print(
        "size | bare req/s | layer req/s | layer/bare | peak MB bare / layer | cache MB | "
        "cached rerun req/s | 1.2M-request rerun"
    )
    with OpenAIServer(process=True) as server, tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            workdir = Path(tmp) / str(size)
            workdir.mkdir()
            # bare, layer (fresh cache), then the layer again with every answer cached
            bare = child("bare", size, server.base_url, args.concurrency, workdir)
            layer = child("layer", size, server.base_url, args.concurrency, workdir)
            cached = child("layer", size, server.base_url, args.concurrency, workdir)
            assert cached["hits"] == size and cached["calls"] == 0, cached
            bare_rate, layer_rate = size / bare["seconds"], size / layer["seconds"]
            hit_rate = size / cached["seconds"]
            print(
                f"{size:,} | {bare_rate:,.0f} | {layer_rate:,.0f} | {layer_rate / bare_rate:.2f} | "
                f"{bare['peak_mb']:,.0f} / {layer['peak_mb']:,.0f} | {folder_mb(workdir / 'cache'):,.1f} | "
                f"{hit_rate:,.0f} | {PAPER_JUDGE_REQUESTS / hit_rate:,.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
