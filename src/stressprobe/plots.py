"""Figures of the persona study (matplotlib, Agg): paper column size, one colour per condition everywhere.

Every figure is saved as PNG and PDF with the timestamps and software tags removed, so the same data
gives byte-identical files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from stressprobe.io import atomic_target  # noqa: E402
from stressprobe.persona.judging import CONDITIONS, HUMAN_CONDITION  # noqa: E402

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


def style(font_size: float) -> dict:
    """rcParams for a paper figure: small fonts, thin lines, no embedded hash salt or dates."""
    return {
        "font.size": font_size,
        "axes.titlesize": font_size,
        "axes.labelsize": font_size,
        "xtick.labelsize": font_size - 1,
        "ytick.labelsize": font_size - 1,
        "legend.fontsize": font_size - 1,
        "axes.linewidth": 0.6,
        "lines.linewidth": 0.8,
        "pdf.fonttype": 42,
        "svg.hashsalt": "stressprobe",
    }


def save_figure(fig: Figure, png_path: str | Path, pdf_path: str | Path, dpi: int) -> None:
    """Save PNG and PDF atomically, without timestamps or version tags (byte-identical on rerun)."""
    for path, kind, metadata in (
        (png_path, "png", {"Software": None}),
        (pdf_path, "pdf", {"CreationDate": None, "Producer": None, "Creator": None}),
    ):
        with atomic_target(path, suffix=f".{kind}") as tmp:
            fig.savefig(tmp, format=kind, dpi=dpi, metadata=metadata, bbox_inches="tight", pad_inches=0.02)
    plt.close(fig)


def _grid(
    panels: int, columns: int, width: float, aspect: float, share: bool = False
) -> tuple[Figure, np.ndarray]:
    """Panels in rows of `columns`; constrained layout leaves room for legends placed "outside"."""
    columns = max(1, min(columns, panels))
    rows = math.ceil(panels / columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(width, width / columns * aspect * rows),
        squeeze=False,
        layout="constrained",
        sharex=share,
        sharey=share,
    )
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    return fig, axes


def _outer_labels(axes: np.ndarray, panels: int, xlabel: str, ylabel: str | None) -> None:
    """Axis labels on the bottom panel of each column and the first panel of each row only."""
    columns = axes.shape[1]
    for i, ax in enumerate(axes.flat[:panels]):
        if i >= panels - columns:
            ax.set_xlabel(xlabel)
        if ylabel and i % columns == 0:
            ax.set_ylabel(ylabel)


def _label_rows(ax, labels: Sequence[str]) -> None:
    """Row labels on the first panel of each row only: an inner panel's labels would overlap its neighbour."""
    ax.set_yticks(range(len(labels)), labels if ax.get_subplotspec().is_first_col() else [])


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
    with plt.rc_context(style(font_size)):
        fig, axes = _grid(len(datasets), columns, width, aspect=0.35 + 0.11 * len(conditions))
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
            _label_rows(ax, [_short(c) for c in conditions])
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
    with plt.rc_context(style(font_size)):
        fig, axes = _grid(len(panels), columns, width, aspect=1.0, share=True)
        values = frame["ndcg"].to_numpy(float)
        # One range for every panel (shared axes), a small margin around the data.
        limits = (max(0.0, values.min() - 0.03), min(1.0, values.max() + 0.03)) if len(values) else (0.0, 1.0)
        for ax, (dataset, model) in zip(axes.flat, panels, strict=False):
            _scatter_panel(ax, frame, dataset, model, conditions, colors, limits)
            ax.set_title(f"{dataset} · {model}")
        _outer_labels(axes, len(panels), "human nDCG@10", "condition nDCG@10")
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
    with plt.rc_context(style(font_size)):
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
    with plt.rc_context(style(font_size)):
        fig, axes = _grid(len(datasets), columns, width, aspect=0.3 + 0.09 * len(conditions))
        for ax, dataset in zip(axes.flat, datasets, strict=False):
            block = frame[frame["dataset"] == dataset].set_index("condition").reindex(list(conditions))
            left = np.zeros(len(conditions))
            for label, color in zip(labels, SHIFT_COLORS, strict=True):
                values = block[label].fillna(0).to_numpy(float)
                ax.barh(range(len(conditions)), values, left=left, color=color, label=label, height=0.75)
                left += values
            _label_rows(ax, [_short(c) for c in conditions])
            ax.invert_yaxis()
            ax.set_xlim(0, 100)
            ax.set_title(dataset)
        _outer_labels(axes, len(datasets), "pairs (%)", None)
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


def figure_options(options: Mapping) -> dict:
    """The figure keys of the analysis config as keyword arguments of the figure functions."""
    return {
        "width": options["figure_width_in"],
        "font_size": options["font_size"],
        "columns": options["panel_columns"],
    }


def sized_figure(options: Mapping, aspect: float, ncols: int = 1, **subplots):
    """A figure (and its axes) as wide as the configured column (`figure_width_in`), `aspect` high per unit
    of width, under the configured font size: the CDV figures' size and style come from the same keys as the
    persona study's. The style is set for the rest of the process (a figure job draws one figure)."""
    width = options["figure_width_in"]
    plt.rcParams.update(style(options["font_size"]))
    return plt.subplots(1, ncols, figsize=(width, width * aspect), **subplots)
