"""End-to-end runs of the judging rules (summaries, judge cells, qrels, nDCG) in scratch directories."""

import json
import shutil
from pathlib import Path

import pytest
import pytrec_eval
import yaml

from stressprobe.io import read_jsonl
from stressprobe.persona.data import read_qrels, read_run, read_run_names, read_topics
from stressprobe.persona.evaluation import read_ndcg_table
from tests.support.helpers import ROOT, TINY_CONFIG, run_snakemake, shared_data
from tests.support.paper_dag import job_counts

MODEL = "smollm2-135m"
JUDGMENT_KEYS = {"qid", "docid", "label", "raw", "status", "probs", "expected", "persona"}


def write_config(path: Path, base: Path, edit) -> Path:
    """A copy of config `base` changed by `edit(config)`."""
    config = yaml.safe_load(base.read_text(encoding="utf-8"))
    edit(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def cell_files(workdir: Path, dataset: str, condition: str) -> dict[str, Path]:
    judged = workdir / "results" / "judging" / dataset
    return {
        "judgments": judged / "judgments" / MODEL / f"{condition}.jsonl",
        "usage": judged / "judgments" / MODEL / f"{condition}.usage.json",
        "summary": judged / "judgments" / MODEL / f"{condition}.summary.json",
        "qrels": judged / "qrels" / MODEL / f"{condition}.qrels",
        "ndcg": judged / "ndcg" / MODEL / f"{condition}.tsv",
    }


def test_dry_run_of_the_default_config_lists_one_judge_job_per_cell(workdir):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))["judging"]
    proc = run_snakemake(workdir, "-n", configfile=ROOT / "config" / "config.yaml")
    counts = job_counts(proc.stdout + proc.stderr)
    cells = len(config["datasets"]) * len(config["models"]) * len(config["conditions"])
    assert counts["judge"] == cells
    assert counts["judge_qrels"] == cells
    assert counts["summarize"] == len(config["datasets"])
    assert counts["human_qrels"] == len(config["datasets"])
    # a judge cell's nDCG table comes with its qrels (judge_qrels); `ndcg` scores the human qrels
    assert counts["ndcg"] == len(config["datasets"])


@pytest.mark.slow
def test_cells_run_alone_rerun_nothing_and_cost_no_calls_from_the_cache(workdir):
    conditions = yaml.safe_load(TINY_CONFIG.read_text(encoding="utf-8"))["judging"]["conditions"]
    dataset = "demo-dl"
    fixed = cell_files(workdir, dataset, "fixed/gap")

    # one cell: just it and what it needs (data, summaries), no persona retrieval, no other cell
    proc = run_snakemake(workdir, str(fixed["judgments"].relative_to(workdir)))
    assert fixed["judgments"].is_file() and fixed["usage"].is_file() and fixed["summary"].is_file()
    assert set(job_counts(proc.stdout + proc.stderr)) - {"total"} <= {"prepare_dataset", "summarize", "judge"}
    assert not (workdir / "results" / "judging" / dataset / "personas").exists()
    assert len(list((workdir / "results" / "judging" / dataset / "judgments").rglob("*.jsonl"))) == 1
    again = run_snakemake(workdir, "-n", str(fixed["judgments"].relative_to(workdir)))
    assert "Nothing to be done" in again.stdout + again.stderr

    # every cell of the tiny config, its qrels and nDCG tables, and the human ones
    targets = [str(cell_files(workdir, dataset, c)["ndcg"].relative_to(workdir)) for c in conditions]
    human = f"results/judging/{dataset}/ndcg/human/human/human.tsv"
    run_snakemake(workdir, *targets, human)
    first = {c: check_cell(workdir, dataset, c) for c in conditions}
    again = run_snakemake(workdir, "-n", *targets, human)
    assert "Nothing to be done" in again.stdout + again.stderr
    summaries_usage = workdir / "results" / "judging" / dataset / "summaries.usage.json"
    assert json.loads(summaries_usage.read_text())["calls_made"] > 0

    # everything deleted except the response cache: same results, not one model call
    for child in (workdir / "results").iterdir():
        if child.name != "cache":
            shutil.rmtree(child)
    run_snakemake(workdir, *targets, human)
    assert json.loads(summaries_usage.read_text())["calls_made"] == 0
    for condition in conditions:
        files = cell_files(workdir, dataset, condition)
        usage = json.loads(files["usage"].read_text())
        assert usage["calls_made"] == 0 and usage["cache_hits"] > 0, condition
        assert files["judgments"].read_text() == first[condition], condition


def check_cell(workdir: Path, dataset: str, condition: str) -> str:
    """Judgments, summary counts, qrels and nDCG of one cell agree with each other; returns the judgments."""
    files = cell_files(workdir, dataset, condition)
    records = read_jsonl(files["judgments"])
    pairs = read_jsonl(workdir / "results" / "data" / dataset / "pairs.jsonl")
    assert [(r["qid"], r["docid"]) for r in records] == [(p["qid"], p["docid"]) for p in pairs]
    for record in records:
        assert set(record) >= JUDGMENT_KEYS
        assert (record["status"] == "ok") == (record["label"] in (0, 1, 2, 3))
        assert (record["persona"] is None) == (condition == "baseline/umbrela")
    counts = json.loads(files["summary"].read_text())
    assert counts["pairs"] == len(records)
    assert counts["ok"] + counts["unparsed"] + counts["error"] == len(records)
    qrels_lines = files["qrels"].read_text().splitlines()
    assert len(qrels_lines) == counts["ok"]
    ok = {(r["qid"], r["docid"], r["label"]) for r in records if r["status"] == "ok"}
    assert {(q, d, int(g)) for q, _, d, g in (line.split() for line in qrels_lines)} == ok
    rows = read_ndcg_table(files["ndcg"])
    runs = read_run_names(workdir / "results" / "data" / dataset / "runs.txt")
    qids = read_topics(workdir / "results" / "data" / dataset / "topics.tsv")
    assert {(r["run"], r["qid"]) for r in rows} == {(run, q) for run in runs for q in [*qids, "all"]}
    return files["judgments"].read_text()


def test_external_judgments_are_evaluated_as_a_further_model(workdir, tmp_path):
    source = ROOT / "resources" / "demo" / "judging" / "demo-dl" / "qrels.txt"
    external = tmp_path / "external.qrels"
    # another study's labels: the human ones, each grade moved down by one
    external.write_text(
        "".join(
            f"{q} 0 {d} {max(0, int(g) - 1)}\n"
            for q, _, d, g in (line.split() for line in source.read_text().splitlines())
        )
    )

    def register(config):
        config["judging"]["external"] = {"paper": {"demo-dl": {"baseline/umbrela": str(external)}}}

    configfile = write_config(tmp_path / "config.yaml", TINY_CONFIG, register)
    target = "results/judging/demo-dl/ndcg/paper/baseline/umbrela.tsv"
    proc = run_snakemake(workdir, target, configfile=configfile)
    assert set(job_counts(proc.stdout + proc.stderr)) - {"total"} == {
        "prepare_dataset",
        "external_qrels",
        "ndcg",
    }
    qrels = read_qrels(workdir / "results/judging/demo-dl/qrels/paper/baseline/umbrela.qrels")
    selected = read_topics(workdir / "results/data/demo-dl/topics.tsv")
    full = read_qrels(external)
    assert set(qrels) == set(selected)
    assert qrels == {q: full[q] for q in selected}

    rows = read_ndcg_table(workdir / target)
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"})
    run_dir = workdir / "results/data/demo-dl/runs"
    for name in read_run_names(workdir / "results/data/demo-dl/runs.txt"):
        scores = expected.evaluate(read_run(run_dir / f"{name}.run"))
        for row in rows:
            if row["run"] == name and row["qid"] != "all":
                assert row["ndcg_cut_10"] == pytest.approx(scores[row["qid"]]["ndcg_cut_10"], abs=1e-6)


def test_bad_external_qrels_and_name_clashes_are_one_line_errors(workdir, tmp_path):
    bad = tmp_path / "bad.qrels"
    bad.write_text("q1 0 d1 2\nq1 0 d2\n")

    def register(name, path):
        def edit(config):
            config["judging"]["external"] = {name: {"demo-dl": {"fixed/gap": str(path)}}}

        return edit

    configfile = write_config(tmp_path / "bad.yaml", TINY_CONFIG, register("paper", bad))
    proc = run_snakemake(
        workdir, "results/judging/demo-dl/qrels/paper/fixed/gap.qrels", configfile=configfile, check=False
    )
    assert proc.returncode != 0
    assert f"error: {bad}:2: expected 4 fields" in proc.stderr

    clash = write_config(tmp_path / "clash.yaml", TINY_CONFIG, register(MODEL, bad))
    proc = run_snakemake(workdir, "-n", configfile=clash, check=False)
    assert proc.returncode != 0
    assert f"error: config key 'judging.external.{MODEL}'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_dl20_from_local_files_two_queries_ten_passages(workdir, tmp_path):
    dl20 = shared_data("dl20")

    def absolute(config):
        for key in ("topics", "qrels", "passages", "runs"):
            config["judging"]["datasets"]["dl20"][key] = str(
                dl20 / Path(config["judging"]["datasets"]["dl20"][key]).name
            )

    configfile = write_config(tmp_path / "dl20.yaml", ROOT / "tests" / "configs" / "dl20.yaml", absolute)
    conditions = yaml.safe_load(configfile.read_text())["judging"]["conditions"]
    targets = [f"results/judging/dl20/ndcg/{MODEL}/{c}.tsv" for c in conditions]
    human = "results/judging/dl20/ndcg/human/human/human.tsv"
    run_snakemake(workdir, *targets, human, configfile=configfile)

    topics = read_topics(workdir / "results/data/dl20/topics.tsv")
    pairs = read_jsonl(workdir / "results/data/dl20/pairs.jsonl")
    assert len(topics) == 2 and len(pairs) == 20
    for condition in conditions:
        check_cell(workdir, "dl20", condition)

    # the human table is trec_eval's nDCG@10 of the original run files under the selected human qrels
    qrels = read_qrels(workdir / "results/judging/dl20/qrels/human/human/human.qrels")
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"})
    bm25 = {q: docs for q, docs in read_run(dl20 / "runs" / "bm25.run").items() if q in topics}
    expected = evaluator.evaluate(bm25)
    rows = {(r["run"], r["qid"]): r["ndcg_cut_10"] for r in read_ndcg_table(workdir / human)}
    for qid in topics:
        assert rows["bm25", qid] == pytest.approx(expected[qid]["ndcg_cut_10"], abs=1e-6)
    assert rows["bm25", "all"] == pytest.approx(sum(expected[q]["ndcg_cut_10"] for q in topics) / 2, abs=1e-6)
