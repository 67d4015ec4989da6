"""Datasets: readers and their errors, query and pair selection, the ir_datasets adapter, real DL20."""

import json
import logging
import random
from collections import Counter
from types import SimpleNamespace

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.persona.data import (
    format_qrels,
    format_run,
    format_run_metadata,
    format_topics,
    load_ir_datasets_source,
    load_local_source,
    load_source,
    ranked,
    read_listed_runs,
    read_passages,
    read_qrels,
    read_run,
    read_run_metadata,
    read_runs_dir,
    read_topics,
)
from stressprobe.persona.selection import (
    prepare_dataset,
    select_queries,
    subsample_by_grade,
    unjudged_top_k,
)
from tests.support.helpers import shared_data

RAG_DOC = "msmarco_v2.1_doc_00_125364462#6_229054655"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    """A tiny local dataset: 3 queries (q3 unjudged), docids with '#' and '_', two runs and a stray file."""
    topics = write(tmp_path / "topics.tsv", "q1\tfirst query\nq2\tsecond query\nq3\tthird query\n")
    qrels = write(
        tmp_path / "qrels.txt",
        f"q1 0 d1 3\nq1 0 d2 0\nq1 0 {RAG_DOC} 1\nq2 0 d3 2\nq2 0 d_4 0\n",
    )
    passages = write(
        tmp_path / "passages.tsv",
        f"d1\tpassage one\td1 has a tab inside\nd2\tpassage two\n{RAG_DOC}\tsegment text\n"
        "d3\tpassage three\nd_4\tpassage four\nd5\tpassage five\n",
    )
    runs = tmp_path / "runs"
    write(
        runs / "a.run", "q1 Q0 d1 1 3.0 tagA\nq1 Q0 d5 2 2.0 tagA\nq2 Q0 d3 1 1.5 tagA\nq9 Q0 d1 1 1 tagA\n"
    )
    write(runs / "b.run", f"q1 Q0 {RAG_DOC} 1 2 tagB\nq1 Q0 d6 2 1 tagB\nq3 Q0 d1 1 1 tagB\n")
    write(runs / "SOURCES.tsv", "a.run\tsomewhere\n")
    return SimpleNamespace(topics=topics, qrels=qrels, passages=passages, runs=runs)


def test_readers_accept_ids_with_hash_and_underscore(files):
    assert read_topics(files.topics) == {"q1": "first query", "q2": "second query", "q3": "third query"}
    qrels = read_qrels(files.qrels)
    assert qrels["q1"][RAG_DOC] == 1 and qrels["q2"]["d_4"] == 0
    runs = read_runs_dir(files.runs)
    assert sorted(runs) == ["a", "b"]  # SOURCES.tsv is not a run
    assert runs["b"]["q1"] == {RAG_DOC: 2.0, "d6": 1.0}
    texts = read_passages(files.passages, {"d1", RAG_DOC, "missing"})
    assert texts == {"d1": "passage one\td1 has a tab inside", RAG_DOC: "segment text"}


def test_jsonl_passages_with_title(tmp_path):
    path = write(
        tmp_path / "p.jsonl",
        json.dumps({"docid": "a#1", "title": "T", "segment": "body"})
        + "\n"
        + json.dumps({"id": "b", "text": "x"}),
    )
    assert read_passages(path, {"a#1", "b"}) == {"a#1": "T\nbody", "b": "x"}
    bad = write(tmp_path / "bad.jsonl", json.dumps({"docid": "a"}) + "\n")
    with pytest.raises(StressprobeError, match=r"bad\.jsonl:1: a passage needs an id"):
        read_passages(bad, {"a"})


def test_the_title_switch_leaves_a_segment_alone(tmp_path):
    # config/paper.yaml's RAG24 (`title: false`): the segment as UMBRELA's code reads it, through the source.
    path = write(tmp_path / "p.jsonl", json.dumps({"docid": "a#1", "title": "T", "segment": "body"}) + "\n")
    assert read_passages(path, {"a#1"}, title=False) == {"a#1": "body"}
    topics = write(tmp_path / "t.tsv", "q\tquery\n")
    qrels = write(tmp_path / "q.txt", "q 0 a#1 2\n")
    entry = {"source": "local", "topics": str(topics), "qrels": str(qrels), "passages": str(path)}
    assert load_source(entry, "d", title=False).passages({"a#1"}) == {"a#1": "body"}
    assert load_source(entry, "d").passages({"a#1"}) == {"a#1": "T\nbody"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q1 0 d1 2\nq1 0 d2\n", r"qrels\.txt:2: expected 4 fields"),
        ("q1 0 d1 4\n", r"qrels\.txt:1: relevance grade '4' is not one of 0, 1, 2, 3"),
        ("q1 0 d1 -1\n", r"qrels\.txt:1: relevance grade '-1'"),
        ("q1 0 d1 x\n", r"qrels\.txt:1: relevance grade 'x'"),
        ("q1 0 d1 1\nq1 0 d1 2\n", r"qrels\.txt:2: document 'd1' is judged twice"),
        ("\n", r"qrels\.txt: no judgments"),
    ],
)
def test_bad_qrels_name_file_and_line(tmp_path, text, message):
    with pytest.raises(StressprobeError, match=message):
        read_qrels(write(tmp_path / "qrels.txt", text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0\n", r"r\.run:2: expected 6 fields"),
        ("q1 Q0 d1 1 high t\n", r"r\.run:1: score 'high' is not a number"),
        (
            "q1 Q0 d1 1 2 t\nq2 Q0 d1 1 2 t\nq1 Q0 d1 2 1 t\n",
            r"r\.run:3: document 'd1' is listed twice.*line 1",
        ),
        ("", r"r\.run: no result lines"),
    ],
)
def test_bad_runs_name_file_and_line(tmp_path, text, message):
    with pytest.raises(StressprobeError, match=message):
        read_run(write(tmp_path / "r.run", text))


def test_bad_topics_name_file_and_line(tmp_path):
    with pytest.raises(StressprobeError, match=r"t\.tsv:2: expected 'qid<TAB>query text'"):
        read_topics(write(tmp_path / "t.tsv", "q1\tok\nq2 no tab\n"))
    with pytest.raises(StressprobeError, match=r"t\.tsv:2: query 'q1' appears twice"):
        read_topics(write(tmp_path / "t.tsv", "q1\tok\nq1\tagain\n"))


def test_empty_or_missing_runs_directory_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    write(tmp_path / "empty" / "README", "no runs here")
    with pytest.raises(StressprobeError, match=r"empty: no '\*\.run' or 'input.<tag>.gz' files"):
        read_runs_dir(tmp_path / "empty")
    with pytest.raises(StressprobeError, match="runs directory not found"):
        read_runs_dir(tmp_path / "nope")


def test_judged_query_absent_from_topics_is_an_error(files, tmp_path):
    qrels = write(tmp_path / "more_qrels.txt", files.qrels.read_text() + "q7 0 d1 1\n")
    source = load_local_source(files.topics, qrels, files.passages)
    with pytest.raises(
        StressprobeError, match=r"more_qrels\.txt: query 'q7' is judged but not in the topics"
    ):
        prepare_dataset(source, read_runs_dir(files.runs))


def test_run_query_absent_from_topics_is_a_counted_warning(files, caplog):
    source = load_local_source(files.topics, files.qrels, files.passages)
    with caplog.at_level(logging.WARNING):
        prepared = prepare_dataset(source, read_runs_dir(files.runs))
    assert "run a: 1 queries not in the topics" in caplog.text
    assert prepared.warnings["run_queries_not_in_topics"] == 1
    assert "q9" not in prepared.runs["a"]


def test_prepare_selects_judged_pairs_of_judged_queries(files):
    source = load_local_source(files.topics, files.qrels, files.passages)
    prepared = prepare_dataset(source, read_runs_dir(files.runs))
    assert list(prepared.topics) == ["q1", "q2"]  # q3 has no judgments: nothing to evaluate it with
    assert prepared.qrels == read_qrels(files.qrels)
    keys = [(p["qid"], p["docid"]) for p in prepared.pairs]
    assert keys == sorted((q, d) for q, docs in read_qrels(files.qrels).items() for d in docs)
    assert prepared.pairs[0]["passage"] == "passage one\td1 has a tab inside"
    assert prepared.runs["b"] == {"q1": {RAG_DOC: 2.0, "d6": 1.0}}  # q3 is not selected


def test_unjudged_top_k_adds_pairs_and_skips_missing_passages(files, caplog):
    source = load_local_source(files.topics, files.qrels, files.passages)
    with caplog.at_level(logging.WARNING):
        prepared = prepare_dataset(source, read_runs_dir(files.runs), unjudged_top_k_depth=2)
    extra = {(p["qid"], p["docid"]) for p in prepared.pairs} - {
        (q, d) for q, docs in read_qrels(files.qrels).items() for d in docs
    }
    assert extra == {("q1", "d5")}  # d6 is in run b's top 2 but has no passage text
    assert prepared.warnings["unjudged_without_passage"] == 1
    assert "1 unjudged top-k documents have no passage text" in caplog.text
    assert ("q1", "d5") not in {(q, d) for q, docs in prepared.qrels.items() for d in docs}


def test_judged_pair_without_passage_is_an_error(files, tmp_path):
    passages = write(tmp_path / "few.tsv", "d1\tone\n")
    source = load_local_source(files.topics, files.qrels, passages)
    with pytest.raises(StressprobeError, match="no passage text for judged document"):
        prepare_dataset(source, read_runs_dir(files.runs))


def test_select_queries():
    judged = [f"q{i}" for i in range(10)]
    assert select_queries(judged, None, 1, "k") == sorted(judged)
    assert select_queries(judged, ["q3", "q1"], 1, "k") == ["q1", "q3"]
    assert select_queries(["7", "12"], [12], 1, "k") == ["12"]
    sample = select_queries(judged, 4, 7, "k")
    assert len(sample) == 4 and set(sample) <= set(judged)
    assert sample == select_queries(list(reversed(judged)), 4, 7, "k")  # seeded and order-independent
    with pytest.raises(StressprobeError, match="config key 'k': query 'q99' is not a judged query"):
        select_queries(judged, ["q99"], 1, "k")
    with pytest.raises(StressprobeError, match="asks for 11 queries but only 10"):
        select_queries(judged, 11, 1, "k")


def test_subsample_keeps_every_grade():
    grades = {f"d{i}": 0 for i in range(40)} | {"r1": 1, "r2": 1, "h": 2, "p1": 3, "p2": 3}
    chosen = subsample_by_grade(grades, 6, random.Random(3))
    assert len(chosen) == 6 and len(set(chosen)) == 6 and set(chosen) <= set(grades)
    assert {grades[d] for d in chosen} == {0, 1, 2, 3}
    assert chosen == subsample_by_grade(grades, 6, random.Random(3))
    assert subsample_by_grade(grades, None, random.Random(3)) == sorted(grades)


def test_ranked_and_unjudged_follow_trec_eval_order():
    scores = {"a": 1.0, "c": 2.0, "b": 2.0, "d": 0.5}
    assert ranked(scores) == ["c", "b", "a", "d"]  # ties: docid descending, as trec_eval
    runs = {"r": {"q": scores}}
    assert unjudged_top_k(runs, {"q": {"c": 1}}, ["q"], 2) == {("q", "b")}


def test_writers_round_trip(files, tmp_path):
    run = read_run(files.runs / "a.run")
    text = format_run("a", run)
    assert read_run(write(tmp_path / "x.run", text)) == run
    first = text.splitlines()[0].split()
    assert first[3] == "1" and first[5] == "a"
    qrels = read_qrels(files.qrels)
    assert read_qrels(write(tmp_path / "q.txt", format_qrels(qrels))) == qrels
    topics = read_topics(files.topics)
    assert read_topics(write(tmp_path / "t.tsv", format_topics(topics))) == topics
    meta = {"a": "dense", "b": "sparse"}
    assert read_run_metadata(write(tmp_path / "m.tsv", format_run_metadata(meta))) == meta


def test_listed_runs_are_read_beside_runs_txt(tmp_path):
    write(tmp_path / "runs" / "x.y.run", "q Q0 d 1 1 x.y\n")
    write(tmp_path / "runs.txt", "x.y\n")
    assert read_listed_runs(tmp_path / "runs.txt") == {"x.y": {"q": {"d": 1.0}}}


class FakeIrDataset:
    """The documented ir_datasets surface: queries_iter, qrels_iter, docs_store().get_many."""

    def __init__(self, grade=2):
        self.grade = grade
        self.asked = []

    def queries_iter(self):
        yield SimpleNamespace(query_id="1", text=" what is x ")
        yield SimpleNamespace(query_id="2", text="who is y")

    def qrels_iter(self):
        yield SimpleNamespace(query_id="1", doc_id="10", relevance=self.grade, iteration="0")
        yield SimpleNamespace(query_id="2", doc_id="20", relevance=0, iteration="0")

    def docs_store(self):
        dataset = self

        class Store:
            def get_many(self, ids):
                dataset.asked.append(sorted(ids))
                docs = {
                    "10": SimpleNamespace(doc_id="10", text="ten"),
                    "20": SimpleNamespace(doc_id="20", text="20"),
                }
                return {i: docs[i] for i in ids if i in docs}

        return Store()


def test_ir_datasets_adapter_with_a_fake_dataset():
    fake = FakeIrDataset()
    source = load_ir_datasets_source("msmarco-passage/trec-dl-2020/judged", load=lambda _id: fake)
    assert source.topics == {"1": "what is x", "2": "who is y"}
    assert source.qrels == {"1": {"10": 2}, "2": {"20": 0}}
    prepared = prepare_dataset(source, {"r": {"1": {"10": 1.0, "30": 0.5}}}, unjudged_top_k_depth=5)
    assert [(p["qid"], p["docid"], p["passage"]) for p in prepared.pairs] == [
        ("1", "10", "ten"),
        ("2", "20", "20"),
    ]
    assert fake.asked == [["10", "20", "30"]]  # only the wanted passages are fetched


def test_ir_datasets_adapter_checks_grades():
    with pytest.raises(StressprobeError, match="ir_datasets:x qrels entry 1: relevance grade '5'"):
        load_ir_datasets_source("x", load=lambda _id: FakeIrDataset(grade=5))


def test_load_source_requires_the_keys_of_its_kind():
    with pytest.raises(StressprobeError, match=r"config key 'd\.topics': required"):
        load_source({"source": "local", "topics": None, "qrels": "q", "passages": "p"}, "d")
    with pytest.raises(StressprobeError, match=r"config key 'd\.ir_datasets_id'"):
        load_source({"source": "ir_datasets", "ir_datasets_id": None}, "d")


def test_dl20_subset_of_two_queries_and_ten_passages():
    dl20 = shared_data("dl20")
    source = load_local_source(dl20 / "topics.tsv", dl20 / "qrels.txt", dl20 / "passages.tsv")
    runs = read_runs_dir(dl20 / "runs")
    prepared = prepare_dataset(source, runs, queries=2, max_passages_per_query=10, seed=42)
    assert len(prepared.topics) == 2
    per_query = Counter(p["qid"] for p in prepared.pairs)
    assert set(per_query) == set(prepared.topics) and set(per_query.values()) == {10}
    full = read_qrels(dl20 / "qrels.txt")
    for qid, judged in prepared.qrels.items():
        assert {full[qid][d] for d in judged} == set(full[qid].values())  # every grade of the pool kept
    assert all(p["passage"] for p in prepared.pairs)
    assert set(prepared.runs) == set(runs) and all(
        set(r) <= set(prepared.topics) for r in prepared.runs.values()
    )
