"""Figure helpers of both studies (matplotlib, Agg): paper column size and style, panel grids, saving.

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
from matplotlib.figure import Figure  # noqa: E402

from stressprobe.io import atomic_target  # noqa: E402


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


def grid(
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


def outer_labels(axes: np.ndarray, panels: int, xlabel: str, ylabel: str | None) -> None:
    """Axis labels on the bottom panel of each column and the first panel of each row only."""
    columns = axes.shape[1]
    for i, ax in enumerate(axes.flat[:panels]):
        if i >= panels - columns:
            ax.set_xlabel(xlabel)
        if ylabel and i % columns == 0:
            ax.set_ylabel(ylabel)


def label_rows(ax, labels: Sequence[str]) -> None:
    """Row labels on the first panel of each row only: an inner panel's labels would overlap its neighbour."""
    ax.set_yticks(range(len(labels)), labels if ax.get_subplotspec().is_first_col() else [])


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
