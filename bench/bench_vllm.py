"""The workflow's `judge_vllm` job against a bare `vllm.LLM.chat` loop over the same prompts, on real vLLM.

Both run in the real-vLLM environment (tests/support/vllm_env.py: vLLM's CPU build, SmolLM2-135M converted from
the demo's GGUF) with the same engine settings (`engine_args` of one registry entry: eager, a small KV cache,
prefix caching on) on `--queries` x `--passages` pairs of a written judging dataset, under every condition
of `--conditions`, at the job's sampling (temperature 0, `judging.judge_max_tokens`, top-5 log-probabilities):

1. job: `snakemake judge_vllm` from an empty results folder and cache; its generation time is what the job's
   log reports for the model's calls ("finished in"), after its engine load;
2. bare: one engine, the same conversations (read back from the job's cache, in the order they were stored)
   in one `LLM.chat` call, timed; then vLLM's prefix cache is reset and the same conversations are asked
   again in a shuffled order: vLLM's prefix-cache hit rate (its `prefix_cache_hits / prefix_cache_queries`
   counters) with the job's order and with the shuffled one.

    python -m bench.bench_vllm [--rounds 2] [--queries 4] [--passages 6]

The sides alternate over `--rounds` (ABBA, bench.abba); the load average is printed, since on a shared
machine the rates move with it. Target: the job at >= 0.95 of the bare loop's throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench import abba
from stressprobe.llm.cache import iter_records
from tests.support import vllm_env
from tests.support.api_workdir import write_api_config, write_judging_data
from tests.support.helpers import make_workdir, snakemake_command
from tests.support.vllm_real import engine_entry

TARGET = 0.95
CONDITIONS = ["baseline/umbrela", "fixed/gap", "fixed/evidence"]
MAX_TOKENS = 16
LOGPROBS = 5

BARE = """
import json, random, sys, time
import vllm
from stressprobe.llm.serving import engine_args
entry, conversations = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
llm = vllm.LLM(**engine_args(entry), disable_log_stats=False)
params = vllm.SamplingParams(temperature=0, max_tokens=int(sys.argv[3]), logprobs=int(sys.argv[4]))

def counters():
    values = {m.name: m.value for m in llm.get_metrics() if hasattr(m, "value")}
    return values.get("vllm:prefix_cache_queries", 0), values.get("vllm:prefix_cache_hits", 0)

def run(order):
    llm.reset_prefix_cache()
    queries, hits = counters()
    start = time.perf_counter()
    llm.chat(order, sampling_params=params, use_tqdm=False)
    seconds = time.perf_counter() - start
    q, h = counters()
    return seconds, (h - hits) / max(1, q - queries)

seconds, hit_rate = run(conversations)
shuffled = list(conversations)
random.Random(0).shuffle(shuffled)
shuffled_seconds, shuffled_hit_rate = run(shuffled)
print("RESULT", json.dumps({"seconds": seconds, "hit_rate": hit_rate, "shuffled_seconds": shuffled_seconds,
                  "shuffled_hit_rate": shuffled_hit_rate}))
"""


def seconds_of(duration: str) -> float:
    """'1m22s', '52s', '1h02m' (stressprobe.llm.progress.format_duration) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    return float(sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)([hms])", duration)))


def run_job(python: Path, workdir: Path, config: Path) -> float:
    """judge_vllm from scratch; the seconds its log gives for the model's calls."""
    shutil.rmtree(workdir / "results", ignore_errors=True)
    command = snakemake_command(workdir, config, "--resources", "gpu=1", "--forceall")
    command[0] = str(python)
    proc = subprocess.run(command, capture_output=True, text=True, env=vllm_env.job_env())
    if proc.returncode != 0:
        raise SystemExit(f"the judge_vllm run failed:\n{proc.stderr[-4000:]}")
    log = (workdir / "results/logs/judging/tiny/judge/gpu.log").read_text()
    (duration,) = re.findall(r"gpu finished in (\S+):", log)
    return seconds_of(duration)


def job_conversations(workdir: Path) -> list[list[dict[str, str]]]:
    records = iter_records(workdir / "results/cache/llm")
    return [[{"role": r, "content": c} for r, c in record["request"]["messages"]] for record in records]


def run_bare(python: Path, entry: dict, conversations_file: Path) -> dict[str, float]:
    command = [
        str(python),
        "-c",
        BARE,
        json.dumps(entry),
        str(conversations_file),
        str(MAX_TOKENS),
        str(LOGPROBS),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, env=vllm_env.job_env())
    if proc.returncode != 0:
        raise SystemExit(f"the bare loop failed:\n{proc.stderr[-4000:]}")
    (result,) = [
        line for line in proc.stdout.splitlines() if line.startswith("RESULT ")
    ]  # vLLM logs there too
    return json.loads(result.removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--passages", type=int, default=6)
    args = parser.parse_args()
    reason = vllm_env.unsupported()
    if reason:
        raise SystemExit(f"real vLLM cannot run here: {reason}")
    python, model = vllm_env.ensure()
    entry = engine_entry(model)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = make_workdir(Path(tmp) / "w")
        write_judging_data(workdir, queries=args.queries, passages=args.passages)
        config = write_api_config(
            workdir,
            None,
            {
                "models.gpu": entry,
                "judging.models": ["gpu"],
                "judging.conditions": CONDITIONS,
                "judging.judge_max_tokens": MAX_TOKENS,
                "judging.logprobs": LOGPROBS,
                "cdv.enabled": False,
            },
        )
        conversations_file = Path(tmp) / "conversations.json"
        requests = args.queries * args.passages * len(CONDITIONS)
        times: dict[str, list[float]] = {"job": [], "bare": []}
        hits: list[tuple[float, float]] = []
        for side in abba(["job", "bare"], args.rounds):
            if side == "job" or not conversations_file.exists():
                seconds = run_job(python, workdir, config)
                conversations = job_conversations(workdir)
                assert len(conversations) == requests, (len(conversations), requests)
                conversations_file.write_text(json.dumps(conversations))
                if side == "job":
                    times["job"].append(seconds)
                    print(f"job:  {requests / seconds:6.2f} requests/s ({seconds:.1f} s)", flush=True)
                    continue
            bare = run_bare(python, entry, conversations_file)
            times["bare"].append(bare["seconds"])
            hits.append((bare["hit_rate"], bare["shuffled_hit_rate"]))
            print(
                f"bare: {requests / bare['seconds']:6.2f} requests/s ({bare['seconds']:.1f} s); prefix-cache "
                f"hit rate {bare['hit_rate']:.1%} in the job's order, {bare['shuffled_hit_rate']:.1%} "
                f"shuffled ({bare['shuffled_seconds']:.1f} s)",
                flush=True,
            )
    job, bare_s = min(times["job"]), min(times["bare"])
    ratio = bare_s / job  # throughput ratio job/bare
    print(f"\n{requests} requests, {len(CONDITIONS)} conditions; load average {os.getloadavg()[0]:.1f}")
    print(
        f"best of {args.rounds}: job {requests / job:.2f} req/s, bare {requests / bare_s:.2f} req/s, "
        f"job/bare {ratio:.2f} (target >= {TARGET})"
    )
    print(f"prefix-cache hit rate: job order {hits[-1][0]:.1%}, shuffled {hits[-1][1]:.1%}")
    print(f"measured at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    main()
