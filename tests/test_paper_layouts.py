"""The persona tables and Figure 2 in the paper's layouts, on hand-built frames with hand-derived values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stressprobe.errors import StressprobeError
from stressprobe.persona import analysis, figures, judgment_tables, paper_tables, pins, system_tables
from tests.test_analysis import DELTA, NO_FAILED_CALLS, kappa_rows, systems_frame
from tests.test_metrics import tau_b_by_definition

KAPPA_COLUMNS = ["dataset", "model", "condition", "reference", "qid", "pairs", "unanswered", "kappa"]
CONDITIONS = ["baseline/umbrela", "fixed/evidence", "fixed/gap"]


def kappa_frame():
    """Two models, two conditions; m1's evidence wins every query, m2's gap wins every query."""
    base = np.linspace(0.1, 0.8, 10)
    rows = []
    for model, evidence, gap in (("m1", 0.1, -0.2), ("m2", -0.1, 0.05)):
        rows += kappa_rows(model, "baseline/umbrela", base)
        rows += kappa_rows(model, "fixed/evidence", base + evidence)
        rows += kappa_rows(model, "fixed/gap", base + gap)
    order = {"dataset": ["d"], "model": ["m1", "m2"], "condition": CONDITIONS}
    return analysis.categorize(pd.DataFrame(rows, columns=KAPPA_COLUMNS), order)


def md_rows(path):
    """The body rows of a Markdown table as lists of cells."""
    lines = path.read_text().splitlines()[2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_table3_sets_w_and_delta_side_by_side_and_bolds_the_best_w_per_row(tmp_path):
    judgment_tables.write_win_rate_tables(kappa_frame(), 0.05, tmp_path / "t3", tmp_path / "t3_detail")
    wide = pd.read_csv(tmp_path / "t3.csv")
    assert list(wide.columns) == [
        "dataset",
        "model",
        "fixed/evidence W%",
        "fixed/evidence Δ̄",
        "fixed/gap W%",
        "fixed/gap Δ̄",
    ]
    assert wide[["fixed/evidence W%", "fixed/gap W%"]].values.tolist() == [[100.0, 0.0], [0.0, 100.0]]
    assert wide["fixed/evidence Δ̄"].tolist() == pytest.approx([0.1, -0.1])
    rows = md_rows(tmp_path / "t3.md")
    assert rows[0] == ["d", "m1", "**100.0**", "0.100", "0.0", "-0.200"]
    assert rows[1] == ["d", "m2", "0.0", "-0.100", "**100.0**", "0.050"]
    assert r"\textbf{100.0}" in (tmp_path / "t3.tex").read_text()
    assert len(pd.read_csv(tmp_path / "t3_detail.csv")) == 4  # the long table stays


def test_table4_blocks_tau_then_rbo_per_dataset_models_by_conditions_umbrela_last():
    systems, scores = systems_frame()
    long = system_tables.ranking_agreement_table(systems, phi=0.9)
    blocks = paper_tables.ranking_blocks_table(long, ["baseline/umbrela", "fixed/gap"])
    assert list(blocks.columns) == ["dataset", "metric", "model", "fixed/gap", "baseline/umbrela"]
    assert blocks[["metric", "model"]].values.tolist() == [
        ["τ-b", "m1"],
        ["τ-b", "m2"],
        ["RBO", "m1"],
        ["RBO", "m2"],
    ]
    human, gap = scores[("human", "human/human")], scores[("m1", "fixed/gap")]
    runs = sorted(human)
    assert blocks.iloc[0]["fixed/gap"] == pytest.approx(
        tau_b_by_definition([gap[r] for r in runs], [human[r] for r in runs])
    )
    indexed = long.set_index(["model", "condition"])
    assert blocks.iloc[3]["baseline/umbrela"] == pytest.approx(indexed.loc[("m2", "baseline/umbrela"), "RBO"])


def test_table5_has_both_ndcg_shifts_and_bolds_the_largest_mean_rank_shift_per_dataset(tmp_path):
    systems, scores = systems_frame()
    table = system_tables.displacement_by_condition_table(system_tables.displacement_frame(systems)).iloc[0]
    signed = np.mean(
        [
            np.mean([scores[(m, "fixed/gap")][r] - scores[(m, "baseline/umbrela")][r] for r in "abcd"])
            for m in DELTA
        ]
    )
    assert table["|mean ΔnDCG@10|"] == pytest.approx(abs(signed))
    assert table["mean |ΔnDCG@10|"] > table["|mean ΔnDCG@10|"]  # shifts of both signs cancel in the mean
    frame = pd.DataFrame(
        {"dataset": ["x", "x", "y", "y"], "condition": list("pqpq"), "mean |Δr|": [1.0, 2.0, 3.0, 0.5]}
    )
    mask = system_tables.best_in_datasets(frame, "mean |Δr|")
    assert mask["mean |Δr|"].tolist() == [False, True, True, False]
    assert not mask["condition"].any()
    system_tables.write_displacement_table(systems, tmp_path / "t5", NO_FAILED_CALLS)
    column = list(pd.read_csv(tmp_path / "t5.csv").columns).index("mean |Δr|")
    assert md_rows(tmp_path / "t5.md")[0][column].startswith("**")


def two_datasets(order_models):
    systems, _ = systems_frame()
    frame = pd.concat([systems.astype({"dataset": str}).assign(dataset=d) for d in ("d", "e")])
    order = {"dataset": ["e", "d"], "model": order_models, "condition": ["baseline/umbrela", "fixed/gap"]}
    return analysis.categorize(frame.astype({"model": str, "condition": str}), order)


def test_table6_rows_are_sorted_by_mean_rank_shift_within_datasets_in_config_order():
    # Config lists m2 first, but m1 is the more sensitive (mean |Δr| 1.0 vs 0.5).
    table = system_tables.displacement_ci_table(
        system_tables.displacement_frame(two_datasets(["m2", "m1"])), 200, 42
    )
    assert table[["dataset", "model"]].astype(str).values.tolist() == [
        ["e", "m1"],
        ["e", "m2"],
        ["d", "m1"],
        ["d", "m2"],
    ]
    assert table["mean |Δr|"].tolist() == pytest.approx([1.0, 0.5, 1.0, 0.5])


# Sensitivity over both models (from DELTA): a 1.5 (max 2), b 0.75 (max 1), c 0.75 (max 1.5), d 0 (max 0).


def test_table7_configured_systems_and_families_grouped_by_type_with_ranges():
    systems, _ = systems_frame()
    displacement = system_tables.displacement_frame(systems)
    types = {"d": {"a": "dense", "b": "dense", "c": "sparse"}}
    table = paper_tables.representative_systems_table(displacement, types, {"d": ["a", "b*", "c"]}, top_k=1)
    assert table[["systems", "runs", "type"]].values.tolist() == [["a, b*", 2, "dense"], ["c", 1, "sparse"]]
    dense = table.iloc[0]
    assert (dense["mean |Δr| min"], dense["mean |Δr| max"]) == pytest.approx((0.75, 1.5))
    assert (dense["max |Δr| min"], dense["max |Δr| max"]) == (1, 2)


def test_table7_falls_back_to_the_most_sensitive_runs_and_marks_missing_types():
    systems, _ = systems_frame()
    table = paper_tables.representative_systems_table(
        system_tables.displacement_frame(systems), {"d": {"a": "dense"}}, {}, top_k=2
    )
    # b and c tie on sensitivity; c has the larger max |Δr|.
    assert table[["systems", "type"]].values.tolist() == [["a", "dense"], ["c", "unknown"]]


def test_table7_entry_matching_no_run_is_a_one_line_error():
    systems, _ = systems_frame()
    with pytest.raises(StressprobeError, match=r"analysis\.representative_systems\.d: 'zz\*' matches no run"):
        paper_tables.representative_systems_table(
            system_tables.displacement_frame(systems), {}, {"d": ["a", "zz*"]}, top_k=2
        )


def test_table7_selection_for_an_unknown_dataset_is_a_one_line_error(tmp_path):
    systems, _ = systems_frame()
    with pytest.raises(
        StressprobeError, match=r"representative_systems: 'dl2O' is not a judging dataset \(d\)"
    ):
        paper_tables.write_representative_systems(
            systems, {}, {"dl2O": ["a"]}, 2, tmp_path / "t7", datasets=["d"]
        )
    assert not (tmp_path / "t7.csv").exists()


def test_expand_systems_prefix_families_and_exact_names():
    runs = ["ielab-1", "ielab-2", "iiia_standard_a", "ielab"]
    assert pins.expand_systems(["ielab-*", "ielab", "nope"], runs) == {
        "ielab-*": ["ielab-1", "ielab-2"],
        "ielab": ["ielab"],
        "nope": [],
    }


def test_figure2_has_a_row_per_dataset_in_order_and_a_column_per_model():
    rng = np.random.default_rng(1)
    rows = []
    for dataset, (low, high) in (("dl", (0.1, 0.3)), ("rag", (0.5, 0.8))):
        human = rng.uniform(low, high, 5)
        rows += [(dataset, "human", "human/human", f"r{i}", h) for i, h in enumerate(human)]
        for model in ("m1", "m2"):
            if (dataset, model) == ("rag", "m2"):
                continue  # a panel without scores stays empty
            for condition in ("baseline/umbrela", "fixed/gap"):
                rows += [(dataset, model, condition, f"r{i}", h + 0.01) for i, h in enumerate(human)]
    systems = pd.DataFrame(rows, columns=["dataset", "model", "condition", "run", "ndcg"])
    fig = figures.ndcg_scatter_grid(
        systems, ["dl", "rag"], ["m1", "m2"], ["baseline/umbrela", "fixed/gap"], width=7.0, font_size=7
    )
    axes = np.array(fig.axes[:4]).reshape(2, 2)
    assert [ax.get_visible() for ax in axes.flat] == [True, True, True, False]
    assert "dl" in axes[0, 0].get_ylabel() and "rag" in axes[1, 0].get_ylabel()
    assert [axes[0, 0].get_title(), axes[0, 1].get_title()] == ["m1", "m2"]
    assert axes[0, 0].get_xlim()[1] < 0.4 < axes[1, 0].get_xlim()[0]  # a range per dataset row
    assert len(axes[0, 1].collections) == 2
    assert fig.get_figwidth() == pytest.approx(7.0)


def test_paper_orders_tables_3_and_4_by_source_and_table_5_by_role(tmp_path):
    configured = [
        "baseline/umbrela",
        "fixed/gap",
        "uspersona/domain",
        "personahub/domain",
        "personahub/query",
    ]
    assert analysis.in_paper_order(configured) == [
        "personahub/query",
        "personahub/domain",
        "uspersona/domain",
        "fixed/gap",
        "baseline/umbrela",
    ]
    assert analysis.in_paper_order(configured[1:], analysis.PAPER_TABLE5_ORDER) == [
        "personahub/query",
        "personahub/domain",
        "uspersona/domain",
        "fixed/gap",
    ]
    # Table 5 rows: two conditions configured gap first; the paper puts the persona roles first.
    systems, _ = systems_frame()
    extra = (
        systems[systems["condition"] == "fixed/gap"]
        .astype({"condition": str})
        .assign(condition="personahub/query")
    )
    order = {
        "dataset": ["d"],
        "model": ["m1", "m2"],
        "condition": ["baseline/umbrela", "fixed/gap", "personahub/query"],
    }
    frame = pd.concat([systems.astype({"condition": str, "model": str, "dataset": str}), extra])
    system_tables.write_displacement_table(
        analysis.categorize(frame, order), tmp_path / "t5", NO_FAILED_CALLS
    )
    assert pd.read_csv(tmp_path / "t5.csv")["condition"].tolist() == ["personahub/query", "fixed/gap"]
