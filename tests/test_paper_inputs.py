"""The persona paper's inputs through the workflow: the summary template fetched from a URL with a pinned
sha256 (a local HTTP server serves a stand-in of the released file's structure) and sent exactly as the
released code sends it, and a dataset that differs from what config/paper.yaml pins stopped with one line
before any model call (or accepted on purpose)."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
import yaml

from stressprobe.errors import StressprobeError
from stressprobe.io import read_jsonl
from stressprobe.persona.data import read_runs_dir
from stressprobe.persona.pins import check_pinned, check_systems, pinned_queries
from tests.support.api_workdir import DATASET, error_lines, run_workflow, write_api_config, write_judging_data
from tests.support.file_server import FileServer
from tests.support.helpers import ROOT, make_workdir, shared_data
from tests.support.openai_server import OpenAIServer

# A stand-in of the released summary template's structure (instructions, then the document at {DOC});
# the words are the test's own.
STAND_IN = "Summarize the document below in about 80 tokens; add nothing.\nDocument:\n{DOC}"
SUMMARIES = "results/judging/tiny/summaries.jsonl"
PAPER = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def served_summary_template(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    data = STAND_IN.encode()
    (served / "summarization_stand_in.txt").write_bytes(data)
    with FileServer(served) as files:
        yield files.url("summarization_stand_in.txt"), hashlib.sha256(data).hexdigest()


def summary_config(workdir, base_url, url, sha256):
    """The API test config summarizing the tiny dataset with the served template and the paper's settings."""
    judging = PAPER["judging"]
    return write_api_config(
        workdir,
        base_url,
        {
            f"judging.datasets.{DATASET}.summarize": True,
            "judging.summarizer": "api",
            "sources": {"summary_stand_in": {"url": url, "sha256": sha256}},
            "judging.summary_prompt": "source:summary_stand_in",
            "judging.summary_max_tokens": judging["summary_max_tokens"],
            "cdv.enabled": False,
        },
    )


def test_every_summary_request_is_the_fetched_template_filled_in_as_one_user_message(
    tmp_path, served_summary_template
):
    url, sha256 = served_summary_template
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    with OpenAIServer() as server:
        config = summary_config(workdir, server.base_url, url, sha256)
        run_workflow(workdir, config, SUMMARIES)
        bodies = [json.loads(key) for key in server.requests]
    fetched = workdir / "results" / "sources" / "summary_stand_in" / "summarization_stand_in.txt"
    assert fetched.read_bytes() == STAND_IN.encode()
    passages = dict(
        line.split("\t", 1) for line in (workdir / "data" / "passages.tsv").read_text().splitlines()
    )
    # As the released code sends it: the template with the document at {DOC}, the only message, greedy,
    # at most 300 tokens.
    expected = sorted(
        json.dumps([{"role": "user", "content": STAND_IN.replace("{DOC}", p)}], sort_keys=True)
        for p in passages.values()
    )
    assert sorted(json.dumps(b["messages"], sort_keys=True) for b in bodies) == expected
    assert {(b["temperature"], b["max_tokens"]) for b in bodies} == {(0.0, 300)}
    assert len(read_jsonl(workdir / SUMMARIES)) == len(passages)


def test_a_summary_template_checksum_mismatch_stops_with_one_line_before_any_call(
    tmp_path, served_summary_template
):
    url, sha256 = served_summary_template
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    wrong = "e" * 64
    with OpenAIServer() as server:
        config = summary_config(workdir, server.base_url, url, wrong)
        run = run_workflow(workdir, config, SUMMARIES, check=False)
        calls = server.total_requests
    assert run.returncode != 0 and "Traceback" not in run.stderr
    errors = error_lines(run.stderr)
    assert len(errors) == 1, run.stderr[-3000:]
    assert errors[0].startswith("error: config key 'sources.summary_stand_in.sha256'")
    assert sha256 in errors[0] and wrong in errors[0]
    assert calls == 0 and not (workdir / SUMMARIES).exists()


# ---- pinned inputs ----


def pinned_dl20(**changes):
    """config/paper.yaml's DL20 entry made local (the test's files), with `changes` applied."""
    entry = {k: v for k, v in PAPER["judging"]["datasets"]["dl20"].items() if k != "ir_datasets_id"}
    files = {"topics": "data/topics.tsv", "qrels": "data/qrels.txt", "passages": "data/passages.tsv"}
    entry.update({"source": "local", **files, "runs": "data/runs", **changes})
    return entry


def write_dl20_like(workdir, qids, runs):
    """A dataset of the given query ids (two passages each, grades 0-3 over them) and `runs` run files."""
    data = workdir / "data"
    (data / "runs").mkdir(parents=True, exist_ok=True)
    topics, qrels, passages, lines = [], [], [], []
    for i, qid in enumerate(qids):
        topics.append(f"{qid}\tquery number {i}\n")
        for p in range(2):
            qrels.append(f"{qid} 0 {qid}p{p} {(i + p) % 4}\n")
            passages.append(f"{qid}p{p}\tpassage {p} of query {i}\n")
            lines.append(f"{qid} Q0 {qid}p{p} {p + 1} {2 - p} run\n")
    (data / "topics.tsv").write_text("".join(topics))
    (data / "qrels.txt").write_text("".join(qrels))
    (data / "passages.tsv").write_text("".join(passages))
    for r in range(runs):
        (data / "runs" / f"r{r}.run").write_text("".join(lines))


def paper_dl20_qids() -> list[str]:
    return [str(q) for q in PAPER["judging"]["datasets"]["dl20"]["expect"]["qids"]]


def summarizing_dl20(workdir, qids, base_url, edits=None):
    """A workdir whose DL20-like dataset (59 runs) the API model summarizes under the paper's pins; its
    config file."""
    write_dl20_like(make_workdir(workdir), qids, runs=59)
    pinned = {"judging.datasets": {"dl20": pinned_dl20()}, "judging.summarizer": "api", "cdv.enabled": False}
    return write_api_config(workdir, base_url, {**pinned, **(edits or {})})


def test_a_dataset_with_53_queries_under_the_paper_config_is_refused_in_one_line_before_any_call(tmp_path):
    workdir, qids = tmp_path / "work", paper_dl20_qids()
    with OpenAIServer() as server:
        config = summarizing_dl20(workdir, qids[:53], server.base_url)
        run = run_workflow(workdir, config, "results/judging/dl20/summaries.jsonl", check=False)
        calls = server.total_requests
    assert run.returncode != 0 and "Traceback" not in run.stderr
    errors = error_lines(run.stderr)
    assert len(errors) == 1, run.stderr[-3000:]
    assert errors[0] == (
        f"error: dataset 'dl20': expected 54 queries, found 53; expected the paper's 54 query ids, found "
        f"missing {qids[53]} (config key 'judging.datasets.dl20.expect'); use the paper's files, or accept "
        "the difference on purpose with 'judging.datasets.dl20.accept: ['queries', 'qids']'"
    )
    assert calls == 0
    assert not (workdir / "results" / "data" / "dl20" / "pairs.jsonl").exists()


def test_pins_name_each_difference_and_accept_takes_it_on_purpose():
    qrels = {"a": {"x": 0, "y": 2}, "b": {"x": 1}}
    expect = {"queries": 2, "qids": ["a", "b"], "runs": 3, "grades": [0, 1, 2, 3]}
    with pytest.raises(StressprobeError) as info:
        check_pinned("d", expect, [], ["a", "b"], qrels, ["r1", "r2"])
    message = str(info.value)
    assert "expected 3 runs, found 2; expected grades [0, 1, 2, 3], found [0, 1, 2]" in message
    assert "'judging.datasets.d.accept: ['runs', 'grades']'" in message and "\n" not in message
    assert check_pinned("d", expect, ["runs", "grades"], ["a", "b"], qrels, ["r1", "r2"]) == [
        "expected 3 runs, found 2",
        "expected grades [0, 1, 2, 3], found [0, 1, 2]",
    ]
    assert check_pinned("d", {}, [], ["a"], qrels, ["r1"]) == []  # nothing pinned: nothing checked
    with pytest.raises(StressprobeError, match=r"'judging\.datasets\.d\.accept': unknown item 'run'"):
        check_pinned("d", expect, ["run"], ["a", "b"], qrels, ["r1", "r2", "r3"])


def test_the_real_dl20_files_meet_the_paper_pins_but_their_39_runs(tmp_path):
    """Through the prepare job: the shared DL20 data has the paper's 54 queries and grades, and 39 of the
    59 official runs, a difference accepted on purpose with `accept: [runs]`."""
    dl20 = shared_data("dl20")
    workdir = make_workdir(tmp_path / "work")
    entry = pinned_dl20(
        topics=str(dl20 / "topics.tsv"),
        qrels=str(dl20 / "qrels.txt"),
        passages=str(dl20 / "passages.tsv"),
        runs=str(dl20 / "runs"),
        accept=["runs"],
    )
    config = write_api_config(workdir, None, {"judging.datasets": {"dl20": entry}, "cdv.enabled": False})
    run_workflow(workdir, config, "results/data/dl20/topics.tsv")
    log = (workdir / "results" / "logs" / "data" / "dl20" / "prepare.log").read_text()
    assert "accepted on purpose (judging.datasets.dl20.accept): expected 59 runs, found 39" in log
    assert len((workdir / "results" / "data" / "dl20" / "topics.tsv").read_text().splitlines()) == 54


def test_table7_systems_that_name_no_run_are_refused_at_prepare_time_before_any_call(tmp_path):
    workdir = tmp_path / "work"
    # The paper's Table 7 names for DL20; the runs here are r0 … r58.
    systems = {"analysis.representative_systems": {"dl20": ["r1", "r5*", "fr_pass_roberta"]}}
    with OpenAIServer() as server:
        config = summarizing_dl20(workdir, paper_dl20_qids(), server.base_url, systems)
        run = run_workflow(workdir, config, "results/judging/dl20/summaries.jsonl", check=False)
        calls = server.total_requests
    assert run.returncode != 0 and "Traceback" not in run.stderr
    errors = error_lines(run.stderr)
    assert errors == [
        "error: analysis.representative_systems.dl20: 'fr_pass_roberta' matches no run of the dataset (59 "
        "runs); fix the name or end a family prefix with '*', or add the run files"
    ], run.stderr[-3000:]
    assert calls == 0
    assert not (workdir / "results" / "data" / "dl20" / "pairs.jsonl").exists()


def test_trec_archives_named_input_tag_gz_are_read_as_runs(tmp_path):
    lines = "q1 Q0 d1 1 2.5 tagA\nq1 Q0 d2 2 1.0 tagA\n"
    with gzip.open(tmp_path / "input.fr_pass_roberta.gz", "wt") as handle:
        handle.write(lines)
    (tmp_path / "pash_r1.run").write_text(lines)
    (tmp_path / "SOURCES.tsv").write_text("not a run\n")
    runs = read_runs_dir(tmp_path)
    assert runs == {
        "fr_pass_roberta": {"q1": {"d1": 2.5, "d2": 1.0}},
        "pash_r1": {"q1": {"d1": 2.5, "d2": 1.0}},
    }
    check_systems("dl20", ["fr_pass_roberta", "pash_*"], runs)
    with pytest.raises(StressprobeError, match=r"'bigIR-DCT-T5-F' matches no run of the dataset \(2 runs\)"):
        check_systems("dl20", ["bigIR-DCT-T5-F"], runs)
    (tmp_path / "fr_pass_roberta.run").write_text(lines)
    with pytest.raises(StressprobeError, match="names the same run 'fr_pass_roberta'"):
        read_runs_dir(tmp_path)


def test_rag24_is_pinned_to_the_86_ids_whose_qrels_have_a_relevant_label_and_a_count_never_meets_them():
    rag24 = PAPER["judging"]["datasets"]["rag24"]
    pinned = [str(q) for q in rag24["expect"]["qids"]]
    assert rag24["queries"] == "pinned" and len(set(pinned)) == 86 == rag24["expect"]["queries"]
    assert pinned_queries("rag24", "pinned", rag24["expect"]) == pinned
    with pytest.raises(StressprobeError, match=r"'judging.datasets.rag24.queries': 86 draws a seeded sample"):
        pinned_queries("rag24", 86, rag24["expect"])
    with pytest.raises(StressprobeError, match=r"'pinned' needs 'judging.datasets.dl20.expect.qids'"):
        pinned_queries("dl20", "pinned", {"queries": 54})
    assert pinned_queries("dl20", 5, {"queries": 5}) == 5  # no ids pinned: a sample is allowed
    qrels = shared_data("rag24", "qrels.txt")
    best: dict[str, int] = {}
    for line in qrels.read_text().splitlines():
        qid, _, _, grade = line.split()
        best[qid] = max(best.get(qid, 0), int(grade))
    assert len(best) == 89
    assert sorted(q for q, g in best.items() if g > 0) == sorted(pinned)
    assert sorted(q for q, g in best.items() if g == 0) == ["2024-133137", "2024-133810", "2024-36302"]
