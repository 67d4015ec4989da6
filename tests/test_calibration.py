"""Batch calibration of judge labels (stressprobe.persona.calibration): the prior, the argmax, the records."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from stressprobe.config import validate_config
from stressprobe.llm import Response
from stressprobe.persona.calibration import calibrate_records, calibrated_label, label_prior
from stressprobe.persona.judging import judgment_record
from tests.support.helpers import ROOT, TINY_CONFIG, run_snakemake

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def dist(p0: float, p1: float, p2: float, p3: float) -> dict[str, float]:
    return {"0": p0, "1": p1, "2": p2, "3": p3}


def record(label, probs, status="ok"):
    return {"qid": "q", "docid": "d", "label": label, "raw": f"##final score: {label}", "status": status,
            "probs": probs, "expected": None, "error": None, "label_source": "parsed"}  # fmt: skip


def test_prior_is_the_mean_probability_of_each_label():
    prior = label_prior([dist(0.9, 0.1, 0, 0), dist(0.7, 0.1, 0.2, 0)])
    assert prior == pytest.approx(dist(0.8, 0.1, 0.1, 0))


def test_the_label_that_most_exceeds_the_prior_wins():
    prior = dist(0.8, 0.1, 0.08, 0.02)
    # The model says 0 (p = 0.7), but 3 is 5x above its usual share, 0 is below it.
    assert calibrated_label(dist(0.7, 0.1, 0.1, 0.1), prior) == "3"
    # log-ratios by hand: 0 -> log(0.7/0.8), 3 -> log(0.1/0.02)
    assert math.log(0.1 / 0.02) > math.log(0.1 / 0.08) > math.log(0.7 / 0.8)


def test_a_label_outside_the_top_k_is_never_chosen_and_ties_go_to_the_likelier_then_lower_grade():
    prior = dist(0.5, 0.25, 0.25, 0.0)
    assert calibrated_label(dist(1.0, 0, 0, 0), prior) == "0"
    # equal ratios for 1 and 2 (both 0.5 / 0.25), equal probabilities: the lower grade
    assert calibrated_label(dist(0, 0.5, 0.5, 0), prior) == "1"


def test_one_batch_member_alone_keeps_its_own_argmax():
    only = dist(0.1, 0.6, 0.3, 0)
    assert calibrated_label(only, label_prior([only])) == "1"


def test_calibrated_records_keep_the_answer_and_say_how_the_label_was_read():
    records = [
        record(0, dist(0.9, 0.05, 0.03, 0.02)),
        record(0, dist(0.6, 0.1, 0.1, 0.2)),
        record(None, dist(0.95, 0.05, 0, 0), status="unparsed"),
        record(None, None, status="unparsed"),
        {**record(None, None, status="error"), "label_source": None},
    ]
    out = calibrate_records(records, "batch")
    assert [r["label"] for r in out] == [0, 3, 0, None, None]
    assert [r.get("label_source") for r in out] == ["calibrated", "calibrated", "calibrated", "parsed", None]
    assert [r["status"] for r in out] == ["ok", "ok", "ok", "unparsed", "error"]
    assert [r.get("parsed_label") for r in out[:3]] == [0, 0, None]
    assert [r["raw"] for r in out] == [r["raw"] for r in records]
    assert calibrate_records(records, "none") == records


def test_judgment_records_say_their_labels_are_parsed():
    response = Response(texts=[" 2"], top_logprobs=[{" 2": -0.1, " 1": -2.5}])
    ok = judgment_record({"qid": "q", "docid": "d"}, None, response, prefill="##final score:")
    assert (ok["label"], ok["label_source"]) == (2, "parsed")
    failed = judgment_record({"qid": "q", "docid": "d", "error": "x"}, None, None)
    assert failed["label_source"] is None


def test_paper_config_reads_every_grade_from_the_answer():
    paper = validate_config(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()), SCHEMA)
    assert all(method == "none" for method in paper["judging"]["calibration"].values())
    assert validate_config({}, SCHEMA)["judging"]["calibration"] == {}


def test_calibrating_a_model_that_does_not_judge_is_a_config_error(workdir, tmp_path):
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["judging"]["calibration"] = {"nosuch": "batch"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = run_snakemake(workdir, "-n", configfile=path, check=False)
    assert proc.returncode == 1
    assert "error: config key 'judging.calibration.nosuch': not one of 'judging.models'" in proc.stderr


@pytest.mark.slow
def test_a_calibrated_judge_cell_through_the_workflow(workdir, tmp_path):
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["judging"]["calibration"] = {"smollm2-135m": "batch"}
    path = tmp_path / "calibrated.yaml"
    path.write_text(yaml.safe_dump(config))
    cell = "results/judging/demo-dl/judgments/smollm2-135m/fixed/gap"
    run_snakemake(workdir, f"{cell}.jsonl", configfile=path)
    records = [json.loads(line) for line in (workdir / f"{cell}.jsonl").read_text().splitlines()]
    with_probs = [r for r in records if r["probs"]]
    assert with_probs, "the tiny model records label distributions"
    assert all(r["label_source"] == "calibrated" and "parsed_label" in r for r in with_probs)
    assert all(r["raw"].startswith("##final score:") for r in with_probs)
    prior = label_prior([r["probs"] for r in with_probs])
    assert [r["label"] for r in with_probs] == [int(calibrated_label(r["probs"], prior)) for r in with_probs]
    summary = json.loads((workdir / f"{cell}.summary.json").read_text())
    assert summary["calibrated"] == len(with_probs)
