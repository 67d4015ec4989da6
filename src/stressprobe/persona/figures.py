"""Figures of the persona study: Figure 1's heatmap, Figure 2's scatter grid and the label-shift profile,
one colour per condition everywhere (the generic sizing, style and saving: stressprobe.plots)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from stressprobe import plots
from stressprobe.persona.analysis import BASELINE
from stressprobe.persona.judging import CONDITIONS, HUMAN_CONDITION
from stressprobe.persona.judgment_tables import kappa_agreement_table, label_shift_table
from stressprobe.plots import plt

#: The study's conditions in their canonical order; each keeps its colour whatever the config selects.
CANONICAL_CONDITIONS = (*CONDITIONS, HUMAN_CONDITION)


_PALETTE = plt.get_cmap("tab10").colors


_EXTRA_PALETTE = plt.get_cmap("tab20b").colors


#: Grade shifts −3…+3: reds for stricter, grey for unchanged, blues for more lenient.
SHIFT_COLORS = ("#67001f", "#d6604d", "#f4a582", "#d9d9d9", "#92c5de", "#4393c3", "#053061")


def condition_colors(conditions: Sequence[str]) -> dict[str, tuple]:
    """A fixed colour per condition: canonical conditions by their canonical position, others by name."""
    extra = sorted(set(conditions) - set(CANONICAL_CONDITIONS))
    colors = {c: _PALETTE[i % len(_PALETTE)] for i, c in enumerate(CANONICAL_CONDITIONS)}
    colors.update({c: _EXTRA_PALETTE[i % len(_EXTRA_PALETTE)] for i, c in enumerate(extra)})
    return {c: colors[c] for c in conditions}


def _short(condition: str) -> str:
    """A compact label: `personahub/query` → `PH query`, `fixed/gap` → `gap`."""
    source, _, role = condition.partition("/")
    prefix = {"personahub": "PH ", "uspersona": "US ", "fixed": "", "baseline": "", "human": ""}.get(source)
    return f"{prefix}{role}" if prefix is not None else condition


def kappa_heatmap(
    agreement: pd.DataFrame,
    datasets: Sequence[str],
    models: Sequence[str],
    conditions: Sequence[str],
    width: float,
    font_size: float,
    columns: int,
) -> Figure:
    """Figure 1: mean κ(condition, UMBRELA), conditions × models, one panel per dataset, values annotated."""
    with plt.rc_context(plots.style(font_size)):
        fig, axes = plots.grid(len(datasets), columns, width, aspect=0.35 + 0.11 * len(conditions))
        image = None
        for ax, dataset in zip(axes.flat, datasets, strict=False):
            block = agreement[agreement["dataset"].astype(str) == dataset]
            grid = block.pivot_table(
                index="condition",
                columns="model",
                values="κ vs UMBRELA",
                observed=False,
                dropna=False,
                aggfunc="first",
            )
            grid.index, grid.columns = grid.index.astype(str), grid.columns.astype(str)
            grid = grid.reindex(index=list(conditions), columns=list(models))
            image = ax.imshow(grid.to_numpy(float), cmap="viridis", vmin=-0.2, vmax=1.0, aspect="auto")
            for (i, j), value in np.ndenumerate(grid.to_numpy(float)):
                if not np.isnan(value):
                    ax.text(
                        j,
                        i,
                        f"{value:.2f}".replace("0.", ".", 1),  # ".75": fits a cell at column width
                        ha="center",
                        va="center",
                        fontsize=font_size - 2,
                        color="black" if value > 0.5 else "white",
                    )
            ax.set_title(dataset)
            ax.set_xticks(range(len(models)), models, rotation=35, ha="right")
            plots.label_rows(ax, [_short(c) for c in conditions])
        if image is not None:
            fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="mean κ vs UMBRELA")
        return fig


def ndcg_scatter(
    systems: pd.DataFrame,
    panels: Sequence[tuple[str, str]],
    conditions: Sequence[str],
    width: float,
    font_size: float,
    columns: int,
) -> Figure:
    """Figure 2: nDCG@10 per run, condition vs human qrels, with y = x; one panel per (dataset, model)."""
    colors = condition_colors(conditions)
    frame = systems.astype({"dataset": str, "model": str, "condition": str})
    with plt.rc_context(plots.style(font_size)):
        fig, axes = plots.grid(len(panels), columns, width, aspect=1.0, share=True)
        values = frame["ndcg"].to_numpy(float)
        # One range for every panel (shared axes), a small margin around the data.
        limits = (max(0.0, values.min() - 0.03), min(1.0, values.max() + 0.03)) if len(values) else (0.0, 1.0)
        for ax, (dataset, model) in zip(axes.flat, panels, strict=False):
            _scatter_panel(ax, frame, dataset, model, conditions, colors, limits)
            ax.set_title(f"{dataset} · {model}")
        plots.outer_labels(axes, len(panels), "human nDCG@10", "condition nDCG@10")
        _condition_legend(fig, conditions, colors)
        return fig


def _scatter_panel(ax, frame: pd.DataFrame, dataset, model, conditions, colors, limits) -> None:
    """One panel of Figure 2: each condition's nDCG@10 per run against the human one, and y = x."""
    human = frame[(frame["dataset"] == dataset) & (frame["model"] == "human")].set_index("run")["ndcg"]
    block = frame[(frame["dataset"] == dataset) & (frame["model"] == model)]
    for condition in conditions:
        scores = block[block["condition"] == condition].set_index("run")["ndcg"]
        runs = scores.index.intersection(human.index)
        ax.scatter(
            human[runs],
            scores[runs],
            s=6,
            color=colors[condition],
            label=_short(condition),
            linewidths=0,
            alpha=0.85,
        )
    ax.plot(limits, limits, color="black", linewidth=0.6, linestyle="--")
    ax.set_xlim(*limits)
    ax.set_ylim(*limits)
    ax.set_aspect("equal")


def _condition_legend(fig: Figure, conditions: Sequence[str], colors: Mapping[str, tuple]) -> None:
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", color=colors[c], markersize=3) for c in conditions
    ]
    fig.legend(
        handles,
        [_short(c) for c in conditions],
        loc="outside lower center",
        ncol=min(5, len(conditions)),
        frameon=False,
        handletextpad=0.2,
        columnspacing=0.8,
    )


def ndcg_scatter_grid(
    systems: pd.DataFrame,
    datasets: Sequence[str],
    models: Sequence[str],
    conditions: Sequence[str],
    width: float,
    font_size: float,
) -> Figure:
    """Figure 2 as the paper lays it out: a row per dataset, a column per judge model.

    Panels of a row share one axis range (the datasets' nDCG@10 ranges differ: DL20 and RAG24 in the
    paper); a (dataset, model) without scores leaves its panel empty and hidden.
    """
    colors = condition_colors(conditions)
    frame = systems.astype({"dataset": str, "model": str, "condition": str})
    columns = max(1, len(models))
    with plt.rc_context(plots.style(font_size)):
        fig, axes = plt.subplots(
            max(1, len(datasets)),
            columns,
            figsize=(width, width / columns * max(1, len(datasets))),
            squeeze=False,
            layout="constrained",
        )
        for row, dataset in enumerate(datasets):
            values = frame.loc[frame["dataset"] == dataset, "ndcg"].to_numpy(float)
            limits = (max(0.0, values.min() - 0.03), min(1.0, values.max() + 0.03)) if len(values) else (0, 1)
            for col, model in enumerate(models):
                ax = axes[row, col]
                if not ((frame["dataset"] == dataset) & (frame["model"] == model)).any():
                    ax.set_visible(False)
                    continue
                _scatter_panel(ax, frame, dataset, model, conditions, colors, limits)
                ax.set_title(model if row == 0 else "")
                ax.set_xlabel("human nDCG@10" if row == len(datasets) - 1 else "")
                if col == 0:
                    ax.set_ylabel(f"{dataset}\nnDCG@10")  # short: a row is one panel high
                else:
                    ax.tick_params(labelleft=False)
        _condition_legend(fig, conditions, colors)
        return fig


def label_shift_figure(
    shares: pd.DataFrame,
    datasets: Sequence[str],
    conditions: Sequence[str],
    width: float,
    font_size: float,
    columns: int,
) -> Figure:
    """Label shift profile: stacked share of pairs per grade shift −3…+3 vs UMBRELA, a panel per dataset.

    `shares` has columns dataset, condition and `-3` … `+3` (percent of compared pairs).
    """
    labels = ["-3", "-2", "-1", "0", "+1", "+2", "+3"]
    frame = shares.astype({"dataset": str, "condition": str})
    with plt.rc_context(plots.style(font_size)):
        fig, axes = plots.grid(len(datasets), columns, width, aspect=0.3 + 0.09 * len(conditions))
        for ax, dataset in zip(axes.flat, datasets, strict=False):
            block = frame[frame["dataset"] == dataset].set_index("condition").reindex(list(conditions))
            left = np.zeros(len(conditions))
            for label, color in zip(labels, SHIFT_COLORS, strict=True):
                values = block[label].fillna(0).to_numpy(float)
                ax.barh(range(len(conditions)), values, left=left, color=color, label=label, height=0.75)
                left += values
            plots.label_rows(ax, [_short(c) for c in conditions])
            ax.invert_yaxis()
            ax.set_xlim(0, 100)
            ax.set_title(dataset)
        plots.outer_labels(axes, len(datasets), "pairs (%)", None)
        handles, names = axes.flat[0].get_legend_handles_labels()
        fig.legend(
            handles,
            names,
            title="grade shift vs UMBRELA",
            loc="outside lower center",
            ncol=7,
            frameon=False,
            handlelength=1.0,
            columnspacing=0.6,
        )
        return fig


# ---- outputs ----


def write_kappa_heatmap(
    kappa: pd.DataFrame, figure: tuple[str, str], order: Mapping, figure_options: Mapping
) -> None:
    """Figure 1: heatmap of mean κ vs UMBRELA, conditions × models, one panel per dataset."""
    conditions = [c for c in order["condition"] if c != BASELINE]
    fig = kappa_heatmap(
        kappa_agreement_table(kappa),
        order["dataset"],
        order["model"],
        conditions,
        **plots.figure_options(figure_options),
    )
    plots.save_figure(fig, *figure, dpi=figure_options["dpi"])


def write_label_shift_figure(
    shift: pd.DataFrame, figure: tuple[str, str], order: Mapping, figure_options: Mapping
) -> None:
    """Label shift profile pooled over models: a stacked bar per condition, one panel per dataset."""
    pooled = label_shift_table(shift, by=("dataset", "condition"))
    conditions = [c for c in order["condition"] if c != BASELINE]
    fig = label_shift_figure(pooled, order["dataset"], conditions, **plots.figure_options(figure_options))
    plots.save_figure(fig, *figure, dpi=figure_options["dpi"])


def write_ndcg_scatter(
    systems: pd.DataFrame, figure: tuple[str, str], order: Mapping, figure_options: Mapping
) -> None:
    """Figure 2: condition vs human nDCG@10 per run; a row per dataset (config order: DL20 on top in the
    paper's config), a column per judge model."""
    present = set(zip(systems["dataset"].astype(str), systems["model"].astype(str), strict=True))
    datasets = [d for d in order["dataset"] if any((d, m) in present for m in order["model"])]
    models = [m for m in order["model"] if any((d, m) in present for d in order["dataset"])]
    options = plots.figure_options(figure_options)
    fig = ndcg_scatter_grid(
        systems,
        datasets,
        models,
        order["condition"],
        width=figure_options.get("figure2_width_in") or options["width"],
        font_size=options["font_size"],
    )
    plots.save_figure(fig, *figure, dpi=figure_options["dpi"])
