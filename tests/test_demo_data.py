"""Invariants of the embedded demo data in resources/demo and the taxonomy in resources/taxonomy."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import pytrec_eval
import yaml

from tests.support.helpers import ROOT

DEMO = ROOT / "resources" / "demo"
JUDGING = DEMO / "judging"
TAXONOMY = ROOT / "resources" / "taxonomy" / "domains.yaml"
DATASETS = ["demo-dl", "demo-rag"]
QID_PATTERN = {"demo-dl": r"\d+", "demo-rag": r"2024-\d+"}
DOCID_PATTERN = {"demo-dl": r"\d+", "demo-rag": r"msmarco_v2\.1_doc_\d+_\d+#\d+_\d+"}
DOMAIN_NAMES = [
    "Health and Medicine",
    "Law, Policy, and Government",
    "Science and Technology",
    "Business and Economics",
    "General Knowledge and Reasoning",
    "Environment and Earth Sciences",
    "Current Affairs and History",
    "Education and Humanities",
    "Arts, Media, and Culture",
]
USPERSONA_FIELDS = {
    "uuid",
    "professional_persona",
    "skills_and_expertise",
    "skills_and_expertise_list",
    "career_goals_and_ambitions",
    "hobbies_and_interests",
    "sex",
    "age",
    "marital_status",
    "education_level",
    "occupation",
    "city",
    "state",
    "cultural_background",
}
CDV_CHOICE_COUNTS = {"MMLU": {4}, "CommonsenseQA": {5}, "OpenbookQA": {4}, "TruthfulQA": set(range(2, 14))}


def tsv_rows(path: Path, columns: int) -> list[list[str]]:
    """Rows of a tab-separated file; every line must have exactly `columns` non-empty fields."""
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split("\t")
        assert len(fields) == columns and all(f.strip() for f in fields), f"{path}:{lineno}: {line!r}"
        rows.append(fields)
    return rows


def topics(dataset: str) -> dict[str, str]:
    return dict(tsv_rows(JUDGING / dataset / "topics.tsv", 2))


def qrels(dataset: str) -> dict[str, dict[str, int]]:
    judged: dict[str, dict[str, int]] = {}
    for line in (JUDGING / dataset / "qrels.txt").read_text(encoding="utf-8").splitlines():
        qid, zero, docid, grade = line.split()
        assert zero == "0" and docid not in judged.get(qid, {}), line
        judged.setdefault(qid, {})[docid] = int(grade)
    return judged


def run_files(dataset: str) -> list[Path]:
    return sorted((JUDGING / dataset / "runs").glob("*.run"))


def parse_run(path: Path) -> dict[str, list[tuple[int, float, str]]]:
    """qid -> [(rank, score, docid)] in file order; checks the TREC 6-column shape and the tag."""
    ranked: dict[str, list[tuple[int, float, str]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        assert len(fields) == 6, f"{path}: {line!r}"
        qid, q0, docid, rank, score, tag = fields
        assert q0 == "Q0" and tag == path.stem, f"{path}: {line!r}"
        ranked.setdefault(qid, []).append((int(rank), float(score), docid))
    return ranked


def ndcg10_per_run(dataset: str) -> dict[str, float]:
    """Mean nDCG@10 over all topics; a run missing a query scores 0 on it (trec_eval semantics)."""
    judged = qrels(dataset)
    evaluator = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut_10"})
    means = {}
    for path in run_files(dataset):
        run = {qid: {docid: score for _, score, docid in rows} for qid, rows in parse_run(path).items()}
        per_query = evaluator.evaluate(run)
        means[path.stem] = sum(per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in judged) / len(judged)
    return means


def test_taxonomy_lists_the_nine_domains_with_descriptions():
    domains = yaml.safe_load(TAXONOMY.read_text(encoding="utf-8"))["domains"]
    assert [d["name"] for d in domains] == DOMAIN_NAMES
    for d in domains:
        assert set(d) == {"name", "description"}
        sentences = [s for s in re.split(r"(?<=\.)\s+", d["description"].strip()) if s]
        assert 1 <= len(sentences) <= 2 and len(d["description"].split()) >= 8, d


@pytest.mark.parametrize("dataset", DATASETS)
def test_topics_have_enough_queries_with_the_collection_qid_style(dataset):
    queries = topics(dataset)
    assert len(queries) >= 8
    assert all(re.fullmatch(QID_PATTERN[dataset], qid) for qid in queries)
    assert len(set(queries.values())) == len(queries)


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_query_has_ten_judged_passages_and_all_four_grades(dataset):
    judged = qrels(dataset)
    assert set(judged) == set(topics(dataset))
    for qid, docs in judged.items():
        assert len(docs) >= 10, qid
        assert set(docs.values()) == {0, 1, 2, 3}, qid
        assert all(re.fullmatch(DOCID_PATTERN[dataset], d) for d in docs), qid


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_judged_docid_has_a_passage_of_web_snippet_length(dataset):
    rows = tsv_rows(JUDGING / dataset / "passages.tsv", 2)
    passages = dict(rows)
    assert len(passages) == len(rows), "duplicate docids in passages.tsv"
    judged_docids = {d for docs in qrels(dataset).values() for d in docs}
    assert judged_docids <= set(passages)
    for docid in judged_docids:
        assert 40 <= len(passages[docid].split()) <= 90, docid


@pytest.mark.parametrize("dataset", DATASETS)
def test_runs_are_well_formed_trec_files_over_known_queries(dataset):
    queries = set(topics(dataset))
    judged_docids = {d for docs in qrels(dataset).values() for d in docs}
    paths = run_files(dataset)
    assert len(paths) >= 10
    retrieved: set[str] = set()
    runs_missing_a_query = 0
    for path in paths:
        ranked = parse_run(path)
        assert set(ranked) <= queries, path
        runs_missing_a_query += set(ranked) != queries
        for qid, rows in ranked.items():
            assert [r for r, _, _ in rows] == list(range(1, len(rows) + 1)), (path, qid)
            assert 10 <= len(rows) <= 20, (path, qid)
            scores = [s for _, s, _ in rows]
            assert all(a > b for a, b in zip(scores, scores[1:], strict=False)), (
                path,
                qid,
                "scores must fall with rank",
            )
            docids = [d for _, _, d in rows]
            assert len(set(docids)) == len(docids), (path, qid)
            assert all(re.fullmatch(DOCID_PATTERN[dataset], d) for d in docids), (path, qid)
            retrieved.update(docids)
    assert runs_missing_a_query >= 1, "one run should lack a query to exercise trec_eval semantics"
    assert retrieved - judged_docids, "runs should retrieve some unjudged docids"


@pytest.mark.parametrize("dataset", DATASETS)
def test_domains_cover_every_query_with_taxonomy_names(dataset):
    domains = dict(tsv_rows(JUDGING / dataset / "domains.tsv", 2))
    assert set(domains) == set(topics(dataset))
    assert set(domains.values()) <= set(DOMAIN_NAMES)


@pytest.mark.parametrize("dataset", DATASETS)
def test_run_metadata_names_existing_runs_and_leaves_one_out(dataset):
    header, *rows = tsv_rows(JUDGING / dataset / "run_metadata.tsv", 2)
    assert header == ["run", "type"]
    runs = {p.stem for p in run_files(dataset)}
    described = [run for run, _ in rows]
    assert len(set(described)) == len(described) and set(described) <= runs
    assert runs - set(described), "one run is left without metadata on purpose"


@pytest.mark.parametrize("dataset", DATASETS)
def test_run_quality_spreads_widely_under_ndcg10(dataset):
    scores = ndcg10_per_run(dataset)
    assert max(scores.values()) - min(scores.values()) >= 0.3, scores
    # a meaningful system ranking needs most runs at distinct quality levels, not a few clusters
    assert len({round(v, 2) for v in scores.values()}) >= len(scores) - 1, scores


def test_personahub_pool_has_one_sentence_personas():
    records = [json.loads(line) for line in (DEMO / "personas" / "personahub.jsonl").read_text().splitlines()]
    assert len(records) >= 60
    assert all(set(r) == {"persona"} and len(r["persona"].split()) >= 8 for r in records)
    assert len({r["persona"] for r in records}) == len(records)


def test_uspersona_pool_has_the_nemotron_fields():
    records = [json.loads(line) for line in (DEMO / "personas" / "uspersona.jsonl").read_text().splitlines()]
    assert len(records) >= 60
    for r in records:
        assert set(r) == USPERSONA_FIELDS, r.get("uuid")
        assert re.fullmatch(r"[0-9a-f]{32}", r["uuid"])
        skills = ast.literal_eval(r["skills_and_expertise_list"])
        assert isinstance(skills, list) and skills and all(isinstance(s, str) for s in skills), r["uuid"]
        assert isinstance(r["age"], int)
        assert all(isinstance(r[k], str) and r[k].strip() for k in USPERSONA_FIELDS - {"age"}), r["uuid"]
    assert len({r["uuid"] for r in records}) == len(records)
    assert len({r["professional_persona"] for r in records}) == len(records)


@pytest.mark.parametrize("source", sorted(CDV_CHOICE_COUNTS))
def test_cdv_questions_have_their_answer_among_the_choices(source):
    items = json.loads((DEMO / "cdv" / f"{source}.json").read_text(encoding="utf-8"))
    assert len(items) >= 8
    for item in items:
        assert {"question", "choices", "answer", "source"} <= set(item), item
        assert item["source"] == source
        assert len(item["choices"]) in CDV_CHOICE_COUNTS[source], item["question"]
        assert len(set(item["choices"])) == len(item["choices"]), item["question"]
        assert item["answer"] in item["choices"], item["question"]
        if source == "MMLU":
            assert item["subject"]
    assert len({i["question"] for i in items}) == len(items)
    if source == "TruthfulQA":
        # Some items keep the source's answer-first order, some do not: the loader must cope with both.
        firsts = {item["choices"][0] == item["answer"] for item in items}
        assert firsts == {True, False}
