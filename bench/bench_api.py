"""API-path throughput of the LLM layer vs the limit concurrency / latency.

Runs the layer against tests/openai_server.py (its own process, fixed 100 ms latency, no faults) with a
fresh cache per run, so every request is a real HTTP call, and prints calls/s against the ideal rate.

    python -m bench.bench_api [--calls 2000] [--latency 0.1]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from stressprobe.llm import Request, open_client
from tests.support.openai_server import OpenAIServer

TARGET = 0.8


def judging_requests(count: int, tag: str) -> list[Request]:
    """UMBRELA-like judging prompts, distinct per run so nothing is served from a cache."""
    return [
        Request.chat(
            system="You are a search quality rater evaluating the relevance of passages.",
            user=f"Query: topic {i % 50} ({tag})\nPassage: text {i}.\nAnswer with ##final score: <0-3>",
            max_tokens=8,
        )
        for i in range(count)
    ]


def bench_models(base_url: str, concurrency: int, timeout_s: float = 30) -> dict:
    """The registry of one model `bench` on the test server (no key needed)."""
    return {
        "bench": {
            "backend": "openai",
            "model": "test-model",
            "base_url": base_url,
            "api_key_env": "BENCH_UNSET_KEY",
            "concurrency": concurrency,
            "timeout_s": timeout_s,
        }
    }


def measure(base_url: str, concurrency: int, calls: int, cache_dir: Path) -> float:
    """calls/s of one client at `concurrency`, all requests new."""
    models = bench_models(base_url, concurrency)
    requests = judging_requests(calls, f"c{concurrency}")
    with open_client(models, "bench", cache_dir / f"c{concurrency}.sqlite") as client:
        client.generate(judging_requests(concurrency, "warmup"))  # open the connections
        start = time.perf_counter()
        responses = client.generate(requests)
        elapsed = time.perf_counter() - start
    failed = sum(r.error is not None for r in responses)
    if failed:
        raise SystemExit(f"{failed} calls failed; the benchmark needs a clean run")
    return calls / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"API path: {args.calls} calls per setting, server latency {args.latency * 1000:.0f} ms")
    print(f"{'concurrency':>11} {'limit/s':>9} {'layer/s':>9} {'ratio':>7}  target >= {TARGET}")
    with tempfile.TemporaryDirectory() as tmp, OpenAIServer(latency=args.latency, process=True) as server:
        for concurrency in args.concurrency:
            limit = concurrency / args.latency
            rate = measure(server.base_url, concurrency, args.calls, Path(tmp))
            print(f"{concurrency:>11} {limit:>9.1f} {rate:>9.1f} {rate / limit:>7.2f}")


if __name__ == "__main__":
    main()
