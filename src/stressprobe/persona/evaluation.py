"""nDCG@10 of every run per query, with pytrec_eval (trec_eval's own code)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytrec_eval

from stressprobe.errors import StressprobeError
from stressprobe.io import read_tsv_lines
from stressprobe.persona.data import Qrels, Run, read_listed_runs, read_qrels, read_topics

MEASURE = "ndcg_cut_10"
ALL = "all"
COLUMNS = ("run", "qid", MEASURE)


def ndcg_table(
    qrels: Qrels,
    runs: Mapping[str, Run],
    qids: Iterable[str] | None = None,
    unanswered: Mapping[str, set[str]] | None = None,
) -> list[dict[str, Any]]:
    """Rows `{"run", "qid", "ndcg_cut_10"}` per run and query, plus a row with qid `all` per run.

    Semantics are trec_eval's (`trec_eval -c -m ndcg_cut.10`): gains are the grades, retrieved documents
    without a judgment count as non-relevant, score ties are broken by docid as trec_eval does, and a run
    that does not retrieve anything for a query scores 0 for it. The mean (`all`) is over `qids` — by
    default the queries of `qrels`; a query in `qids` without judgments in `qrels` scores 0 (e.g. an LLM
    judge whose every answer for it was unparseable). The documents of `unanswered` (qid -> docids whose
    judging call failed) are taken out of every ranking before scoring, as `trec_eval -J` does with
    unjudged ones: a failed call is not a judgment of non-relevance (stressprobe.scoring).
    """
    qids = sorted(set(qrels) if qids is None else set(qids))
    if not qids:
        raise StressprobeError("nDCG: no queries to evaluate; the qrels are empty")
    judged = {q: dict(qrels[q]) for q in qids if qrels.get(q)}
    evaluator = pytrec_eval.RelevanceEvaluator(judged, {MEASURE}) if judged else None
    unanswered = unanswered or {}
    rows = []
    for name in sorted(runs):
        run = {
            q: {d: score for d, score in runs[name][q].items() if d not in unanswered.get(q, ())}
            for q in qids
            if runs[name].get(q)
        }
        run = {q: ranked for q, ranked in run.items() if ranked}
        scores = evaluator.evaluate(run) if evaluator and run else {}
        per_query = [scores.get(q, {}).get(MEASURE, 0.0) for q in qids]
        rows += [{"run": name, "qid": q, MEASURE: s} for q, s in zip(qids, per_query, strict=True)]
        rows.append({"run": name, "qid": ALL, MEASURE: sum(per_query) / len(qids)})
    return rows


def ndcg_table_from_files(
    qrels_path: str | Path,
    runs_txt: str | Path,
    topics_path: str | Path,
    unanswered: Mapping[str, set[str]] | None = None,
) -> list[dict]:
    """`ndcg_table` of a qrels file (may be empty) and the runs of a `runs.txt`, over the topics' queries."""
    return ndcg_table(
        read_qrels(qrels_path, allow_empty=True),
        read_listed_runs(runs_txt),
        qids=read_topics(topics_path),
        unanswered=unanswered,
    )


def format_ndcg_table(rows: Iterable[Mapping[str, Any]]) -> str:
    """TSV with header `run  qid  ndcg_cut_10` (values to 6 decimals)."""
    lines = ["\t".join(COLUMNS)] + [f"{r['run']}\t{r['qid']}\t{r[MEASURE]:.6f}" for r in rows]
    return "\n".join(lines) + "\n"


def read_ndcg_table(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a table written by `format_ndcg_table`."""
    rows = []
    for lineno, fields in read_tsv_lines(path):
        if lineno == 1:
            if tuple(fields) != COLUMNS:
                raise StressprobeError(f"{path}:1: expected header '{' '.join(COLUMNS)}'; not an nDCG table")
            continue
        try:
            run, qid, value = fields
            rows.append({"run": run, "qid": qid, MEASURE: float(value)})
        except ValueError:
            raise StressprobeError(
                f"{path}:{lineno}: expected 'run<TAB>qid<TAB>number'; fix the line"
            ) from None
    return rows
