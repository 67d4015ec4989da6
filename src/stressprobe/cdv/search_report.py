"""Tables and figures of the CDV search itself, from the search logs and summaries only: the value-function
ablation (section 4.4), Figure 4 (do models agree on which questions are perturbable?) and Figure 7 (the
depth of successes)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stressprobe.cdv import cell_of
from stressprobe.io import read_jsonl
from stressprobe.scoring import UNANSWERED, answered


def _summary(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def success_rates(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """Share of searched questions with a successful perturbation, without and with the originals the
    victim already fails (depth-0 members of L); classifier-filtered questions are never searched, and the
    ones whose original got no answer (`unanswered`) are neither searched nor scored."""
    filtered = summary.get("classifier_filtered", 0)
    with_originals = summary["questions"] - filtered - summary[UNANSWERED]
    searched = with_originals - summary["flagged_original_fails"]
    hits_with = summary.get("questions_with_success_with_originals")
    return {
        "success_rate": summary["questions_with_success"] / searched if searched else None,
        "success_rate_with_originals": (
            hits_with / with_originals if with_originals and hits_with is not None else None
        ),
    }


def search_quality_columns(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The search table's columns on how the search went: originals in L, unread answers, re-prompts,
    questions stopped by the call cap, and the greedy audit's right answers (when it ran)."""
    audit = summary.get("greedy_audit") or {}
    return {
        **success_rates(summary),
        UNANSWERED: summary[UNANSWERED],
        "with_success_with_originals": summary.get("questions_with_success_with_originals"),
        "unparsed_answers": summary.get("unparsed_answers"),
        "truncated_answers": summary.get("truncated_answers"),
        "unparsed_nodes": summary.get("unparsed_nodes"),
        "successes_with_unread": summary.get("successes_with_unread"),
        "reprompts": summary.get("reprompts"),
        "call_cap_hit": summary.get("call_cap_hit"),
        # Blank when the audit did not run (or audited no success), a count (0 included) when it did.
        "greedy_audit_right": audit.get("right", 0) if audit else None,
    }


def accuracy_with_originals(eval_paths: list[str], search_paths: list[str]) -> pd.DataFrame:
    """Table 1 with the originals the victim already fails counted as perturbed questions (depth-0 members
    of L, Algorithm 1): per cell and evaluated model, their number and the accuracy on perturbed questions
    plus those originals (the evaluation asked every original, so no extra call is needed)."""
    failed = {}
    for path in search_paths:
        cell = tuple(cell_of(path, 1).values())
        failed[cell] = {r["qid"] for r in read_jsonl(path) if r["flag"] == "victim_fails_original"}
    rows = []
    for path in eval_paths:
        cell = tuple(cell_of(path, 2).values())
        records = read_jsonl(path)
        chosen = [r for r in records if r["condition"] == "perturbed"]
        # With cdv.search.failed_originals: include they are perturbed records already (their root node).
        already = {r["qid"] for r in chosen if r.get("node_id") == f"{r['qid']}:0"}
        chosen += [
            r
            for r in records
            if r["condition"] == "original" and r["qid"] in failed.get(cell, set()) - already
        ]
        chosen, unanswered = answered(chosen)
        rows.append(
            {
                **cell_of(path, 2),
                "model": Path(path).stem,
                "n_failed_originals": len(failed.get(cell, set())),
                "n_perturbed_with_originals": len(chosen),
                "acc_perturbed_with_originals": (
                    sum(r["correct"] for r in chosen) / len(chosen) if chosen else None
                ),
                UNANSWERED: unanswered,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "dataset",
            "proxy",
            "victim",
            "model",
            "n_failed_originals",
            "n_perturbed_with_originals",
            "acc_perturbed_with_originals",
            UNANSWERED,
        ],
    )


# The summary counts that add up over datasets (section 4.4 pools its four datasets).
POOLED = (
    "questions",
    "flagged_original_fails",
    "classifier_filtered",
    UNANSWERED,
    "questions_with_success",
    "questions_with_success_with_originals",
    "successful_perturbations",
    "expansions",
    "requests_total",
    "tokens_total",
    "cost_usd",
    "call_cap_hit",
)


def _pooled(summaries: list[Mapping[str, Any]]) -> dict[str, Any]:
    total = {key: sum(s.get(key) or 0 for s in summaries) for key in POOLED}
    n = total["successful_perturbations"]
    for key, over in (("requests", "requests_total"), ("tokens", "tokens_total"), ("cost", "cost_usd")):
        name = "cost_per_perturbed_question_usd" if key == "cost" else f"{key}_per_success"
        total[name] = total[over] / n if n else None
    return total


def _ablation_row(cell: Mapping[str, str], variant: str, s: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **cell,
        "value": variant,
        "questions": s["questions"],
        **success_rates(s),
        UNANSWERED: s[UNANSWERED],
        "perturbations": s["successful_perturbations"],
        "expansions": s["expansions"],
        "requests": s["requests_total"],
        "tokens": s["tokens_total"],
        "cost_usd": s["cost_usd"],
        "requests_per_success": s["requests_per_success"],
        "tokens_per_success": s["tokens_per_success"],
        "usd_per_success": s["cost_per_perturbed_question_usd"],
        "call_cap_hit": s.get("call_cap_hit"),
    }


def value_ablation_table(summary_paths: list[str]) -> pd.DataFrame:
    """Section 4.4: per cell and value function, success rate and cost per success, and per (proxy,
    victim) and value function the datasets pooled (dataset `all`, as §4.4 reports its four together).

    `summary_paths` holds each ablated cell's own summary (the paper's V, `{cell}/search.summary.json`) and
    its variants' (`{cell}/value/{variant}/search.summary.json`). Cost per success is per successful
    perturbation (depth >= 1).
    """
    rows, groups = [], {}
    for path in summary_paths:
        levels = 3 if Path(path).parent.parent.name == "value" else 1
        s = _summary(path)
        variant = s.get("value") or ("paper" if levels == 1 else Path(path).parent.name)
        cell = cell_of(path, levels)
        rows.append(_ablation_row(cell, variant, s))
        groups.setdefault((cell["proxy"], cell["victim"], variant), []).append(s)
    for (proxy, victim, variant), summaries in groups.items():
        if len(summaries) > 1:
            pooled = {"dataset": "all", "proxy": proxy, "victim": victim}
            rows.append(_ablation_row(pooled, variant, _pooled(summaries)))
    order = {"paper": 0, "gamma0": 1, "no_r": 2}
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["_order"] = table["value"].map(order)
    table["_all"] = table["dataset"] == "all"
    return (
        table.sort_values(["_all", "dataset", "proxy", "victim", "_order"])
        .drop(columns=["_order", "_all"])
        .reset_index(drop=True)
    )


def perturbable_sets(search_paths: list[str], with_originals: bool = False) -> dict[tuple, dict[str, set]]:
    """cell -> {"searched": qids searched, "perturbable": qids with a success} from each search log.

    A success at depth 0 (an original the victim already fails) counts only `with_originals`; questions
    filtered by the classifier were not searched and belong to neither set.
    """
    cells = {}
    for path in search_paths:
        records = read_jsonl(path)
        searched = {r["qid"] for r in records if r["depth"] == 0 and r["flag"] != "classifier_filtered"}
        if not with_originals:
            searched -= {r["qid"] for r in records if r["flag"] == "victim_fails_original"}
        min_depth = 0 if with_originals else 1
        perturbable = {
            r["qid"] for r in records if r["status"] == "success" and r["depth"] >= min_depth
        } & searched
        cells[tuple(cell_of(path, 1).values())] = {"searched": searched, "perturbable": perturbable}
    return cells


CONFUSION = ("both", "a_only", "b_only", "neither")  # A=1 B=1, A=1 B=0, A=0 B=1, A=0 B=0


def agreement_table(search_paths: list[str], with_originals: bool = False) -> pd.DataFrame:
    """Figure 4's numbers: for every pair of cells on the same dataset, over the questions both searched,
    the paper's confusion percentages (A=1/B=1, A=1/B=0, A=0/B=1, A=0/B=0), their pairwise agreement
    (both perturbable or both not: section 4.3's "about 82 %") and, beside it, the Jaccard index."""
    cells = perturbable_sets(search_paths, with_originals)
    labels = _labels(cells)
    rows = []
    for a, b in itertools.product(sorted(cells), repeat=2):
        if a[0] != b[0]:
            continue
        common = cells[a]["searched"] & cells[b]["searched"]
        pa, pb = cells[a]["perturbable"] & common, cells[b]["perturbable"] & common
        union = pa | pb
        rows.append(
            {
                "dataset": a[0],
                "cell_a": labels[a],
                "cell_b": labels[b],
                "common": len(common),
                **{
                    f"pct_{name}": 100 * count / len(common) if common else None
                    for name, count in zip(
                        CONFUSION,
                        (len(pa & pb), len(pa - pb), len(pb - pa), len(common - pa - pb)),
                        strict=True,
                    )
                },
                "jaccard": len(pa & pb) / len(union) if union else None,
                "agreement": (len(common) - len(pa ^ pb)) / len(common) if common else None,
            }
        )
    columns = [
        "dataset",
        "cell_a",
        "cell_b",
        "common",
        *(f"pct_{c}" for c in CONFUSION),
        "jaccard",
        "agreement",
    ]
    return pd.DataFrame(rows, columns=columns)


def mean_pairwise_agreement(table: pd.DataFrame) -> float | None:
    """Section 4.3's number: the mean agreement over every pair of distinct cells of every dataset."""
    pairs = table[table["cell_a"] < table["cell_b"]]["agreement"].dropna()
    return float(pairs.mean()) if len(pairs) else None


def _labels(cells) -> dict[tuple, str]:
    """A cell's name in the figure: its victim, or proxy→victim where a dataset has a victim twice."""
    victims = [(dataset, victim) for dataset, _, victim in cells]
    return {
        cell: cell[2] if victims.count((cell[0], cell[2])) == 1 else f"{cell[1]}→{cell[2]}" for cell in cells
    }


def _panels(n: int, options: Mapping[str, Any]) -> tuple[Any, np.ndarray]:
    from stressprobe.plots import plt  # the Agg backend; only figure jobs import matplotlib

    columns = max(1, min(options["panel_columns"], n))
    rows = -(-n // columns)
    width = options["figure_width_in"]
    fig, axes = plt.subplots(
        rows, columns, figsize=(width, width / columns * rows), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def agreement_figure(search_paths: list[str], options: Mapping[str, Any]):
    """Figure 4: per dataset, the pairwise agreement (%) of every pair of cells (victims) on which questions
    are perturbable -- both perturbable or both not, the paper's measure -- as a heatmap; '-' where two cells
    share no searched question."""
    from stressprobe.plots import plt, style  # the Agg backend; only figure jobs import matplotlib

    table = agreement_table(search_paths)
    datasets = sorted(table["dataset"].unique()) or ["(no cells)"]
    with plt.rc_context(style(options["font_size"])):
        fig, axes = _panels(len(datasets), options)
        for ax, dataset in zip(axes.flat, datasets, strict=False):
            part = table[table["dataset"] == dataset]
            labels = sorted(set(part["cell_a"]))
            ax.set_title(dataset)
            if not labels:
                ax.set_axis_off()
                continue
            matrix = (
                part.pivot(index="cell_a", columns="cell_b", values="agreement")
                .reindex(index=labels, columns=labels)
                .to_numpy(dtype=float)
                * 100
            )
            ax.imshow(np.ma.masked_invalid(matrix), vmin=0, vmax=100, cmap="viridis")
            ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
            ax.set_yticks(range(len(labels)), labels)
            for (i, j), v in np.ndenumerate(matrix):
                # A masked cell is blank (white): its dash is drawn in black.
                text, color = ("-", "black") if np.isnan(v) else (f"{v:.0f}", "white" if v < 60 else "black")
                ax.text(j, i, text, ha="center", va="center", color=color)
        fig.suptitle("Pairwise agreement on perturbable questions (%)")
    return fig


def depth_counts(search_paths: list[str]) -> pd.DataFrame:
    """Figure 7's numbers: successes per dataset and depth (depth 0 = originals the victim already fails)."""
    rows = []
    for path in search_paths:
        dataset = cell_of(path, 1)["dataset"]
        rows += [
            {"dataset": dataset, "depth": r["depth"]} for r in read_jsonl(path) if r["status"] == "success"
        ]
    if not rows:
        return pd.DataFrame(columns=["dataset", "depth", "successes"])
    return pd.DataFrame(rows).groupby(["dataset", "depth"]).size().rename("successes").reset_index()


def depth_figure(search_paths: list[str], options: Mapping[str, Any]):
    """Figure 7: the depth of successful perturbations per dataset (bars at depths >= 1); the originals the
    victim already fails are given in each panel's title, not as a bar."""
    from stressprobe.plots import plt, style  # the Agg backend; only figure jobs import matplotlib

    counts = depth_counts(search_paths)
    datasets = sorted({cell_of(p, 1)["dataset"] for p in search_paths}) or ["(no cells)"]
    with plt.rc_context(style(options["font_size"])):
        fig, axes = _panels(len(datasets), options)
        for ax, dataset in zip(axes.flat, datasets, strict=False):
            part = counts[counts["dataset"] == dataset]
            perturbed = part[part["depth"] > 0]
            originals = int(part.loc[part["depth"] == 0, "successes"].sum())
            ax.bar(perturbed["depth"], perturbed["successes"], width=0.8)
            top = int(perturbed["depth"].max()) if len(perturbed) else 1
            ax.set_xticks(range(1, top + 1))
            ax.set_xlim(0.4, top + 0.6)
            ax.set_ylim(0, max(1, int(perturbed["successes"].max()) if len(perturbed) else 1) * 1.1)
            ax.yaxis.get_major_locator().set_params(integer=True)
            ax.set_title(f"{dataset} (+{originals} at depth 0)")
            ax.set_xlabel("depth")
            ax.set_ylabel("successes")
    return fig
