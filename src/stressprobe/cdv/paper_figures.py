"""Figures of the CDV paper's experiments, drawn from the study tables (stressprobe.cdv.paper_report):
Figures 2 and 6 (per experiment cell, and the scale-up per dataset) and Figure 5 (the classifiers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from stressprobe.cdv.paper_report import experiment_cells


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
    """Figures 2 and 6: each evaluated model's accuracy on the originals and on the perturbed questions,
    one panel per experiment cell (mean over datasets: Figure 2) and, for an experiment of one cell (the
    scale-up), one panel per dataset as well (Figure 6: "overall results between 4 datasets")."""
    from stressprobe.plots import sized_figure  # the Agg backend; only figure jobs import matplotlib

    named = experiment_cells(table) if not table.empty else table
    groups = table.groupby("experiment") if not table.empty else []
    one_cell = {e for e, part in groups if len(part[["proxy", "victim"]].drop_duplicates()) == 1}
    panels = []
    for experiment in sorted(named["experiment"].unique()) if not named.empty else []:
        part = named[named["experiment"] == experiment]
        panels.append((experiment, part))
        if experiment in one_cell:
            panels += [
                (f"{experiment}: {d}", part[part["dataset"] == d]) for d in sorted(part["dataset"].unique())
            ]
    ncols = max(1, len(panels))
    fig, axes = sized_figure(options, 3 / (3.2 * ncols), ncols=ncols, squeeze=False)
    for ax, (title, part) in zip(axes[0], panels, strict=False):
        rows = part.groupby("model")[["acc_original", "acc_perturbed"]].mean()
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], rows["acc_original"].fillna(0.0), 0.4, label="original")
        ax.bar([i + 0.2 for i in x], rows["acc_perturbed"].fillna(0.0), 0.4, label="perturbed")
        ax.set_xticks(list(x), list(rows.index), rotation=40, ha="right", fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_title(title, fontsize=8)
    axes[0][0].set_ylabel("accuracy")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig
