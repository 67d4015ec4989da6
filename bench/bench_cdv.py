"""CDV search: model requests per expansion vs the reference design's 2 + 2n per child.

The study's public code makes, per child, one proxy generation, one semantic check, and n victim calls each
followed by an answer-extraction call: 2 + 2n requests (and 2n for a root), and 2 more per re-prompt of a
rejected child. This search sends one proxy request, one semantic check (skipped when the length bound
fails) per try, and ONE victim request with `n` samples (plus, with the opt-in greedy audit, one greedy
request per success). Both counts are taken on the same search tree, grown under the authors' code limits
(10 expansions per question) so that the tree matches the earlier measurements.

    python -m bench.bench_cdv                      # scripted victim (rule-based, no model)
    python -m bench.bench_cdv --model smollm2-135m # the local model (slow: 2 questions, fresh cache)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from stressprobe.cdv.questions import prepare_questions
from stressprobe.cdv.search import SearchSettings, run_search, search_records, summarize_search
from stressprobe.llm import Response

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "cdv" / "MMLU.json"
DEMO = Path(__file__).resolve().parents[1] / "resources" / "demo" / "cdv" / "MMLU.json"


class RuleModel:
    """Answers by rule from a hash of the prompt: varied success rates, never a model call."""

    def generate(self, requests):
        return [self._answer(r) for r in requests]

    def _answer(self, request):
        user = request.messages[-1][1]
        digest = int(hashlib.sha256(user.encode()).hexdigest(), 16)
        system = request.messages[0][1]
        if "background text" in system:
            return Response(
                texts=[f"Background note {digest % 1000}."], prompt_tokens=100, completion_tokens=20
            )
        if "check exam questions" in system:
            return Response(texts=["No"], prompt_tokens=80, completion_tokens=1)
        correct = digest % (request.n + 2)  # 0..n+1 correct samples, clipped to n
        texts = ["Answer: A"] * min(correct, request.n) + ["Answer: B"] * (
            request.n - min(correct, request.n)
        )
        return Response(texts=texts, prompt_tokens=120, completion_tokens=40 * request.n)


def reference_requests(records, samples: int) -> int:
    """Requests the reference design makes for the same tree: 2 + 2n per child, 2n per root."""
    roots = sum(1 for r in records if r["depth"] == 0 and r["success_rate"] is not None)
    children = sum(1 for r in records if r["depth"] > 0)
    reprompts = sum(max(0, len(r.get("attempts") or []) - 1) for r in records)
    return roots * 2 * samples + children * (2 + 2 * samples) + 2 * reprompts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default=None, help="registry model of config/config.yaml (default: scripted)"
    )
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    source = DEMO if DEMO.exists() else SHARED
    questions = prepare_questions("MMLU", str(source), None, None, "test", args.questions, seed=42)
    if args.model is None:
        for q in questions:  # the rule model's correct letter is A
            q["choices"].insert(0, q["choices"].pop(q["answer_index"]))
            q["answer_index"] = 0
    settings = SearchSettings(
        samples=args.samples,
        limits="authors_code",
        max_expansions=10,
        victim_max_tokens=64,
        proxy_max_tokens=64,
    )
    start = time.perf_counter()
    if args.model is None:
        model = RuleModel()
        states = run_search(questions, {"proxy": model, "semantic": model, "victim": model}, settings)
    else:
        import yaml

        from stressprobe.llm import open_client

        models = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())[
            "models"
        ]
        with (
            tempfile.TemporaryDirectory() as tmp,
            open_client(models, args.model, f"{tmp}/cache.sqlite") as client,
        ):
            states = run_search(questions, {"proxy": client, "semantic": client, "victim": client}, settings)
    elapsed = time.perf_counter() - start
    records = search_records(states)
    summary = summarize_search(records, {})
    expansions = summary["expansions"]
    ours = summary["requests_total"]
    reference = reference_requests(records, args.samples)
    result = {
        "model": args.model or "scripted",
        "questions": len(questions),
        "samples_n": args.samples,
        "expansions": expansions,
        "children": sum(1 for r in records if r["depth"] > 0),
        "requests_ours": ours,
        "requests_reference": reference,
        "requests_per_expansion_ours": ours / expansions if expansions else None,
        "requests_per_expansion_reference": reference / expansions if expansions else None,
        "ratio_reference_over_ours": reference / ours if ours else None,
        "seconds": round(elapsed, 2),
    }
    print(json.dumps(result, indent=2))
    return 0 if result["ratio_reference_over_ours"] and result["ratio_reference_over_ours"] >= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
