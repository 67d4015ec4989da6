"""The paper's inputs, pinned: a user's dataset files are checked against what the paper states before any
model call (§3.1: DL20 has 54 queries, RAG24 86, graded labels, all submitted runs ranked).

A dataset's `expect` gives what is pinned (number of queries, their ids where public, number of runs, the
relevance grades); `accept` names the differences a user takes on purpose (e.g. a subset of the queries, or
only the runs at hand). Any other difference stops the data job with one line naming the dataset, what was
expected and what was found, and the key that accepts it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.persona.data import Qrels

#: What a dataset's `expect` may pin, in the order differences are reported.
PINS = ("queries", "qids", "runs", "grades")


def _shown(values: Collection[str], limit: int = 3) -> str:
    items = sorted(values)
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def differences(
    expect: Mapping[str, Any], qids: Sequence[str], qrels: Qrels, runs: Collection[str]
) -> dict[str, str]:
    """pin -> "expected …, found …" for every pinned property the dataset does not have.

    `qids` are the queries that will be judged, `qrels` their human grades, `runs` the run names.
    """
    found: dict[str, str] = {}
    if expect.get("queries") is not None and len(qids) != expect["queries"]:
        found["queries"] = f"expected {expect['queries']} queries, found {len(qids)}"
    if expect.get("qids") is not None:
        wanted, got = {str(q) for q in expect["qids"]}, set(qids)
        if wanted != got:
            parts = []
            if wanted - got:
                parts.append(f"missing {_shown(wanted - got)}")
            if got - wanted:
                parts.append(f"extra {_shown(got - wanted)}")
            found["qids"] = f"expected the paper's {len(wanted)} query ids, found {'; '.join(parts)}"
    if expect.get("runs") is not None and len(runs) != expect["runs"]:
        found["runs"] = f"expected {expect['runs']} runs, found {len(runs)}"
    if expect.get("grades") is not None:
        wanted_grades = sorted(int(g) for g in expect["grades"])
        got_grades = sorted({grade for qid in qids for grade in qrels.get(qid, {}).values()})
        if got_grades != wanted_grades:
            found["grades"] = f"expected grades {wanted_grades}, found {got_grades}"
    return found


def check_pinned(
    dataset: str,
    expect: Mapping[str, Any],
    accept: Collection[str],
    qids: Sequence[str],
    qrels: Qrels,
    runs: Collection[str],
) -> list[str]:
    """Stop on a difference from `expect` that `accept` does not name; return the accepted ones (to log)."""
    key = f"judging.datasets.{dataset}"
    unknown = sorted(set(accept) - set(PINS))
    if unknown:
        raise StressprobeError(
            f"config key '{key}.accept': unknown item {unknown[0]!r}; use some of {list(PINS)}"
        )
    found = differences(expect, qids, qrels, runs)
    refused = [pin for pin in found if pin not in accept]
    if refused:
        raise StressprobeError(
            f"dataset '{dataset}': {'; '.join(found[pin] for pin in refused)} (config key '{key}.expect'); "
            f"use the paper's files, or accept the difference on purpose with '{key}.accept: {refused}'"
        )
    return [found[pin] for pin in found]


def expand_systems(patterns: Sequence[str], runs: Sequence[str]) -> dict[str, list[str]]:
    """Each configured entry → the runs it names: a run name, or `prefix*` for every run starting so."""
    expanded = {}
    for pattern in patterns:
        if pattern.endswith("*"):
            expanded[pattern] = sorted(r for r in runs if r.startswith(pattern[:-1]))
        else:
            expanded[pattern] = [pattern] if pattern in runs else []
    return expanded


def check_systems(dataset: str, entries: Sequence[str], runs: Collection[str]) -> None:
    """Table 7's systems (`analysis.representative_systems.<dataset>`: run names or `prefix*` families) must
    each match a run of the dataset: checked when the dataset is prepared, before any model call, and
    again by Table 7's job."""
    missing = [entry for entry, matched in expand_systems(entries, sorted(runs)).items() if not matched]
    if missing:
        raise StressprobeError(
            f"analysis.representative_systems.{dataset}: '{missing[0]}' matches no run of the dataset "
            f"({len(runs)} runs); fix the name or end a family prefix with '*', or add the run files"
        )


def pinned_queries(dataset: str, queries: Any, expect: Mapping[str, Any]) -> Any:
    """The dataset's `queries` selection with `pinned` replaced by the pinned ids. A count is a seeded
    sample: where the ids are pinned it is refused, since a sample can never be the paper's set."""
    key = f"judging.datasets.{dataset}"
    pinned = expect.get("qids")
    if queries == "pinned":
        if not pinned:
            raise StressprobeError(
                f"config key '{key}.queries': 'pinned' needs '{key}.expect.qids'; list the ids"
            )
        return [str(q) for q in pinned]
    if isinstance(queries, int) and pinned:
        raise StressprobeError(
            f"config key '{key}.queries': {queries} draws a seeded sample, which cannot meet the {len(pinned)} "
            f"pinned ids of '{key}.expect.qids'; use 'queries: pinned'"
        )
    return queries
