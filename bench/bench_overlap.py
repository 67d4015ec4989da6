"""Count the requests of the papers' grid (config/paper.yaml) that more than one job would ask, without data
and without a model call.

    python -m bench.bench_overlap

The paper workflow is loaded in a scratch directory with placeholder inputs (tests/support/paper_dag.py,
as bench_dag plans it), and its cost stage's own cell list (`cost_cdv_cells()`) goes through the cost estimate's functions, with
distinct stand-in questions in place of each CDV dataset's sample (a request's identity depends on its
question's text, not on what the text says; samples are nested as the workflow draws them). Prints the
overlap per rule and model (the bill's table, results/cost/overlap.csv on real data).

Judging is not part of this count: it needs the prepared pairs and persona tables; the bill counts it on
real data (each judge cell asks its own condition's prompts; the summaries are one job per dataset).
"""

from __future__ import annotations

import time

from stressprobe.overlap import overlap_markdown, total_overlap
from tests.support.paper_dag import paper_overlap


def main() -> None:
    start = time.perf_counter()
    cells, rows = paper_overlap()
    total = total_overlap(rows)
    print(f"paper grid: {len(cells)} CDV cells, {total.jobs} jobs asking fixed requests")
    print(overlap_markdown(rows))
    print(
        f"{total.repeats} of {total.asks} asks ({total.repeats / total.asks:.0%}) repeat a request another "
        f"job asks; {total.shared} of {total.distinct} distinct requests are asked by more than one job "
        f"({time.perf_counter() - start:.1f} s)"
    )


if __name__ == "__main__":
    main()
