"""Persona pools, taxonomy and domains, and retrieval of the query/domain/orthogonal roles."""

import json
import logging

import numpy as np
import pandas as pd
import pytest

from stressprobe.errors import StressprobeError
from stressprobe.io import read_jsonl
from stressprobe.persona.pools import (
    ROLES,
    USPERSONA_PREFIX,
    Domain,
    assign_domains,
    build_pool,
    domain_texts,
    domains_for_queries,
    iter_pool,
    load_hf_records,
    load_pool_records,
    read_domain_mapping,
    read_persona_records,
    read_taxonomy,
    select_personas,
    uspersona_text,
)
from stressprobe.persona.table2 import normalise, sha256
from tests.support.helpers import run_snakemake

DEMOGRAPHICS = {
    "sex": "Female",
    "age": 47,
    "marital_status": "MARITALX",
    "education_level": "EDUCATIONX",
    "occupation": "OCCUPATIONX",
    "city": "CITYX",
    "state": "STATEX",
    "cultural_background": "CULTUREX",
    "hobbies_and_interests": "HOBBYX",
    "career_goals_and_ambitions": "GOALX",
    "professional_persona": "PROFESSIONALX",
}


def us_record(**fields):
    return {"uuid": fields.pop("uuid", "u1"), **DEMOGRAPHICS, **fields}


def unit(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_uspersona_text_uses_only_skills():
    record = us_record(
        skills_and_expertise_list="['Budget planning', 'Python', \"Nurses' scheduling\"]",
        skills_and_expertise="free text that should lose to the list",
    )
    text = uspersona_text(record)
    assert text == USPERSONA_PREFIX + "Budget planning, Python, Nurses' scheduling"
    for value in DEMOGRAPHICS.values():
        assert str(value) not in text
    # The paper's Table 2 ends each USPersona text with "." (personas.sources.uspersona.period).
    assert uspersona_text(record, period=True) == text + "."
    # professional_persona (and every other non-skills field) is never read
    assert uspersona_text({**record, "professional_persona": "A nurse."}) == text
    pool = build_pool([record], "uspersona", "src")
    assert pool == list(iter_pool([record], "uspersona", "src")) and pool[0]["text"] == text
    assert next(iter_pool([record], "uspersona", "src", period=True))["text"] == text + "."


def test_uspersona_falls_back_to_the_free_text_skills():
    record = us_record(
        skills_and_expertise_list="not a list [", skills_and_expertise="  Welding and\nmetal work "
    )
    assert uspersona_text(record) == USPERSONA_PREFIX + "Welding and metal work"
    assert uspersona_text(us_record(skills_and_expertise_list="[]", skills_and_expertise="")) is None


def test_pool_without_usable_skills_is_an_error():
    records = [us_record(uuid=f"u{i}") for i in range(3)]  # demographics only
    with pytest.raises(
        StressprobeError, match="pool.jsonl: no record has a usable 'skills_and_expertise_list or"
    ):
        build_pool(records, "uspersona", "pool.jsonl")


def test_pool_skips_and_counts_unusable_and_repeated_records(caplog):
    records = [
        us_record(uuid="a", skills_and_expertise_list=["x", "y"]),
        us_record(uuid="b"),
        us_record(uuid="c", skills_and_expertise_list=["x", "y"]),
        us_record(uuid="d", skills_and_expertise="z"),
    ]
    with caplog.at_level(logging.INFO):
        pool = build_pool(records, "uspersona", "src")
    assert pool == [
        {"pid": "a", "text": USPERSONA_PREFIX + "x, y"},
        {"pid": "d", "text": USPERSONA_PREFIX + "z"},
    ]
    assert "1 records without a usable" in caplog.text and "1 repeated persona texts" in caplog.text


def test_personahub_pool_uses_positions_as_ids():
    pool = build_pool(
        [{"persona": "A chef."}, {"persona": " "}, {"persona": "A  pilot\n"}], "personahub", "ph"
    )
    assert pool == [{"pid": "0", "text": "A chef."}, {"pid": "2", "text": "A pilot"}]


def test_local_pools_jsonl_and_parquet(tmp_path):
    rows = [
        us_record(uuid="p1", skills_and_expertise_list=["a", "b"]),
        us_record(uuid="p2", skills_and_expertise="c"),
    ]
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pytest.importorskip("pyarrow", reason="Parquet pools need pyarrow (the 'download' extra)")
    pd.DataFrame(rows).to_parquet(tmp_path / "pool.parquet")
    from_jsonl = build_pool(read_persona_records(tmp_path / "pool.jsonl"), "uspersona", "j")
    from_parquet = build_pool(read_persona_records(tmp_path / "pool.parquet"), "uspersona", "p")
    assert (
        from_jsonl
        == from_parquet
        == [
            {"pid": "p1", "text": USPERSONA_PREFIX + "a, b"},
            {"pid": "p2", "text": USPERSONA_PREFIX + "c"},
        ]
    )
    source = {"path": str(tmp_path / "pool.jsonl"), "limit": 1, "hf_dataset": None}
    assert len(list(load_pool_records(source, "k"))) == 1


def test_hf_records_always_stream_at_the_pinned_revision():
    calls = []

    def fake_load(name, config, split, streaming, revision):
        calls.append((name, config, split, streaming, revision))
        return iter([{"persona": f"p{i}"} for i in range(10)])

    records = load_hf_records(
        "proj-persona/PersonaHub", "persona", "train", 3, load=fake_load, revision="abc"
    )
    assert list(records) == [{"persona": "p0"}, {"persona": "p1"}, {"persona": "p2"}]
    assert len(list(load_hf_records("x/y", None, "train", None, load=fake_load))) == 10
    assert calls == [
        ("proj-persona/PersonaHub", "persona", "train", True, "abc"),
        ("x/y", None, "train", True, None),
    ]


def test_select_personas_roles_and_candidates():
    pool = [{"pid": f"p{i}", "text": f"persona {i}"} for i in range(5)]
    pool_vectors = unit([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0.2, 1], [-1, 0, 0]])
    query_vectors = unit([[1, 0.05, 0], [0, 0, 1]])
    domain_vectors = {"Health": unit([[0, 1, 0.1]])[0], "Sports": unit([[0, 0, 1]])[0]}
    records = select_personas(
        ["q1", "q2"], query_vectors, {"q1": "Health", "q2": "Health"}, domain_vectors, pool, pool_vectors, k=3
    )
    by = {(r["qid"], r["role"]): r for r in records}
    assert [r["role"] for r in records] == ["query", "domain", "orthogonal"] * 2
    for (qid, role), record in by.items():
        q = ["q1", "q2"].index(qid)
        target = domain_vectors["Health"] if role == "domain" else query_vectors[q]
        sims = pool_vectors @ target
        expected = np.argsort(sims)[:3] if role == "orthogonal" else np.argsort(-sims)[:3]
        assert [c["pid"] for c in record["candidates"]] == [f"p{i}" for i in expected]
        assert [c["similarity"] for c in record["candidates"]] == pytest.approx(sims[expected], abs=1e-6)
        assert (record["pid"], record["persona"]) == (
            record["candidates"][0]["pid"],
            record["candidates"][0]["text"],
        )
        assert record["similarity"] == record["candidates"][0]["similarity"]
    assert by["q1", "query"]["pid"] == "p0" and by["q1", "orthogonal"]["pid"] == "p4"


TAXONOMY = (
    "domains:\n  - {name: Health, description: medicine and care}\n  - {name: Sports, description: games}\n"
)


def test_taxonomy_and_domain_texts(tmp_path):
    path = tmp_path / "domains.yaml"
    path.write_text(TAXONOMY)
    taxonomy = read_taxonomy(path)
    assert taxonomy == [Domain("Health", "medicine and care"), Domain("Sports", "games")]
    assert domain_texts(["Sports", "Health", "Sports"], taxonomy) == {
        "Health": "Health: medicine and care",
        "Sports": "Sports: games",
    }
    assert domain_texts(["Sports"], None) == {"Sports": "Sports"}
    path.write_text("domains: [{description: x}]\n")
    with pytest.raises(StressprobeError, match=r"domains\[0\] needs a 'name'"):
        read_taxonomy(path)


def test_assign_domains_by_similarity():
    domains = [Domain("A", ""), Domain("B", "")]
    assigned = assign_domains(["q1", "q2"], unit([[1, 0.2], [0.1, 1]]), domains, unit([[1, 0], [0, 1]]))
    assert {q: name for q, (name, _) in assigned.items()} == {"q1": "A", "q2": "B"}
    assert assigned["q1"][1] == pytest.approx(float(unit([[1, 0.2]])[0][0]))


def test_domains_for_queries_from_taxonomy_or_mapping(tmp_path):
    taxonomy = tmp_path / "domains.yaml"
    taxonomy.write_text(TAXONOMY)
    topics = {"q1": "flu symptoms", "q2": "football rules"}
    vectors = {"flu symptoms": [1, 0], "football rules": [0, 1], "Health: medicine and care": [1, 0.1]}

    def embed(texts):
        return unit([vectors.get(t, [0.1, 1]) for t in texts])

    assert domains_for_queries("d", topics, None, str(taxonomy), embed) == {"q1": "Health", "q2": "Sports"}
    mapping = tmp_path / "map.tsv"
    mapping.write_text("q2\tHealth\nq1\tSports\nq9\tHealth\n")

    def no_embedding(texts):
        raise AssertionError("a mapping file needs no embeddings")

    assert domains_for_queries("d", topics, str(mapping), str(taxonomy), no_embedding) == {
        "q1": "Sports",
        "q2": "Health",
    }


def test_domain_mapping_errors(tmp_path):
    mapping = tmp_path / "map.tsv"
    mapping.write_text("q1\tHealth\nq2\tAstrology\n")
    with pytest.raises(StressprobeError, match=r"map\.tsv:2: domain 'Astrology' is not in the taxonomy"):
        read_domain_mapping(mapping, ["q1", "q2"], ["Health", "Sports"])
    with pytest.raises(StressprobeError, match=r"map\.tsv: query 'q3' has no domain"):
        read_domain_mapping(mapping, ["q1", "q3"], None)
    assert read_domain_mapping(mapping, ["q2"], None) == {"q2": "Astrology"}  # no taxonomy: names unchecked


def test_no_domain_mapping_and_no_taxonomy_is_an_error(tmp_path):
    with pytest.raises(StressprobeError, match="dataset 'd': no 'domains' file and no taxonomy at"):
        domains_for_queries("d", {"q": "t"}, None, str(tmp_path / "missing.yaml"), lambda texts: None)


@pytest.mark.slow
def test_workflow_builds_dataset_domains_and_personas(workdir):
    """The data and persona rules end to end on a tiny local dataset; a rerun does nothing."""
    inputs = workdir / "in"
    (inputs / "runs").mkdir(parents=True)
    (inputs / "topics.tsv").write_text("q1\thow to treat the flu\nq2\tfootball offside rule\n")
    (inputs / "qrels.txt").write_text("q1 0 d1 3\nq1 0 d#2 0\nq2 0 d_3 2\n")
    (inputs / "passages.tsv").write_text("d1\tRest helps.\nd#2\tCats.\nd_3\tOffside means...\n")
    (inputs / "runs" / "a.run").write_text("q1 Q0 d1 1 2 a\nq2 Q0 d_3 1 1 a\n")
    (inputs / "tax.yaml").write_text(
        "domains:\n  - {name: Health, description: diseases and treatment}\n"
        "  - {name: Sports, description: games}\n"
    )
    (inputs / "ph.jsonl").write_text(
        "".join(json.dumps({"persona": p}) + "\n" for p in ["A nurse.", "A coach."])
    )
    config = workdir / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "personas": {"sources": {"personahub": {"path": "in/ph.jsonl"}}, "taxonomy": "in/tax.yaml"},
                "judging": {
                    "datasets": {
                        "tiny": {
                            "topics": "in/topics.tsv",
                            "qrels": "in/qrels.txt",
                            "passages": "in/passages.tsv",
                            "runs": "in/runs",
                        }
                    }
                },
            }
        )
    )
    target = "results/judging/tiny/personas/personahub.jsonl"
    run_snakemake(workdir, target, configfile=config)
    assert (workdir / "results/data/tiny/domains.tsv").read_text() == "q1\tHealth\nq2\tSports\n"
    records = read_jsonl(workdir / target)
    assert [(r["qid"], r["role"]) for r in records] == [(q, role) for q in ("q1", "q2") for role in ROLES]
    assert {r["qid"]: r["pid"] for r in records if r["role"] == "query"} == {"q1": "0", "q2": "1"}
    assert "Nothing to be done" in run_snakemake(workdir, target, configfile=config).stderr
    # The Table 2 check on this run: stand-in "printed" personas of q1, by sha256 (none of the paper's text).
    printed = {"query": "A nurse.", "domain": "a  nurse", "orthogonal": "A sailor."}
    (inputs / "t2.tsv").write_text(
        "source\trole\tprinted_sha256\tnormalised_sha256\n"
        + "".join(f"personahub\t{r}\t{sha256(t)}\t{sha256(normalise(t))}\n" for r, t in printed.items())
        + f"uspersona\tquery\t{sha256('x')}\t{sha256('x')}\n"  # a pool this run does not compare
    )
    settings = json.loads(config.read_text())
    settings["analysis"] = {
        "table2_check": {"dataset": "tiny", "qid": "q1", "values": "in/t2.tsv", "sources": ["personahub"]}
    }
    config.write_text(json.dumps(settings))
    run_snakemake(workdir, "results/tables/table2_check.csv", configfile=config)
    check = pd.read_csv(workdir / "results/tables/table2_check.csv", keep_default_na=False)
    assert check[["role", "match", "text match"]].values.tolist() == [
        ["query", "selected", "exact"],
        ["domain", "selected", "normalised"],
        ["orthogonal", "no", ""],
    ]
