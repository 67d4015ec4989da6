"""resources/cdv/paper_values.csv: the transcription of every published CDV value checked against the paper's
own arithmetic (Delta = Original - Perturbed, Diff, F0.5 from P and R, averages, Table 3's cost), and the
places where the paper disagrees with itself listed, not chased: a transcription slip shows up as a new
entry in that list."""

from __future__ import annotations

import statistics

import pytest

from stressprobe.cdv.paper_report import read_paper_values
from tests.support.helpers import ROOT

VALUES = ROOT / "resources" / "cdv" / "paper_values.csv"
# Printed to three decimals from unrounded numbers: a difference of two rounded values may be off by 0.001.
ROUNDING = 0.0015
SEVEN = [
    "gpt-4o-mini",
    "gemma-2-27b",
    "llama-3.1-8b",
    "qwen2.5-72b",
    "o1-mini",
    "gpt-4o",
    "claude-3.5-sonnet",
]
TABLE1_DATASETS = ["CommonsenseQA", "OpenbookQA", "TruthfulQA", "MMLU"]
FIG3 = "self_search[gpt-4o-mini]"
MITIGATION = FIG3  # Table 4 is on Figure 3's sample: its Orig. is Figure 3's Ours
GPT_4O_MINI_PRICE = (0.15, 0.6)  # USD per 1M input / output tokens (config/paper.yaml)

# Where the paper's printed numbers do not agree with each other (docs/FIDELITY.md, CDV "Published values").
KNOWN_INCONSISTENCIES = {
    "Figure 3 Average acc_original 0.843 != mean of the seven rows 0.845",
    "Figure 3 Average acc_elaborated 0.757 != mean of the seven rows 0.751",
    "Table 7 prompt:gemma-2-2b f0.5 0.678 != F0.5(P 0.558, R 0.866) 0.601",
    "Section 4.3 fine-tuned precision 0.83 != best Fine-Tuned precision of Table 7 0.812",
    "Section 4.2 claude-3.5-sonnet drop_perturbed 0.495 != Original - Ours of Figure 3 0.384",
    "Table 5 google/gemma-2-2b-it retain 0.788 > (1 - Enh.) / (1 - Orig.) 0.764",
    "Table 5 Qwen/Qwen2.5-7B-Instruct retain 0.763 > (1 - Enh.) / (1 - Orig.) 0.711",
    "Table 5 microsoft/Phi-3.5-mini-instruct retain 0.821 > (1 - Enh.) / (1 - Orig.) 0.398",
}


@pytest.fixture(scope="module")
def value():
    table = read_paper_values(VALUES)
    found = {}
    for r in table.to_dict("records"):
        found[(r["table"], r["experiment"], r["dataset"], r["model"], r["column"])] = r["value"]

    def get(table_name, experiment, dataset, model, column):
        return found[(table_name, experiment, dataset, model, column)]

    get.all = found
    return get


def f_beta(p, r, beta=0.5):
    return (1 + beta**2) * p * r / (beta**2 * p + r)


def inconsistencies(value):
    found = set()
    for d in TABLE1_DATASETS:
        for m in SEVEN:
            original, perturbed = (
                value("Table 1", "scale_up", d, m, c) for c in ("acc_original", "acc_perturbed")
            )
            delta = value("Table 1", "scale_up", d, m, "delta")
            if abs(original - perturbed - delta) > ROUNDING:
                found.add(f"Table 1 {d} {m} delta {delta} != {original - perturbed:.3f}")
    for column in ("acc_original", "acc_elaborated", "acc_prompt_only", "acc_dyval2", "acc_perturbed"):
        mean = statistics.mean(value("Figure 3", FIG3, "all", m, column) for m in SEVEN)
        printed = value("Figure 3", FIG3, "all", "average", column)
        if abs(mean - printed) > ROUNDING:
            found.add(f"Figure 3 Average {column} {printed} != mean of the seven rows {mean:.3f}")
    for m in SEVEN:
        orig, enh = (
            value("Table 4", MITIGATION, "all", m, c) for c in ("acc_perturbed", "acc_perturbed_mitigated")
        )
        diff = value("Table 4", MITIGATION, "all", m, "mitigation_diff")
        if abs(enh - orig - diff) > ROUNDING:
            found.add(f"Table 4 {m} diff {diff} != {enh - orig:.3f}")
        if orig != value("Figure 3", FIG3, "all", m, "acc_perturbed"):
            found.add(f"Table 4 {m} Orig. {orig} is not Figure 3's Ours")
    for (table, experiment, _, model, column), printed in value.all.items():
        if table == "Table 7" and column == "f0.5":
            p, r = (value(table, experiment, "all", model, c) for c in ("precision", "recall"))
            if abs(f_beta(p, r) - printed) > ROUNDING:
                found.add(f"Table 7 {model} f0.5 {printed} != F0.5(P {p}, R {r}) {f_beta(p, r):.3f}")
    best = max(
        v
        for (t, e, _, m, c), v in value.all.items()
        if t == "Table 7" and m.startswith("lora:") and c == "precision"
    )
    stated = value(
        "Section 4.3", "classifier_study", "all", "lora:meta-llama/Llama-3.1-8B-Instruct", "precision"
    )
    if abs(stated - best) > 0.005:
        found.add(f"Section 4.3 fine-tuned precision {stated} != best Fine-Tuned precision of Table 7 {best}")
    for model, column, drop, accuracy in [
        ("average", "drop_perturbed", "acc_original", "acc_perturbed"),
        ("average", "drop_dyval2", "acc_original", "acc_dyval2"),
        ("claude-3.5-sonnet", "drop_perturbed", "acc_original", "acc_perturbed"),
        ("claude-3.5-sonnet", "drop_dyval2", "acc_original", "acc_dyval2"),
    ]:
        stated = value("Section 4.2", FIG3, "all", model, column)
        computed = value("Figure 3", FIG3, "all", model, drop) - value(
            "Figure 3", FIG3, "all", model, accuracy
        )
        if abs(stated - computed) > ROUNDING:
            name = "Ours" if column == "drop_perturbed" else "DyVal2"
            found.add(
                f"Section 4.2 {model} {column} {stated} != Original - {name} of Figure 3 {computed:.3f}"
            )
    for model in ("google/gemma-2-2b-it", "Qwen/Qwen2.5-7B-Instruct", "microsoft/Phi-3.5-mini-instruct"):
        orig, enh = (value("Table 5", "dpo", "all", model, c) for c in ("accuracy_before", "accuracy_after"))
        if abs(enh - orig - value("Table 5", "dpo", "all", model, "difference")) > ROUNDING:
            found.add(f"Table 5 {model} diff")
        # Retain as defined (wrong before and after / wrong before) cannot exceed wrong after / wrong before.
        retain, bound = value("Table 5", "dpo", "all", model, "retain_original"), (1 - enh) / (1 - orig)
        if retain > bound:
            found.add(f"Table 5 {model} retain {retain} > (1 - Enh.) / (1 - Orig.) {bound:.3f}")
    return found


def test_the_papers_inconsistencies_are_exactly_the_known_ones(value):
    assert inconsistencies(value) == KNOWN_INCONSISTENCIES


def test_table3_cost_is_total_cost_per_perturbed_question_at_gpt_4o_minis_prices(value):
    rates = {}
    for mode in ("without_filter", "with_filter"):
        tokens_in, tokens_out, perturbed = (
            value("Table 3", "filter_cost", "all", mode, c)
            for c in ("input_tokens", "output_tokens", "perturbed_questions")
        )
        total = (tokens_in * GPT_4O_MINI_PRICE[0] + tokens_out * GPT_4O_MINI_PRICE[1]) / 1e6
        printed = value("Table 3", "filter_cost", "all", mode, "usd_per_perturbed_question")
        assert total / perturbed == pytest.approx(printed, abs=0.00005)
        rates[mode] = value("Table 3", "filter_cost", "all", mode, "success_rate")
    increase = value("Table 3", "filter_cost", "all", "with_filter", "success_rate_relative_increase")
    # 82 / 59 - 1 = 0.3898: printed as 38.9 % (cut, not rounded, at one decimal)
    assert rates["with_filter"] / rates["without_filter"] - 1 == pytest.approx(increase, abs=0.001)
    costs = [value("Table 3", "filter_cost", "all", m, "usd_per_perturbed_question") for m in rates]
    decrease = value(
        "Table 3", "filter_cost", "all", "with_filter", "usd_per_perturbed_question_relative_decrease"
    )
    assert 1 - costs[1] / costs[0] == pytest.approx(decrease, abs=0.001)  # 0.2195, printed 21.9 %


def test_the_abstracts_45_percent_is_the_mean_delta_of_table1(value):
    deltas = [value("Table 1", "scale_up", d, m, "delta") for d in TABLE1_DATASETS for m in SEVEN]
    assert statistics.mean(deltas) == pytest.approx(
        value("Abstract", "scale_up", "all", "average", "delta"), abs=0.005
    )


def test_table7_baseline_is_the_positive_share_of_the_120_test_cases(value):
    precision = value("Table 7", "classifier_study", "all", "none", "precision")
    assert (
        round(67 / 120, 3) == precision
        and value("Table 7", "classifier_study", "all", "none", "recall") == 1.0
    )


def test_every_line_names_where_it_is_printed_and_a_run_cell(value):
    table = read_paper_values(VALUES)
    assert len(table) >= 250
    assert table["source"].str.len().min() > 10
    assert set(table["table"]) >= {f"Table {i}" for i in (1, 2, 3, 4, 5, 7, 8)} | {"Figure 3", "Section 4.4"}
    assert not table.duplicated(["table", "experiment", "dataset", "model", "column"]).any()
    # every line names a run experiment (resources/cdv/README.md), so cdv_vs_paper can place it
    assert {e.split("[")[0] for e in table["experiment"]} <= {
        "scale_up",
        "self_search",
        "mitigation",
        "classifier_transfer",
        "filter_cost",
        "dpo",
        "classifier_study",
        "classifier_release",
        "benchmark",
        "agreement",
        "human_eval",
        "value_ablation",
        "distribution",
    }
