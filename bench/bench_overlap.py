"""Count the requests of the papers' grid (config/paper.yaml) that more than one job would ask, without data
and without a model call.

    python -m bench.bench_overlap

The paper workflow is loaded in a scratch directory with placeholder inputs (as bench_dag plans it), and
its cost stage's own cell list (`cost_cdv_cells()`) goes through the cost estimate's functions, with
distinct stand-in questions in place of each CDV dataset's sample (a request's identity depends on its
question's text, not on what the text says; samples are nested as the workflow draws them). Prints the
overlap per rule and model (the bill's table, results/cost/overlap.csv on real data).

Judging is not part of this count: it needs the prepared pairs and persona tables; the bill counts it on
real data (each judge cell asks its own condition's prompts; the summaries are one job per dataset).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

from bench.bench_dag import PAPER_CONFIG, ROOT, make_paper_workdir
from stressprobe.cdv.cost_bounds import cdv_estimates
from stressprobe.overlap import overlap_markdown, overlap_rows, total_overlap

# Questions of a dataset whose config takes the whole file (`n: null`): the authors' samples hold 300 each.
PAPER_SAMPLE = 300


def stand_in_questions(dataset: str, count: int) -> list[dict]:
    return [
        {"question": f"{dataset} question {i}?", "choices": ["A", "B", "C", "D"], "answer_index": i % 4}
        for i in range(count)
    ]


def paper_cells(workdir: Path) -> tuple[list[dict], dict]:
    """The paper config's CDV cells as the cost stage lists them, and the config."""
    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(configfiles=[PAPER_CONFIG]),
            storage_settings=StorageSettings(),
            snakefile=ROOT / "Snakefile",
            workdir=workdir,
        )._workflow
        return workflow.globals["cost_cdv_cells"](), workflow.config


def paper_overlap() -> tuple[list[dict], list]:
    """The paper grid's CDV cells and the overlap rows of their fixed requests."""
    with tempfile.TemporaryDirectory() as tmp:
        cells, config = paper_cells(make_paper_workdir(Path(tmp)))
    cdv = config["cdv"]
    questions = {d: stand_in_questions(d, entry["n"] or PAPER_SAMPLE) for d, entry in cdv["datasets"].items()}
    asks: list = []
    cdv_estimates(cells, questions, cdv, config["models"], asks)
    return cells, overlap_rows(asks)


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
