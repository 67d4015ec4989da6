"""Which demo CDV questions the demo's search perturbs: the measured procedure behind `cdv.datasets.*.n`.

    python -m bench.cdv_demo_questions [--keep DIR] [--cores 2]

Runs the demo's own CDV search rule (config/config.yaml with `n: null`: every question of each embedded set,
the demo's proxy, victim and `cdv.search` budgets) in a scratch directory, then prints one line per question:
the victim's success rate before the search (r0; 0 = already failed, not searched), the search's calls, why
it stopped and how many successful distractions it found. The search of a question does not depend on the
other questions of its set (seeded per request), so a demo that names a subset repeats these lines exactly.
With `--keep DIR` a rerun is free (the response cache is in DIR/results/cache/llm).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def run_search(workdir: Path, cores: int) -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    for source in config["cdv"]["datasets"].values():
        source["n"] = None
    workdir.mkdir(parents=True, exist_ok=True)
    if not (workdir / "resources").exists():
        (workdir / "resources").symlink_to(ROOT / "resources")
    (workdir / "all_questions.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    cell = config["cdv"]["cells"][0]
    targets = [
        f"results/cdv/{name}/{cell['proxy']}/{cell['victim']}/search.jsonl"
        for name in config["cdv"]["datasets"]
    ]
    cmd = [sys.executable, "-m", "snakemake", *targets, "--snakefile", str(ROOT / "Snakefile")]
    cmd += ["--directory", str(workdir), "--configfile", str(workdir / "all_questions.yaml")]
    cmd += ["--cores", str(cores), "--quiet", "rules"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(cmd, check=True, env=env)
    return {name: workdir / target for name, target in zip(config["cdv"]["datasets"], targets, strict=True)}


def report(name: str, search: Path) -> None:
    records = [json.loads(line) for line in search.read_text(encoding="utf-8").splitlines()]
    successes = Counter(r["qid"] for r in records if r["depth"] > 0 and r["status"] == "success")
    print(f"{name}: qid, r0, calls, stop reason, successes")
    for root in (r for r in records if r["depth"] == 0):
        r0 = root["success_rate"]
        print(f"  {root['qid']}  r0={r0:.2f}  calls={root['calls']:3d}  {root['stop_reason']:15s}  "
              f"{successes[root['qid']]}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="run in DIR (kept) instead of a temp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, search in run_search(args.keep or Path(tmp) / "questions", args.cores).items():
            report(name, search)


if __name__ == "__main__":
    main()
