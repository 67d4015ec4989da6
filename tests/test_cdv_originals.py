"""One owner per original question (issue 24): each evaluated model is asked a dataset's originals by one job
(rule cdv_eval_originals, or its grouped vLLM job), and every cell's evaluation picks its records from it."""

from __future__ import annotations

import pytest
import yaml

from stressprobe.cdv.evaluate import cell_originals, eval_items, evaluate, union_questions
from stressprobe.cdv.prompt_file import OWN
from stressprobe.config import validate_config
from stressprobe.errors import StressprobeError
from stressprobe.io import read_jsonl
from stressprobe.llm import answer_prefill, open_client
from tests.support.helpers import ROOT, TINY_CONFIG, run_snakemake
from tests.support.paper_dag import paper_overlap

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
MODEL = "smollm2-135m"
OTHER = "smollm2-other"  # the same weights under another name: a second proxy, hence a second cell


def test_the_paper_dag_asks_every_original_of_an_evaluator_once():
    cells, rows = paper_overlap()
    # The authors' extraction model reads every search's answers (FIDELITY S13), a role of each cell.
    assert {cell["roles"]["extract"] for cell in cells} == {"gpt-4o-mini"}
    evaluations = [r for r in rows if r.rule == "cdv_eval"]
    assert len(evaluations) == 7  # the seven evaluators
    for row in evaluations:
        # one job per dataset and setting (with and without the focus instruction), 4 datasets
        assert (row.jobs, row.shared, row.repeats) == (8, 0, 0), row
        assert row.asks == row.distinct == 2 * 4 * 300
    assert sum(r.repeats for r in rows) == 0


def test_a_cells_originals_are_picked_in_its_order_and_a_stale_file_is_a_one_line_error():
    q = [{"qid": f"q{i}", "question": f"Q{i}?", "choices": ["a", "b"], "answer_index": 0} for i in range(3)]
    union = union_questions([q[:2], q[1:], q[:1]], ["n2", "n2b", "n1"])
    assert [x["qid"] for x in union] == ["q0", "q1", "q2"]
    shared = [{"qid": x["qid"], "question": x["question"], "answer": "A"} for x in union]
    assert [r["qid"] for r in cell_originals(shared, [q[2], q[0]], "f.jsonl")] == ["q2", "q0"]
    with pytest.raises(StressprobeError, match=r"^f\.jsonl: no record of the original question q2"):
        cell_originals(shared[:2], q, "f.jsonl")
    changed = [{**q[1], "question": "Another text?"}]
    with pytest.raises(StressprobeError, match=r"^n1: question q1 differs"):
        union_questions([q, changed], ["n3", "n1"])


def originals_config(workdir):
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["models"][MODEL]["answer_prefill"] = True  # a few tokens hold the letter
    config["models"][OTHER] = {
        **config["models"][MODEL],
        "n_ctx": config["models"][MODEL].get("n_ctx", 2048) + 8,
    }
    config["cdv"]["search"].update({"samples": 2, "victim_max_tokens": 4, "proxy_max_tokens": 12})
    config["cdv"]["eval"] = {"max_tokens": 4}
    config["cdv"].update(
        {
            "datasets": {"OpenbookQA": {"path": "resources/demo/cdv/OpenbookQA.json", "n": 3}},
            "cells": [],
            # Two cells of one dataset on nested samples (2 of the 3 questions, and all 3).
            "experiments": {
                "small": {"n": 2, "cells": [{"proxy": MODEL, "victim": MODEL}]},
                "large": {"n": 3, "cells": [{"proxy": OTHER, "victim": MODEL}]},
            },
            "eval_models": [MODEL],
            "mitigation": {"enabled": True},
            "baselines": {"enabled": False},
        }
    )
    path = workdir / "originals.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path, config


def test_a_dataset_with_one_cell_per_evaluator_asks_its_originals_in_that_cell(workdir):
    # A job of its own would share the originals with no other cell: only a job's start and a model load.
    path, config = originals_config(workdir)
    config["cdv"]["experiments"].pop("large")
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    cell = f"results/cdv/OpenbookQA/{MODEL}/{MODEL}"
    targets = [f"{cell}/{kind}/{MODEL}.jsonl" for kind in ("eval", "mitigation")]
    proc = run_snakemake(workdir, "-n", *targets, configfile=path)
    assert "rule cdv_eval_originals:" not in proc.stdout + proc.stderr
    assert "rule cdv_eval:" in proc.stdout + proc.stderr and "/originals/" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_each_cells_records_are_those_it_would_make_asking_its_originals_itself(workdir):
    path, config = originals_config(workdir)
    cells = [f"results/cdv/OpenbookQA/{proxy}/{MODEL}" for proxy in (MODEL, OTHER)]
    targets = [f"{cell}/{kind}/{MODEL}.jsonl" for cell in cells for kind in ("eval", "mitigation")]
    proc = run_snakemake(workdir, *targets, configfile=path)
    # One originals job per setting asked the union of the nested samples (3 questions), once.
    for kind in ("eval", "mitigation"):
        shared = read_jsonl(workdir / f"results/cdv/OpenbookQA/originals/{kind}/{MODEL}.jsonl")
        assert len(shared) == 3 and {r["condition"] for r in shared} == {"original"}
    assert proc.stderr.count("rule cdv_eval_originals:") == 2, proc.stderr[-3000:]
    # The old path: the cell asks everything itself (answers from the same cache, so no model runs again).
    config = validate_config(config, SCHEMA)  # the schema's defaults, as the jobs had them
    prefill = answer_prefill(config["models"][MODEL], config["cdv"]["answer_prefix"])
    with open_client(config["models"], MODEL, str(workdir / config["cache"]["path"])) as client:
        for n, cell in zip((2, 3), cells, strict=True):
            questions = read_jsonl(workdir / f"results/cdv/data/n{n}/OpenbookQA.jsonl")
            perturbed = read_jsonl(workdir / f"{cell}/perturbed.jsonl")
            for kind, mitigated in (("eval", False), ("mitigation", True)):
                items = eval_items(questions, perturbed, [])
                temperature = config["cdv"]["eval"]["temperature"]
                asked = evaluate(client, items, 4, config["seed"], mitigated, prefill, temperature, OWN)
                records = read_jsonl(workdir / f"{cell}/{kind}/{MODEL}.jsonl")
                assert records == asked, (cell, kind)
                assert sum(r["condition"] == "original" for r in records) == n
        assert client.usage.calls_made == 0, "the old path found every answer in the cache"
