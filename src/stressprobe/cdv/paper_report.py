"""The CDV paper's experiments as tables: per-experiment accuracy (Table 1, Figure 2), the classifier study
(Table 7), the filter's cost experiment (Table 3), DPO (Table 5), and the run beside the published values.

Every table is also flattened to long rows (`experiment, dataset, model, column, value`), the unit the
comparison with the paper's values (`vs_paper_table`) matches on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from stressprobe.cdv import cell_of
from stressprobe.cdv.evaluate import accuracy_by_condition, paired_original_accuracy
from stressprobe.cdv.experiments import experiment_qids
from stressprobe.errors import StressprobeError
from stressprobe.io import read_jsonl

ALL = "all"  # the dataset (or model) of a value pooled over datasets


def _accuracy(records: list[dict[str, Any]], condition: str) -> float | None:
    found = accuracy_by_condition(records).get(condition)
    return found["accuracy"] if found else None


def experiments_table(
    experiments: dict[str, dict[str, Any]], eval_paths: list[str], question_paths: list[str], seed: int
) -> pd.DataFrame:
    """Per experiment, cell and evaluated model: accuracy on the experiment's sample of originals, on the
    perturbed questions found for it, and the paper's Delta = original - perturbed (originals paired with
    the questions that have perturbed versions, as in Table 1)."""
    questions = {Path(p).stem: read_jsonl(p) for p in question_paths}
    rows = []
    for name, experiment in sorted(experiments.items()):
        cells = {(c["proxy"], c["victim"]) for c in experiment["cells"]}
        for path in sorted(eval_paths):
            cell, model = cell_of(path, 2), Path(path).stem
            if (cell["proxy"], cell["victim"]) not in cells or cell["dataset"] not in questions:
                continue
            if experiment.get("eval_models") and model not in experiment["eval_models"]:
                continue
            sample = experiment_qids(questions[cell["dataset"]], experiment["n"], seed)
            records = [r for r in read_jsonl(path) if r["qid"] in sample]
            original, perturbed = _accuracy(records, "original"), _accuracy(records, "perturbed")
            paired = paired_original_accuracy(records)
            rows.append(
                {
                    "experiment": name,
                    **cell,
                    "model": model,
                    "n_original": sum(r["condition"] == "original" for r in records),
                    "n_perturbed": sum(r["condition"] == "perturbed" for r in records),
                    "acc_original": original,
                    "acc_original_paired": paired,
                    "acc_perturbed": perturbed,
                    "delta": None if paired is None or perturbed is None else paired - perturbed,
                    # Figure 3's baselines on the same sample (absent when baselines are off)
                    "acc_elaborated": _accuracy(records, "elaborated"),
                    "acc_prompt_only": _accuracy(records, "prompt_only"),
                }
            )
    return pd.DataFrame(rows)


def classifier_study_table(metrics_path: str, lora_paths: list[str] | None = None) -> pd.DataFrame:
    """Table 7 / Figure 5: precision, recall and F0.5 of every classifier of the study, per split (the
    LoRA-fine-tuned ones, when their optional rule ran, beside the others)."""
    metrics = json.loads(Path(metrics_path).read_text(encoding="utf-8"))
    study = dict(metrics["study"])
    for path in lora_paths or []:
        lora = json.loads(Path(path).read_text(encoding="utf-8"))
        study[lora["classifier"]] = lora["study"]
    rows = [
        {
            "classifier": name,
            "split": split,
            "n": m["n"],
            "positives": m["positives"],
            "precision": m["precision"],
            "recall": m["recall"],
            "f0.5": m["f_beta"],
        }
        for name, splits in study.items()
        for split, m in splits.items()
    ]
    return pd.DataFrame(rows)


def _per_success(total: float, successes: int) -> float | None:
    return total / successes if successes else None


def filter_cost_table(summary_paths: list[str]) -> pd.DataFrame:
    """Table 3: search success rate, and tokens and USD per perturbed question, on the classifier-selected
    questions (with filter) and on random ones (without), per dataset and pooled."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in summary_paths:
        cell = cell_of(path, 1)
        dataset, _, selection = cell["dataset"].rpartition(".")
        summary = json.loads(Path(path).read_text(encoding="utf-8"))
        groups.setdefault((dataset, selection), []).append(summary)
        groups.setdefault((ALL, selection), []).append(summary)
    rows = []
    for (dataset, selection), summaries in sorted(groups.items()):
        questions = sum(s["questions"] for s in summaries)
        successes = sum(s["questions_with_success"] for s in summaries)
        tokens, cost = sum(s["tokens_total"] for s in summaries), sum(s["cost_usd"] for s in summaries)
        rows.append(
            {
                "dataset": dataset,
                "selection": "with_filter" if selection == "selected" else "without_filter",
                "questions": questions,
                "with_success": successes,
                "success_rate": successes / questions if questions else None,
                "tokens": tokens,
                "usd": cost,
                "tokens_per_perturbed_question": _per_success(tokens, successes),
                "usd_per_perturbed_question": _per_success(cost, successes),
            }
        )
    return pd.DataFrame(rows)


def dpo_table(result_path: str) -> pd.DataFrame:
    """Table 5: the held-out split's accuracy before and after DPO, the difference, and Retain."""
    result = json.loads(Path(result_path).read_text(encoding="utf-8"))
    return pd.DataFrame([{"model": result["base_model"], **result["evaluation"]}])


def long_rows(table: pd.DataFrame, experiment: str, columns: list[str], model_column: str = "model"):
    """A table's values as rows of (experiment, dataset, model, column, value)."""
    if table.empty:
        return []
    rows = []
    for record in table.to_dict("records"):
        for column in columns:
            if column in record and record[column] is not None and not pd.isna(record[column]):
                rows.append(
                    {
                        "experiment": record.get("experiment", experiment),
                        "dataset": record.get("dataset", ALL),
                        "model": record.get(model_column, ALL),
                        "column": column,
                        "value": float(record[column]),
                    }
                )
    return rows


def pooled_accuracy_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Mean over datasets per (experiment, model): the paper's `all` cells (an unweighted mean of the
    datasets' accuracies, as a table's average row)."""
    if table.empty:
        return []
    means = table.groupby(["experiment", "model"])[["acc_original", "acc_perturbed", "delta"]].mean()
    return long_rows(means.reset_index().assign(dataset=ALL), "", ["acc_original", "acc_perturbed", "delta"])


PAPER_COLUMNS = ("table", "experiment", "dataset", "model", "column", "value", "source")


def read_paper_values(path: str | Path) -> pd.DataFrame:
    """The published values file (CSV, `#` comments); a missing column is a one-line error."""
    try:
        table = pd.read_csv(path, comment="#", dtype={"value": float}, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as exc:
        raise StressprobeError(
            f"{path}: not a values file ({str(exc).splitlines()[0]}); see resources/cdv/README.md"
        ) from None
    missing = [c for c in PAPER_COLUMNS if c not in table.columns]
    if missing:
        raise StressprobeError(
            f"{path}: missing column(s) {', '.join(missing)}; the header must be {','.join(PAPER_COLUMNS)}"
        )
    return table


def vs_paper_table(paper: pd.DataFrame, run_rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Every published value beside the run's value of the same (experiment, dataset, model, column) and
    run - paper; blank where the run does not cover the cell. A value given as a range `low..high` in the
    paper (`value_high` column) is covered when the run's value lies inside."""
    run = {(r["experiment"], r["dataset"], r["model"], r["column"]): r["value"] for r in run_rows}
    rows = []
    for record in paper.to_dict("records"):
        key = (record["experiment"], record["dataset"], record["model"], record["column"])
        ours = run.get(key)
        high = record.get("value_high")
        high = None if high in (None, "") or pd.isna(high) else float(high)
        row = {
            **{c: record[c] for c in ("table", "experiment", "dataset", "model", "column")},
            "paper": record["value"],
            "paper_high": high,
            "run": ours,
            "run_minus_paper": None if ours is None or high is not None else ours - record["value"],
            "within_range": None if ours is None or high is None else record["value"] <= ours <= high,
            "source": record["source"],
        }
        rows.append(row)
    return pd.DataFrame(rows)


def run_values(built: dict[str, pd.DataFrame]) -> list[dict[str, Any]]:
    """The run's values in the long form the published values file uses (see resources/cdv/README.md):
    experiments by their config name, then `classifier_study` (test split), `filter_cost` and `dpo`."""
    rows: list[dict[str, Any]] = []
    accuracy = built.get("cdv_experiments")
    if accuracy is not None and not accuracy.empty:
        columns = ["acc_original", "acc_original_paired", "acc_perturbed", "delta"]
        columns += ["acc_elaborated", "acc_prompt_only"]
        accuracy = _experiment_cells(accuracy)
        rows += long_rows(accuracy, "", columns) + pooled_accuracy_rows(accuracy)
    study = built.get("cdv_classifier_study")
    if study is not None and not study.empty:
        test = study[study["split"] == "test"].assign(dataset=ALL)
        rows += long_rows(test, "classifier_study", ["precision", "recall", "f0.5"], "classifier")
    cost = built.get("cdv_filter_cost")
    if cost is not None and not cost.empty:
        columns = ["success_rate", "tokens_per_perturbed_question", "usd_per_perturbed_question"]
        rows += long_rows(cost, "filter_cost", columns, "selection")
    for name in ("baselines", "mitigation"):
        table = built.get(f"cdv_{name}")
        if table is not None and not table.empty:
            rows += long_rows(_by_cell(table, name), name, [c for c in table.columns if c.startswith("acc_")])
    dpo = built.get("cdv_dpo")
    if dpo is not None and not dpo.empty:
        columns = [c for c in dpo.columns if c != "model"]
        rows += long_rows(dpo.assign(dataset=ALL), "dpo", columns)
    return rows


def _by_cell(table: pd.DataFrame, name: str) -> pd.DataFrame:
    """A per-cell table's rows named `name` when each (dataset, model) has one cell, else `name[proxy/victim]`
    (the paper's baselines and mitigation tables have one row per evaluated model)."""
    single = not table.duplicated(["dataset", "model"]).any()
    experiment = [
        name if single else f"{name}[{p}/{v}]" for p, v in zip(table["proxy"], table["victim"], strict=True)
    ]
    return table.assign(experiment=experiment)


def _experiment_cells(table: pd.DataFrame) -> pd.DataFrame:
    """An experiment of several search cells names each: `self_search[gpt-4o]` (proxy = victim) or
    `name[proxy/victim]`, so that Figure 2's rows (one per victim) stay apart; one cell keeps the plain name."""
    cells = table.groupby("experiment")[["proxy", "victim"]].apply(lambda t: len(t.drop_duplicates()))

    def name(row: pd.Series) -> str:
        if cells[row["experiment"]] == 1:
            return row["experiment"]
        cell = row["victim"] if row["proxy"] == row["victim"] else f"{row['proxy']}/{row['victim']}"
        return f"{row['experiment']}[{cell}]"

    return table.assign(experiment=table.apply(name, axis=1))


def classifier_study_figure(table: pd.DataFrame, options: Mapping[str, Any]):
    """Figure 5: precision, recall and F0.5 of every classifier on the test split (grouped bars)."""
    from stressprobe.plots import sized_figure  # the Agg backend; only figure jobs import matplotlib

    test = table[table["split"] == "test"].set_index("classifier")
    metrics = ["precision", "recall", "f0.5"]
    fig, ax = sized_figure(options, 3 / (1.5 + 0.9 * max(1, len(test))))
    width = 0.8 / len(metrics)
    for i, metric in enumerate(metrics):
        values = pd.to_numeric(test[metric], errors="coerce").fillna(0.0) if len(test) else []
        ax.bar([x + i * width for x in range(len(test))], values, width, label=metric)
    ax.set_xticks([x + width for x in range(len(test))], list(test.index), rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("test split")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def experiments_figure(table: pd.DataFrame, options: Mapping[str, Any]):
    """Figures 2 and 6: per experiment and search cell, each evaluated model's accuracy on the originals and
    on the perturbed questions (mean over datasets), one panel per experiment cell."""
    from stressprobe.plots import sized_figure  # the Agg backend; only figure jobs import matplotlib

    named = _experiment_cells(table) if not table.empty else table
    panels = sorted(named["experiment"].unique()) if not named.empty else []
    ncols = max(1, len(panels))
    fig, axes = sized_figure(options, 3 / (3.2 * ncols), ncols=ncols, squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=False):
        rows = named[named["experiment"] == panel].groupby("model")[["acc_original", "acc_perturbed"]].mean()
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], rows["acc_original"].fillna(0.0), 0.4, label="original")
        ax.bar([i + 0.2 for i in x], rows["acc_perturbed"].fillna(0.0), 0.4, label="perturbed")
        ax.set_xticks(list(x), list(rows.index), rotation=40, ha="right", fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_title(panel, fontsize=8)
    axes[0][0].set_ylabel("accuracy")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig
