"""nDCG@10: agreement with an independent implementation, trec_eval semantics, files, and real DL20."""

import math
import random

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.persona.data import read_qrels, read_runs_dir
from stressprobe.persona.evaluation import (
    format_ndcg_table,
    ndcg_table,
    ndcg_table_from_files,
    read_ndcg_table,
)
from tests.support.helpers import shared_data

DL20_BM25_NDCG10 = 0.4796  # published value, ../shared/data/README.md (trec_eval, NIST qrels)


def reference_ndcg10(grades: dict[str, int], scores: dict[str, float]) -> float:
    """Textbook nDCG@10 with linear gains; ranking by score, ties by docid descending (trec_eval)."""
    order = sorted(scores, key=lambda d: (scores[d], d), reverse=True)[:10]
    dcg = sum(grades.get(d, 0) / math.log2(i + 2) for i, d in enumerate(order))
    ideal = sorted(grades.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def random_case(seed: int):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(30)]
    qrels = {f"q{q}": {d: rng.choice([0, 0, 1, 2, 3]) for d in rng.sample(docs, 15)} for q in range(6)}
    runs = {
        f"r{r}": {
            q: {d: float(rng.randint(0, 5)) for d in rng.sample(docs, 20)}  # few distinct scores: many ties
            for q in qrels
            if rng.random() > 0.2  # some runs miss some queries
        }
        for r in range(4)
    }
    return qrels, runs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_independent_ndcg_with_ties_and_missing_queries(seed):
    qrels, runs = random_case(seed)
    rows = ndcg_table(qrels, runs)
    got = {(r["run"], r["qid"]): r["ndcg_cut_10"] for r in rows}
    for name, run in runs.items():
        expected = [reference_ndcg10(qrels[q], run.get(q, {})) for q in sorted(qrels)]
        for q, value in zip(sorted(qrels), expected, strict=True):
            assert got[name, q] == pytest.approx(value, abs=1e-9)
        assert got[name, "all"] == pytest.approx(sum(expected) / len(expected), abs=1e-9)
    assert len(rows) == len(runs) * (len(qrels) + 1)


def test_missing_query_scores_zero_and_counts_in_the_mean():
    qrels = {"q1": {"a": 2}, "q2": {"b": 1}}
    rows = ndcg_table(qrels, {"r": {"q1": {"a": 1.0}}})
    assert [(r["qid"], r["ndcg_cut_10"]) for r in rows] == [("q1", 1.0), ("q2", 0.0), ("all", 0.5)]


def test_mean_over_given_queries_includes_unjudged_ones():
    rows = ndcg_table({"q1": {"a": 2}}, {"r": {"q1": {"a": 1.0}, "q2": {"a": 1.0}}}, qids=["q1", "q2"])
    assert {r["qid"]: r["ndcg_cut_10"] for r in rows} == {"q1": 1.0, "q2": 0.0, "all": 0.5}
    empty = ndcg_table({}, {"r": {"q1": {"a": 1.0}}}, qids=["q1"])
    assert [r["ndcg_cut_10"] for r in empty] == [0.0, 0.0]
    with pytest.raises(StressprobeError, match="no queries"):
        ndcg_table({}, {"r": {}})


def test_table_files_round_trip(tmp_path):
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    (data / "runs" / "r#1.run").write_text("q1 Q0 a#b 1 2 x\nq1 Q0 c_d 2 1 x\n")
    (data / "runs.txt").write_text("r#1\n")
    (data / "topics.tsv").write_text("q1\tquery one\nq2\tquery two\n")
    (tmp_path / "llm.qrels").write_text("q1 0 c_d 3\nq1 0 a#b 1\n")
    rows = ndcg_table_from_files(tmp_path / "llm.qrels", data / "runs.txt", data / "topics.tsv")
    expected_q1 = reference_ndcg10({"c_d": 3, "a#b": 1}, {"a#b": 2.0, "c_d": 1.0})
    assert rows[0]["ndcg_cut_10"] == pytest.approx(expected_q1)
    assert rows[-1] == {"run": "r#1", "qid": "all", "ndcg_cut_10": pytest.approx(expected_q1 / 2)}
    (tmp_path / "t.tsv").write_text(format_ndcg_table(rows))
    back = read_ndcg_table(tmp_path / "t.tsv")
    assert [(r["run"], r["qid"]) for r in back] == [(r["run"], r["qid"]) for r in rows]
    assert all(abs(a["ndcg_cut_10"] - b["ndcg_cut_10"]) < 1e-6 for a, b in zip(back, rows, strict=True))
    (tmp_path / "empty.qrels").write_text("")
    zeros = ndcg_table_from_files(tmp_path / "empty.qrels", data / "runs.txt", data / "topics.tsv")
    assert {r["ndcg_cut_10"] for r in zeros} == {0.0}


def test_bad_table_names_the_line(tmp_path):
    (tmp_path / "t.tsv").write_text("run\tqid\tndcg_cut_10\nr\tq1\tnope\n")
    with pytest.raises(StressprobeError, match=r"t\.tsv:2:"):
        read_ndcg_table(tmp_path / "t.tsv")


def test_dl20_bm25_matches_the_published_value():
    dl20 = shared_data("dl20")
    runs = read_runs_dir(dl20 / "runs")
    rows = ndcg_table(read_qrels(dl20 / "qrels.txt"), runs)
    means = {r["run"]: r["ndcg_cut_10"] for r in rows if r["qid"] == "all"}
    assert round(means["bm25"], 4) == DL20_BM25_NDCG10
    assert len(means) == len(runs) == 39
