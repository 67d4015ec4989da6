"""The CDV study's tables and figures, built only from the files the CDV rules write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stressprobe.cdv import cell_of
from stressprobe.cdv.evaluate import accuracy_by_condition, paired_original_accuracy
from stressprobe.cdv.search_report import search_quality_columns
from stressprobe.io import read_jsonl
from stressprobe.scoring import UNANSWERED


def search_table(summary_paths: list[str]) -> pd.DataFrame:
    """Table 3 unit: per cell, success rate, requests/tokens per success and $ per question."""
    rows = []
    for path in summary_paths:
        s = json.loads(Path(path).read_text(encoding="utf-8"))
        searched = s["questions"] - s["flagged_original_fails"] - s["classifier_filtered"] - s[UNANSWERED]
        rows.append(
            {
                **cell_of(path, 1),
                "questions": s["questions"],
                "already_failed": s["flagged_original_fails"],
                "searched": searched,
                "with_success": s["questions_with_success"],
                "success_rate": s["questions_with_success"] / searched if searched else None,
                "perturbations": s["successful_perturbations"],
                "expansions": s["expansions"],
                "requests": s["requests_total"],
                "tokens": s["tokens_total"],
                "requests_per_success": s["requests_per_success"],
                "tokens_per_success": s["tokens_per_success"],
                "usd_per_perturbed_question": s["cost_per_perturbed_question_usd"],
                **search_quality_columns(s),
            }
        )
    return pd.DataFrame(rows)


def _eval_accuracies(path: str) -> dict[str, Any]:
    records = read_jsonl(path)
    accuracy = accuracy_by_condition(records)
    return {
        **cell_of(path, 2),
        "model": Path(path).stem,
        "accuracy": accuracy,
        "paired_original": paired_original_accuracy(records),
    }


def _acc(accuracy: dict, condition: str) -> float | None:
    return accuracy[condition]["accuracy"] if condition in accuracy else None


def _unanswered(accuracy: dict, condition: str) -> int:
    """The condition's records without an answer (left out of its accuracy)."""
    return accuracy.get(condition, {}).get(UNANSWERED, 0)


def accuracy_table(eval_paths: list[str]) -> pd.DataFrame:
    """Table 1: accuracy on the originals, on the perturbed questions, and Delta (paired)."""
    rows = []
    for path in eval_paths:
        e = _eval_accuracies(path)
        acc = e["accuracy"]
        perturbed = _acc(acc, "perturbed")
        rows.append(
            {
                **{k: e[k] for k in ("dataset", "proxy", "victim", "model")},
                "n_original": acc.get("original", {}).get("n", 0),
                "acc_original": _acc(acc, "original"),
                "n_perturbed": acc.get("perturbed", {}).get("n", 0),
                "unparsed_original": acc.get("original", {}).get("unparsed", 0),
                "truncated_original": acc.get("original", {}).get("truncated", 0),
                "unparsed_perturbed": acc.get("perturbed", {}).get("unparsed", 0),
                "truncated_perturbed": acc.get("perturbed", {}).get("truncated", 0),
                f"{UNANSWERED}_original": _unanswered(acc, "original"),
                f"{UNANSWERED}_perturbed": _unanswered(acc, "perturbed"),
                "acc_original_paired": e["paired_original"],
                "acc_perturbed": perturbed,
                "delta": None
                if perturbed is None or e["paired_original"] is None
                else perturbed - e["paired_original"],
            }
        )
    return pd.DataFrame(rows)


def baselines_table(eval_paths: list[str]) -> pd.DataFrame:
    """Figure 3's table: accuracy on original, Elaborated, Prompt-only and search-perturbed questions."""
    rows = []
    for path in eval_paths:
        e = _eval_accuracies(path)
        row = {k: e[k] for k in ("dataset", "proxy", "victim", "model")}
        conditions = ("original", "elaborated", "prompt_only", "perturbed")
        row.update({f"acc_{c}": _acc(e["accuracy"], c) for c in conditions})
        row.update({f"{UNANSWERED}_{c}": _unanswered(e["accuracy"], c) for c in conditions})
        rows.append(row)
    return pd.DataFrame(rows)


def mitigation_table(eval_paths: list[str], mitigation_paths: list[str]) -> pd.DataFrame:
    """Table 4: accuracy without and with the focus instruction, on originals and perturbed questions."""
    rows = []
    for plain_path, mitigated_path in zip(sorted(eval_paths), sorted(mitigation_paths), strict=True):
        plain, mitigated = _eval_accuracies(plain_path), _eval_accuracies(mitigated_path)
        rows.append(
            {
                **{k: plain[k] for k in ("dataset", "proxy", "victim", "model")},
                "acc_original": _acc(plain["accuracy"], "original"),
                "acc_original_mitigated": _acc(mitigated["accuracy"], "original"),
                "acc_perturbed": _acc(plain["accuracy"], "perturbed"),
                "acc_perturbed_mitigated": _acc(mitigated["accuracy"], "perturbed"),
                f"{UNANSWERED}_original": _unanswered(plain["accuracy"], "original"),
                f"{UNANSWERED}_original_mitigated": _unanswered(mitigated["accuracy"], "original"),
                f"{UNANSWERED}_perturbed": _unanswered(plain["accuracy"], "perturbed"),
                f"{UNANSWERED}_perturbed_mitigated": _unanswered(mitigated["accuracy"], "perturbed"),
            }
        )
    return pd.DataFrame(rows)


def classifier_table(metrics_path: str) -> pd.DataFrame:
    """Tables 2-3: held-out precision/recall/F0.5, and success rate and cost with vs without the filter."""
    m = json.loads(Path(metrics_path).read_text(encoding="utf-8"))
    rows = []
    for cell, effect in sorted(m["filter_effect"].items()):
        dataset, proxy, victim = cell.split("/")
        rows.append(
            {
                "kind": m["kind"],
                "dataset": dataset,
                "proxy": proxy,
                "victim": victim,
                "n_test": m["n_test"],
                f"{UNANSWERED}_test": m[f"{UNANSWERED}_test"],
                "precision": m["precision"],
                "recall": m["recall"],
                "f0.5": m["f_beta"],
                "success_rate_without": effect["without_filter"]["success_rate"],
                "success_rate_with": effect["with_filter"]["success_rate"],
                # Held-out questions whose original got no answer: in neither success rate.
                f"{UNANSWERED}_originals": effect["without_filter"][UNANSWERED],
                "usd_per_question_without": effect["without_filter"]["cost_per_perturbed_question_usd"],
                "usd_per_question_with": effect["with_filter"]["cost_per_perturbed_question_usd"],
                "requests_per_success_without": effect["without_filter"]["requests_per_success"],
                "requests_per_success_with": effect["with_filter"]["requests_per_success"],
            }
        )
    return pd.DataFrame(rows)


def matrix_figure(eval_paths: list[str], options: dict[str, Any]):
    """Figure 2: accuracy on perturbed questions, proxy/victim cell x evaluated model (blank: none)."""
    from stressprobe.plots import sized_figure  # the Agg backend; only figure jobs import matplotlib

    table = accuracy_table(eval_paths)
    table["cell"] = table["dataset"] + ": " + table["proxy"] + " -> " + table["victim"]
    matrix = table.pivot_table(
        index="cell", columns="model", values="acc_perturbed", aggfunc="first", dropna=False
    )
    rows, columns = max(1, matrix.shape[0]), max(1, matrix.shape[1])
    fig, ax = sized_figure(options, (0.8 + 0.4 * rows) / (1.2 + 1.0 * columns))
    values = matrix.to_numpy(dtype=float)
    ax.imshow(np.ma.masked_invalid(values), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(matrix.shape[1]), matrix.columns, rotation=30, ha="right")
    ax.set_yticks(range(matrix.shape[0]), matrix.index)
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, "-" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", color="white")
    ax.set_title("Accuracy on perturbed questions")
    return fig


def distribution_figure(search_paths: list[str], options: dict[str, Any]):
    """Depth and length ratio of successful perturbations per dataset."""
    from stressprobe.plots import sized_figure  # the Agg backend; only figure jobs import matplotlib

    rows = []
    for path in search_paths:
        dataset = cell_of(path, 1)["dataset"]
        rows += [
            {"dataset": dataset, "depth": r["depth"], "length_ratio": r["length_ratio"]}
            for r in read_jsonl(path)
            if r["status"] == "success" and r["depth"] > 0
        ]
    datasets = sorted({cell_of(p, 1)["dataset"] for p in search_paths})
    fig, (left, right) = sized_figure(options, 2.6 / 7, ncols=2)
    depths = [[r["depth"] for r in rows if r["dataset"] == d] for d in datasets]
    max_depth = max([1] + [max(d) for d in depths if d])
    bins = np.arange(0.5, max_depth + 1.5)
    left.hist(depths, bins=bins, label=datasets, stacked=False)
    left.set_xlabel("depth of successful perturbation")
    left.set_ylabel("count")
    left.legend(fontsize=7)
    ratios = [[r["length_ratio"] for r in rows if r["dataset"] == d] or [np.nan] for d in datasets]
    right.boxplot(ratios, tick_labels=datasets)
    right.set_ylabel("length ratio |Q'|/|Q|")
    fig.tight_layout()
    return fig
