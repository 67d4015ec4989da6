"""The paper's CDV experiments through the workflow at toy scale, on the real small model: experiments on
nested samples, the classifier study with a prompt-based classifier, the filter's cost experiment and the
comparison with a published-values file the test writes."""

import pandas as pd
import pytest
import yaml

from stressprobe.io import read_jsonl
from tests.support.helpers import TINY_CONFIG, run_snakemake

MODEL = "smollm2-135m"
TABLES = ["cdv_experiments", "cdv_classifier_study", "cdv_filter_cost", "cdv_vs_paper"]


def study_config(workdir):
    config = yaml.safe_load(TINY_CONFIG.read_text())
    # As short as the model allows: the answer is prefilled, so a few tokens hold the letter.
    config["models"][MODEL]["answer_prefill"] = True
    config["cdv"]["search"].update({"samples": 2, "victim_max_tokens": 4, "proxy_max_tokens": 16})
    config["cdv"]["eval"] = {"max_tokens": 4}
    cell = {"proxy": MODEL, "victim": MODEL}
    config["cdv"].update(
        {
            "datasets": {"OpenbookQA": {"path": "resources/demo/cdv/OpenbookQA.json", "n": 4}},
            "cells": [],
            "experiments": {"small": {"n": 1, "cells": [cell]}, "large": {"n": 2, "cells": [cell]}},
            "eval_models": [MODEL],
            "mitigation": {"enabled": False},
            "baselines": {"enabled": False},
            "paper_values": "values.csv",
        }
    )
    config["cdv"]["classifier"].update(
        {
            "prompt_models": [MODEL],
            "validation_fraction": 0,
            "test_fraction": 0.5,
            "cost_study": {"enabled": True, "n": 1},
        }
    )
    (workdir / "values.csv").write_text(
        "table,experiment,dataset,model,column,value,value_high,source\n"
        f"Table 1,large,all,{MODEL},acc_original,0.5,,test value\n"
        "Table 3,filter_cost,all,with_filter,success_rate,0.82,,test value\n"
        "Section 4.3,classifier_study,all,all,wasted_share,0.37,,test value\n"
        "Table 9,nowhere,all,x,y,0.1,,not covered by the run\n",
        encoding="utf-8",
    )
    path = workdir / "study.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.mark.slow
def test_paper_experiments_run_through_the_workflow_at_toy_scale(workdir):
    config = study_config(workdir)
    targets = [f"results/tables/{name}.csv" for name in TABLES]
    run_snakemake(workdir, *targets, configfile=config)
    # One search on the larger sample; the smaller one is nested in it.
    large = {q["qid"] for q in read_jsonl(workdir / "results/cdv/data/n2/OpenbookQA.jsonl")}
    assert len(large) == 2 and not (workdir / "results/cdv/data/n1").exists()
    searched = {
        r["qid"] for r in read_jsonl(workdir / f"results/cdv/OpenbookQA/{MODEL}/{MODEL}/search.jsonl")
    }
    assert searched == large
    experiments = pd.read_csv(workdir / "results/tables/cdv_experiments.csv").set_index("experiment")
    assert experiments.loc["small", "n_original"] == 1 and experiments.loc["large", "n_original"] == 2
    study = pd.read_csv(workdir / "results/tables/cdv_classifier_study.csv")
    assert set(study["classifier"]) == {"none", "trained", f"prompt:{MODEL}"}
    assert set(study["split"]) <= {"train", "validation", "test"}
    # The cost experiment searched questions outside the labelled two.
    for selection in ("selected", "random"):
        chosen = read_jsonl(workdir / f"results/cdv/data/OpenbookQA.{selection}.jsonl")
        assert len(chosen) <= 1 and not {q["qid"] for q in chosen} & large
    cost = pd.read_csv(workdir / "results/tables/cdv_filter_cost.csv")
    assert set(cost["selection"]) <= {"with_filter", "without_filter"} and len(cost) >= 2
    vs = pd.read_csv(workdir / "results/tables/cdv_vs_paper.csv").set_index("table")
    assert vs.loc["Table 1", "run"] == pytest.approx(experiments.loc["large", "acc_original"])
    assert pd.isna(vs.loc["Table 9", "run"])
    # Section 4.3's wasted share, from the searches that label the classifier (search_shares).
    # Recomputed here: requests of searched questions without a success at depth >= 1 over all searched.
    records = read_jsonl(workdir / f"results/cdv/OpenbookQA/{MODEL}/{MODEL}/search.jsonl")
    perturbed = {r["qid"] for r in records if r["status"] == "success" and r["depth"] >= 1}
    roots = [r for r in records if r["depth"] == 0 and r["flag"] is None]
    wasted = sum(r["calls"] for r in roots if r["qid"] not in perturbed) / sum(r["calls"] for r in roots)
    assert vs.loc["Section 4.3", "run"] == pytest.approx(wasted, rel=1e-9)
