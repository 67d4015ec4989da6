"""Time the offline dry run of the papers' full grid (config/paper.yaml) against its 10 s budget, and count
the vLLM model loads that grid implies.

    python -m bench.bench_dag [repeats]

The dry run happens in a scratch directory where the config's placeholder paths (runs directories, RAG24
files) exist as empty files, so that Snakemake can build the whole DAG without any data or network.
Prints wall-clock and CPU seconds of each `snakemake -n` and the job count; then the vLLM model loads
(every job that opens a vLLM model loads it) with one judge or CDV evaluation job per cell (before:
`judging.vllm_one_job_per_dataset` and `cdv.eval.vllm_one_job_per_dataset` false), with one such job per
(dataset, model) but CDV victims that also evaluate searched in jobs of their own (`cdv.eval.vllm_served`
false), and with those served side by side by one job per dataset (after: the default).
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.support.paper_dag import (
    LIMIT_S,
    count_loads,
    dry_run,
    job_counts,
    make_paper_workdir,
    per_model_dataset,
)


def load_report(loads: Counter) -> str:
    per_model_dataset_ = per_model_dataset(loads)
    rules = Counter()
    for (_model, _dataset, rule), count in loads.items():
        rules[rule] += count
    worst = max(loads.values(), default=0)
    return (
        f"{sum(loads.values())} vLLM model loads "
        f"({', '.join(f'{r}: {n}' for r, n in sorted(rules.items()))}); "
        f"at most {worst} per (model, dataset, rule), "
        f"at most {max(per_model_dataset_.values(), default=0)} per (model, dataset) over all rules"
    )


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        workdir = make_paper_workdir(Path(tmp) / "work")
        for i in range(repeats):
            proc, wall, cpu = dry_run(workdir, "--quiet", "rules")
            if proc.returncode != 0:
                sys.exit(f"dry run failed:\n{proc.stderr[-3000:]}")
            jobs = job_counts(proc.stdout + proc.stderr)["total"]
            verdict = "within" if wall < LIMIT_S else "OVER"
            print(
                f"run {i + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU, {jobs} jobs "
                f"({verdict} the {LIMIT_S:.0f} s limit)"
            )
        before = count_loads(workdir, grouped=False)
        grouped = count_loads(workdir, grouped=True, served=False)
        after = count_loads(workdir, grouped=True, served=True)
        print(f"before (a judge/CDV eval job per cell):           {load_report(before)}")
        print(f"grouped (one per (dataset, vLLM model) and rule): {load_report(grouped)}")
        print(f"after (and searching victims served with them):   {load_report(after)}")


if __name__ == "__main__":
    main()
