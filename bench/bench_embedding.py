"""Wall time of one embedding job's process: sentence-transformers vs the numpy fast path (issue 11).

Every rule that embeds text (persona_pool, select_personas, domain_agreement, query_domains, cdv_classifier)
is a fresh Python process that imports the libraries, loads all-MiniLM-L6-v2 and embeds a few dozen texts.
Each side runs as such a process, timed from outside from start to exit, embedding the 72 PersonaHub
personas of the demo (`resources/demo/personas/personahub.jsonl`) with the model already extracted:

1. sentence-transformers: `Embedder(SentenceTransformer(folder))`, what `load_embedder` did before;
2. fast path: `load_embedder(...)`, which runs the model in numpy (`stressprobe.bert_encoder`).

    python -m bench.bench_embedding [--rounds 3]

One untimed process per side first warms the file cache; then the sides alternate (ABBA), so a machine
whose speed drifts favours neither. The largest difference between the two sides' vectors is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import abba
from stressprobe.embedding import Embedder, load_embedder, resolve_model_dir

ROOT = Path(__file__).resolve().parents[1]
PERSONAS = ROOT / "resources" / "demo" / "personas" / "personahub.jsonl"
MODEL = "package:all_minilm_l6_v2/model.zip"
SIDES = ("sentence-transformers", "fast path")


def personas() -> list[str]:
    return [json.loads(line)["persona"] for line in PERSONAS.read_text(encoding="utf-8").splitlines()]


def embed_personas(side: str) -> np.ndarray:
    """What one job does on `side`: import, load the model, embed the personas."""
    if side == "fast path":
        return load_embedder(MODEL).embed(personas())
    from sentence_transformers import SentenceTransformer

    return Embedder(SentenceTransformer(str(resolve_model_dir(MODEL)), device="cpu")).embed(personas())


def timed_process(side: str, out: Path) -> float:
    """Seconds of wall time of a fresh interpreter running `embed_personas(side)`, vectors saved to `out`."""
    command = [sys.executable, "-m", "bench.bench_embedding", "--side", side, "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed processes per side, in ABBA order")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a timed child process
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        np.save(args.out, embed_personas(args.side))
        return
    resolve_model_dir(MODEL)  # extracted once, outside the timed processes
    print(f"{len(personas())} personas, {MODEL}, one fresh process per job")
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.1f}")
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        out = {side: Path(tmp) / f"{index}.npy" for index, side in enumerate(SIDES)}
        for side in SIDES:
            timed_process(side, out[side])  # warms the file cache
        for side in abba(SIDES, args.rounds):
            times[side].append(timed_process(side, out[side]))
            print(f"{side:<24}{times[side][-1]:>8.2f} s", flush=True)
        difference = np.abs(np.load(out[SIDES[0]]) - np.load(out[SIDES[1]])).max()
    print(f"load average (1 min) at end: {os.getloadavg()[0]:.1f}")
    old, new = (sum(times[side]) / len(times[side]) for side in SIDES)
    print(f"mean wall s per process over {args.rounds} rounds: {SIDES[0]} {old:.2f}, {SIDES[1]} {new:.2f}")
    print(f"ratio {SIDES[1]} / {SIDES[0]}: {new / old:.2f} ({old - new:.2f} s saved per job)")
    print(f"largest difference between the sides' vectors: {difference:.1e}")


if __name__ == "__main__":
    main()
