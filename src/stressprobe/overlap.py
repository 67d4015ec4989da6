"""Requests that more than one job would ask: counted from the cost estimate's requests, no model called.

A request asked by two jobs is paid once (the second reads the cache, or waits on the first one's claim,
on any host: llm/claims.py), but it still ties a second job to the first, and where both run at once one
of them waits. The bill counts these asks per rule and model: the first job (in the estimate's order) that
asks a request owns it; every other job's ask of it is a repeat.

What is counted: every request of a judging cell (summaries and judgments, exact cache keys) and, of the
adaptive CDV cells, the requests fixed before any answer: each search's victim calls on the original
questions (the search cell and each value-function variant) and the evaluations' asks of the originals,
which one job per dataset, evaluated model and setting asks for all the dataset's cells (rule
cdv_eval_originals, or the model's grouped vLLM job), so that they repeat nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stressprobe.tables import records_csv, records_markdown


@dataclass(frozen=True)
class Ask:
    """One job asking one request (its cache key) of one model."""

    rule: str
    model: str
    job: str
    key: str


@dataclass(frozen=True)
class OverlapRow:
    """Per rule and model: asks, distinct requests, how many of those other jobs ask too, repeat asks."""

    rule: str
    model: str
    jobs: int
    asks: int
    distinct: int
    shared: int  # distinct requests of these jobs that some other job asks as well
    repeats: int  # asks of a request that an earlier job already asks (paid once, waited on)


def overlap_rows(asks: Iterable[Ask]) -> list[OverlapRow]:
    """The overlap per (rule, model), in order of first appearance."""
    asks = list(dict.fromkeys(asks))  # a job asking a request twice asks it once (the client dedups)
    jobs_of: dict[tuple[str, str], list[str]] = {}
    for ask in asks:
        jobs_of.setdefault((ask.model, ask.key), []).append(ask.job)
    groups: dict[tuple[str, str], list[Ask]] = {}
    for ask in asks:
        groups.setdefault((ask.rule, ask.model), []).append(ask)
    rows = []
    for (rule, model), mine in groups.items():
        keys = {a.key for a in mine}
        rows.append(
            OverlapRow(
                rule=rule,
                model=model,
                jobs=len({a.job for a in mine}),
                asks=len(mine),
                distinct=len(keys),
                shared=sum(len(set(jobs_of[(model, k)])) > 1 for k in keys),
                repeats=sum(jobs_of[(model, a.key)][0] != a.job for a in mine),
            )
        )
    return rows


def total_overlap(rows: Sequence[OverlapRow]) -> OverlapRow:
    return OverlapRow(
        "total",
        "",
        sum(r.jobs for r in rows),
        sum(r.asks for r in rows),
        sum(r.distinct for r in rows),
        sum(r.shared for r in rows),
        sum(r.repeats for r in rows),
    )


def overlap_csv(rows: Sequence[OverlapRow]) -> str:
    return records_csv(OverlapRow, [*rows, total_overlap(rows)])


def overlap_markdown(rows: Sequence[OverlapRow]) -> str:
    table = records_markdown(OverlapRow, [*rows, total_overlap(rows)])
    notes = (
        "\nPer rule and model: `asks` (job, request) pairs, `distinct` requests, `shared` those that another "
        "job asks too, `repeats` the asks of a request an earlier job asks (paid once: a cache hit or a wait "
        "on the first job's claim). CDV rows count only requests fixed before any answer (the originals; "
        "`cdv_eval`: one originals job per dataset, evaluated model and setting).\n"
    )
    return table + notes
