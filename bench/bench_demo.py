"""The demo's wall time against the time its model calls take in a bare llama-cpp-python loop.

    python -m bench.bench_demo [--cores 2] [--keep DIR] [--configfile CONFIG] [--rounds N]

1. Runs the demo (`snakemake --cores 2`, no config: config/config.yaml) in a fresh scratch directory with an
   empty response cache, and times it.
2. Replays every model request the demo made, read back from that run's response cache, in a bare loop:
   one `llama_cpp.Llama` per GGUF file loaded once, each request rendered with the model's chat template
   (plus the prefilled answer start, if any), and generated with the same temperature, top-p, seed, number
   of samples and token limit — the same tokens the workflow generated, with none of its machinery
   (processes, imports, model loads per job, cache, scheduling).
3. Prints both, the ratio demo / bare loop (target <= 1.3) and the load average before and after.

The speed of this kind of machine drifts by 10-20 % within minutes (the same judge cell, alone, took 5.5 s and
8.6 s in two runs a minute apart), more than the gap between the two sides. `--rounds 2` runs demo, bare loop,
bare loop, demo (each demo from an empty directory and cache; the bare loops replay the first demo's requests,
which every run makes alike) and prints the means, so a drift during the runs favours neither side.

`--configfile` runs another (complete) config the same way instead of the demo, e.g. tests/configs/tiny.yaml
for a quick check of the benchmark itself.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import abba
from stressprobe.llm.cache import iter_records

ROOT = Path(__file__).resolve().parents[1]

TARGET_RATIO = 1.3
TARGET_WALL_S = 300.0


def run_demo(workdir: Path, cores: int, configfile: Path | None) -> float:
    """Run the whole demo (or `configfile`) in `workdir`, a fresh directory seeing the project's resources/;
    wall seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "resources").symlink_to(ROOT / "resources")
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile")]
    cmd += ["--directory", str(workdir), "--cores", str(cores), "--quiet", "rules"]
    if configfile is not None:
        cmd += ["--configfile", str(configfile.resolve())]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"the demo failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return wall


def cached_requests(cache_dir: Path) -> list[tuple[dict, dict, dict]]:
    """(model identity, request record, response payload) of every answer in the run's cache, oldest first."""
    records = sorted(iter_records(cache_dir), key=lambda record: record["created"])
    return [(r["request"]["model"], r["request"], r["response"]) for r in records]


def gguf_file(identity: dict, models: dict) -> tuple[Path, dict]:
    """The GGUF file the demo's jobs load (converted, if the entry says so) and the registry entry of a cached
    model identity, found through the demo config."""
    from stressprobe.llm.backends import backend_identity
    from stressprobe.llm.backends.llamacpp import runtime_gguf

    for name, entry in models.items():
        if entry.get("backend") == "llamacpp" and backend_identity(name, entry) == identity:
            return runtime_gguf(name, entry), entry
    raise SystemExit(f"no llamacpp model of the config matches {identity}")


def bare_loop(requests: list[tuple[dict, dict, dict]], models: dict) -> tuple[float, int, int]:
    """Replay the requests with llama-cpp-python alone; (seconds, calls, generated tokens)."""
    import llama_cpp

    llms: dict[str, llama_cpp.Llama] = {}
    formatters = {}
    start = time.perf_counter()
    calls = tokens_out = 0
    for identity, record, _ in requests:
        if identity.get("backend") != "llamacpp":
            continue
        path, entry = gguf_file(identity, models)
        if str(path) not in llms:
            # the model settings the demo's jobs use (the schema's defaults where the config is silent)
            n_ctx, n_threads = int(entry.get("n_ctx", 2048)), int(entry.get("n_threads", 2))
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=n_threads,
                flash_attn=bool(entry.get("flash_attn", False)),
                verbose=False,
                seed=0,
            )
            llms[str(path)] = llm
            formatters[str(path)] = llama_cpp.llama_chat_format.Jinja2ChatFormatter(
                template=llm.metadata["tokenizer.chat_template"],
                eos_token=llm._model.token_get_text(llm.token_eos()),
                bos_token=llm._model.token_get_text(llm.token_bos()),
            )
        llm, formatter = llms[str(path)], formatters[str(path)]
        messages = [{"role": role, "content": content} for role, content in record["messages"]]
        prefill = None
        if messages[-1]["role"] == "assistant":
            prefill = messages.pop()["content"]
        prompt = formatter(messages=messages).prompt + (prefill or "")
        prompt_tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        decoding = record["decoding"]
        samples = 1 if decoding["temperature"] == 0 else decoding["n"]
        for i in range(samples):
            llm.set_seed(decoding["seed"] + i)
            generated = 0
            for token in llm.generate(
                prompt_tokens,
                temp=decoding["temperature"],
                top_p=decoding["top_p"],
                top_k=0,
                min_p=0.0,
                repeat_penalty=1.0,
            ):
                if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                    break
                generated += 1
                if generated >= decoding["max_tokens"]:
                    break
            tokens_out += generated
        calls += 1
    wall = time.perf_counter() - start
    for llm in llms.values():
        llm.close()
    return wall, calls, tokens_out


def main() -> None:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--keep", type=Path, default=None, help="run the demo in DIR (kept) instead of a temp dir"
    )
    parser.add_argument("--configfile", type=Path, default=None, help="a complete config instead of the demo")
    parser.add_argument(
        "--rounds", type=int, default=1, help="demo and bare loop N times each, in ABBA order (default 1)"
    )
    args = parser.parse_args()
    config = args.configfile or ROOT / "config" / "config.yaml"
    models = yaml.safe_load(config.read_text(encoding="utf-8"))["models"]
    times: dict[str, list[float]] = {"demo": [], "bare": []}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        first = args.keep or Path(tmp) / "demo"
        requests: list[tuple[dict, dict, dict]] = []
        for side in abba(("demo", "bare"), args.rounds):
            if side == "demo":
                # every demo run starts from an empty directory and cache; the bare loop replays the first's
                workdir = first if not times["demo"] else Path(tmp) / f"demo{len(times['demo'])}"
                times["demo"].append(run_demo(workdir, args.cores, args.configfile))
                requests = requests or cached_requests(first / "results" / "cache" / "llm")
            else:
                bare_s, calls, tokens = bare_loop(requests, models)
                times["bare"].append(bare_s)
            print(f"  {side}: {times[side][-1]:.1f} s", flush=True)
    load_after = os.getloadavg()
    demo_s, bare_s = sum(times["demo"]), sum(times["bare"])
    ratio = demo_s / bare_s
    what = "demo" if args.configfile is None else str(args.configfile)
    runs = " + ".join(f"{t:.1f}" for t in times["demo"])
    print(f"{what} (snakemake --cores {args.cores}, empty cache): {demo_s / args.rounds:.1f} s wall"
          + (f" (mean of {runs})" if args.rounds > 1 else ""))  # fmt: skip
    print(f"bare llama-cpp-python loop, same {calls} calls ({tokens} generated tokens): "
          f"{bare_s / args.rounds:.1f} s wall")  # fmt: skip
    print(f"ratio demo / bare loop: {ratio:.2f} (target <= {TARGET_RATIO}); demo <= {TARGET_WALL_S:.0f} s: "
          f"{'yes' if demo_s / args.rounds <= TARGET_WALL_S else 'no'}")  # fmt: skip
    print(f"load average (1, 5, 15 min) before {load_before[0]:.1f} {load_before[1]:.1f} {load_before[2]:.1f}, "
          f"after {load_after[0]:.1f} {load_after[1]:.1f} {load_after[2]:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
