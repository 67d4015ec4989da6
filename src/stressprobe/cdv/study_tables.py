"""The CDV study's tables by name: one builder per table, each reading the files its job names as inputs
(workflow/rules/functions/cdv_study.smk, cdv_table_inputs: one input name means the same files for every
table) and the settings its job's params carry (cdv_table_settings)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from stressprobe.cdv import paper_report as pr
from stressprobe.cdv import report, search_report
from stressprobe.cdv.human_eval import table8
from stressprobe.cdv.search_shares import search_share_rows
from stressprobe.errors import StressprobeError

Inputs = Mapping[str, Any]  # input name -> one path, or a list of paths
Settings = Mapping[str, Any]


def _accuracy(inputs: Inputs, _: Settings) -> pd.DataFrame:
    """Table 1 beside the same numbers with the originals the victim already fails (depth-0 members of L)."""
    return report.accuracy_table(inputs["evals"]).merge(
        search_report.accuracy_with_originals(inputs["evals"], inputs["searches"]),
        on=["dataset", "proxy", "victim", "model"],
        how="left",
    )


def _experiments(inputs: Inputs, settings: Settings) -> pd.DataFrame:
    # Table 4 on each experiment's own sample, where the mitigation runs.
    return pr.experiments_table(
        settings["experiments"],
        inputs["evals"],
        inputs["questions"],
        settings["seed"],
        list(inputs.get("mitigation", [])),
    )


def _vs_paper(inputs: Inputs, settings: Settings) -> pd.DataFrame:
    """Every published value beside the run's: the tables named in `settings["tables"]`, built from the
    same inputs, plus section 4.3's pairwise agreement and A.2's shares from the searches."""
    built = {name: build(name, inputs, settings) for name in settings["tables"]}
    agreement = search_report.mean_pairwise_agreement(search_report.agreement_table(list(inputs["searches"])))
    extra = [] if agreement is None else [pr.run_row("agreement", "pairwise_agreement", agreement)]
    extra += search_share_rows(list(inputs["label_searches"]))
    return pr.vs_paper_table(pr.read_paper_values(inputs["paper_values"]), pr.run_values(built) + extra)


BUILDERS: dict[str, Callable[[Inputs, Settings], pd.DataFrame]] = {
    "cdv_search": lambda i, _: report.search_table(i["summaries"]),
    "cdv_accuracy": _accuracy,
    "cdv_baselines": lambda i, _: report.baselines_table(i["evals"]),
    "cdv_mitigation": lambda i, _: report.mitigation_table(i["evals"], i["mitigation"]),
    "cdv_classifier": lambda i, _: report.classifier_table(i["classifier"]),
    # each ablated cell's own summary and its variants' (cdv_variant_files)
    "cdv_value_ablation": lambda i, _: search_report.value_ablation_table(list(i["variant_summaries"])),
    "cdv_experiments": _experiments,
    "cdv_classifier_study": lambda i, _: pr.classifier_study_table(i["classifier"], list(i["lora"])),
    "cdv_filter_cost": lambda i, _: pr.filter_cost_table(i["cost_summaries"]),
    "cdv_classifier_transfer": lambda i, _: pr.transfer_table(i["transfer"]),
    "cdv_classifier_release": lambda i, _: pr.release_table(i["release"], list(i["release_lora"])),
    "cdv_dpo": lambda i, _: pr.dpo_table(list(i["dpo"]), list(i["compare"])),
    "cdv_benchmark": lambda i, _: pr.benchmark_table(list(i["benchmark"])),
    "cdv_human_eval": lambda i, _: table8(list(i["human"])),
    "cdv_vs_paper": _vs_paper,
}


def build(name: str, inputs: Inputs, settings: Settings) -> pd.DataFrame:
    """The table `name` from its job's inputs and settings."""
    if name not in BUILDERS:
        raise StressprobeError(f"{name}: unknown CDV table; known: {', '.join(BUILDERS)}")
    return BUILDERS[name](inputs, settings)
