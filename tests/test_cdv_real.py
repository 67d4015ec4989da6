"""The CDV search on the real small model, and the workflow's CDV part end to end with the success audit."""

import pytest
import yaml

from stressprobe.cdv.questions import prepare_questions
from stressprobe.cdv.search import SearchSettings, run_search, search_records
from stressprobe.cdv.search_calls import audit_successes
from stressprobe.config import validate_config
from stressprobe.io import read_jsonl
from stressprobe.llm import answer_prefill, open_client
from tests.support.helpers import ROOT, TINY_CONFIG, run_snakemake, shared_data

MODELS = yaml.safe_load(TINY_CONFIG.read_text())["models"]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
SETTINGS = SearchSettings(
    samples=2, max_calls_per_question=2, greedy_audit=True, victim_max_tokens=32, proxy_max_tokens=32
)
STATUSES = {
    "root",
    "success",
    "expanded",
    "queued",
    "unexplored",
    "pruned_all_correct",
    "pruned_monotone",
    "discarded_semantic",
    "discarded_length",
    "discarded_proxy",
    "unparsed",
    "error",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["MMLU", "CommonsenseQA", "OpenbookQA", "TruthfulQA"])
def test_real_model_search_on_two_questions(tmp_path, name):
    questions = prepare_questions(
        name, str(shared_data("cdv", f"{name}.json")), None, None, "test", 2, seed=42
    )
    with open_client(MODELS, "smollm2-135m", tmp_path / "cache.sqlite") as client:
        states = run_search(questions, {"proxy": client, "semantic": client, "victim": client}, SETTINGS)
        records = search_records(states)
    # A fresh cache: the audit recomputes the greedy answers the search recorded, and gets the same ones.
    with open_client(MODELS, "smollm2-135m", tmp_path / "audit.sqlite") as client:
        failures = audit_successes(records, questions, client, SETTINGS)
    assert {r["qid"] for r in records} == {q["qid"] for q in questions}
    assert {r["status"] for r in records} <= STATUSES
    for record in records:
        if record["success_rate"] is not None:
            assert len(record["answers"]) == SETTINGS.samples
        if record["depth"]:
            assert record["question"].endswith(
                next(q["question"] for q in questions if q["qid"] == record["qid"])
            )
    assert {f["node_id"] for f in failures} == {r["node_id"] for r in records if r["greedy_audit"] == "right"}


def cdv_targets():
    names = ["cdv_search", "cdv_accuracy", "cdv_baselines", "cdv_mitigation", "cdv_classifier"]
    files = [f"results/tables/{n}.csv" for n in names]
    figures = ("cdv_matrix", "cdv_distribution", "cdv_agreement", "cdv_depth")
    files += [f"results/figures/{n}.png" for n in figures]
    return files + ["results/cdv/dpo/train.jsonl"]


@pytest.mark.slow
def test_tiny_cdv_workflow_reruns_nothing_and_the_audit_reproduces_the_search(workdir, tmp_path):
    run_snakemake(workdir, *cdv_targets())
    again = run_snakemake(workdir, "-n", *cdv_targets())
    assert "Nothing to be done" in again.stdout + again.stderr
    # The audit asks exactly what the workflow's search asked: same samples, length, seed and answer prefill.
    full = validate_config(yaml.safe_load(TINY_CONFIG.read_text()), SCHEMA)
    config = full["cdv"]
    assert config["search"]["greedy_audit"]
    settings = SearchSettings(
        samples=config["search"]["samples"],
        victim_max_tokens=config["search"]["victim_max_tokens"],
        eval_temperature=config["eval"]["temperature"],
        seed=full["seed"],
        victim_prefill=answer_prefill(MODELS["smollm2-135m"], config["answer_prefix"]),
    )
    for dataset in config["datasets"]:
        questions = read_jsonl(workdir / f"results/cdv/data/{dataset}.jsonl")
        records = read_jsonl(workdir / f"results/cdv/{dataset}/smollm2-135m/smollm2-135m/search.jsonl")
        # A fresh cache: the victim recomputes its greedy answers instead of reading the search's back.
        with open_client(MODELS, "smollm2-135m", tmp_path / f"audit-{dataset}.sqlite") as client:
            failures = audit_successes(records, questions, client, settings)
        right = {r["node_id"] for r in records if r["greedy_audit"] == "right"}
        assert {f["node_id"] for f in failures} == right
