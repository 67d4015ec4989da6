"""Selecting what a judging dataset judges: the queries, the pairs per query, unjudged top-k documents, and
the runs restricted to the selected queries (`prepare_dataset`)."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from stressprobe.errors import StressprobeError
from stressprobe.persona.data import Qrels, Run, Source, ranked

log = logging.getLogger(__name__)


def check_qrels_in_topics(source: Source) -> None:
    """Every judged query must have a text: judging needs it, so a missing one is an error."""
    missing = sorted(set(source.qrels) - set(source.topics))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise StressprobeError(
            f"{source.qrels_origin}: query '{missing[0]}'{more} is judged but not in the topics of "
            f"{source.name}; add it to the topics or remove its judgments"
        )


def select_queries(
    judged: Iterable[str], queries: None | int | list[str | int], seed: int, key: str
) -> list[str]:
    """The query subset: all judged queries (None), the listed qids, or a seeded sample of a count.

    Listed qids may be numbers (YAML reads `[1030303]` as an int); they are compared as text.
    """
    judged_set = set(judged)  # built once for the membership checks below
    judged = sorted(judged_set)
    if queries is None:
        return judged
    if isinstance(queries, int):
        if queries > len(judged):
            raise StressprobeError(
                f"config key '{key}': asks for {queries} queries but only {len(judged)} are judged; lower it"
            )
        return sorted(random.Random(seed).sample(judged, queries))
    queries = [str(q) for q in queries]
    unknown = [q for q in queries if q not in judged_set]
    if unknown:
        raise StressprobeError(
            f"config key '{key}': query '{unknown[0]}' is not a judged query of the dataset; fix the list"
        )
    return sorted(set(queries))


def subsample_by_grade(grades: Mapping[str, int], limit: int | None, rng: random.Random) -> list[str]:
    """Up to `limit` judged docids, taken round-robin over grades (highest first) from seeded shuffles.

    Round-robin keeps every grade present: a plain random sample would be mostly grade 0 on TREC pools.
    """
    if limit is None or len(grades) <= limit:
        return sorted(grades)
    by_grade = {
        g: sorted(d for d, x in grades.items() if x == g) for g in sorted(set(grades.values()), reverse=True)
    }
    for docids in by_grade.values():
        rng.shuffle(docids)
    chosen: list[str] = []
    while len(chosen) < limit:
        for docids in by_grade.values():
            if docids and len(chosen) < limit:
                chosen.append(docids.pop())
    return sorted(chosen)


def unjudged_top_k(
    runs: Mapping[str, Run], qrels: Qrels, qids: Iterable[str], k: int
) -> set[tuple[str, str]]:
    """(qid, docid) pairs in some run's top `k` for a selected query that the human qrels do not judge."""
    pairs = set()
    for qid in qids:
        for run in runs.values():
            pairs.update((qid, d) for d in ranked(run.get(qid, {}))[:k] if d not in qrels.get(qid, {}))
    return pairs


def restrict_runs(
    runs: Mapping[str, Run], topics: Mapping[str, str], qids: Iterable[str]
) -> tuple[dict[str, Run], int]:
    """Runs limited to the selected queries, and how many run queries were not in the topics at all.

    Those are dropped with a logged warning and counted rather than refused: runs often cover more
    topics than the topics file holds; worth a look, not worth stopping for.
    """
    qids = set(qids)
    restricted, outside = {}, 0
    for name, run in runs.items():
        unknown = sorted(set(run) - set(topics))
        if unknown:
            log.warning(
                "run %s: %d queries not in the topics, ignored (e.g. %s)", name, len(unknown), unknown[0]
            )
        outside += len(unknown)
        restricted[name] = {qid: run[qid] for qid in sorted(set(run) & qids)}
    return restricted, outside


@dataclass
class PreparedDataset:
    """What the judging study reads: selected topics, the judged pairs, their human grades, and the runs."""

    topics: dict[str, str]
    qrels: Qrels  # human grades of the judged pairs only, so human and LLM qrels cover the same pool
    pairs: list[dict[str, str]]  # {"qid","docid","passage"}, sorted by qid then docid
    runs: dict[str, Run]
    run_metadata: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, int] = field(default_factory=dict)  # counted, logged irregularities


def prepare_dataset(
    source: Source,
    runs: Mapping[str, Run],
    *,
    queries: None | int | list[str | int] = None,
    max_passages_per_query: int | None = None,
    unjudged_top_k_depth: int = 0,
    seed: int = 0,
    key: str = "dataset",
    run_metadata: Mapping[str, str] | None = None,
) -> PreparedDataset:
    """Select queries and pairs, fetch the passages and restrict the runs.

    Judged pairs: the human qrels of the selected queries (subsampled per query when
    `max_passages_per_query` is set); plus, when `unjudged_top_k_depth` > 0, unjudged documents of the
    runs' top-k. A judged pair without a passage text is an error; an unjudged one is skipped and counted.
    """
    check_qrels_in_topics(source)
    qids = select_queries(source.qrels, queries, seed, f"{key}.queries")
    rng = random.Random(seed)
    judged = {qid: subsample_by_grade(source.qrels[qid], max_passages_per_query, rng) for qid in qids}
    qrels = {qid: {d: source.qrels[qid][d] for d in docids} for qid, docids in judged.items()}
    extra = unjudged_top_k(runs, source.qrels, qids, unjudged_top_k_depth)
    wanted = {d for docids in judged.values() for d in docids} | {d for _, d in extra}
    texts = source.passages(wanted)
    missing = sorted({(q, d) for q, docids in judged.items() for d in docids if d not in texts})
    if missing:
        raise StressprobeError(
            f"{source.name}: no passage text for judged document '{missing[0][1]}' (query '{missing[0][0]}'; "
            f"{len(missing)} judged documents lack one); add them to the passages"
        )
    skipped = sorted(p for p in extra if p[1] not in texts)
    if skipped:
        log.warning("%d unjudged top-k documents have no passage text and are not judged", len(skipped))
    pairs = {(q, d) for q, docids in judged.items() for d in docids} | (extra - set(skipped))
    metadata = dict(run_metadata or {})
    unknown_runs = sorted(set(metadata) - set(runs))
    if unknown_runs:
        log.warning(
            "run metadata names %d runs not in the runs directory (e.g. %s)",
            len(unknown_runs),
            unknown_runs[0],
        )
    restricted, outside = restrict_runs(runs, source.topics, qids)
    return PreparedDataset(
        topics={qid: source.topics[qid] for qid in qids},
        qrels=qrels,
        pairs=[{"qid": q, "docid": d, "passage": texts[d]} for q, d in sorted(pairs)],
        runs=restricted,
        run_metadata={r: metadata[r] for r in sorted(metadata) if r in runs},
        warnings={
            "run_queries_not_in_topics": outside,
            "unjudged_without_passage": len(skipped),
            "unknown_runs_in_metadata": len(unknown_runs),
        },
    )
