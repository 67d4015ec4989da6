"""Figures: fixed colours per condition, every figure renders, PNG and PDF are byte-identical on rerun."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from stressprobe import plots
from stressprobe.persona import figures
from stressprobe.persona.judging import CONDITIONS

OPTIONS = {"width": 3.5, "font_size": 7, "columns": 2}


def test_condition_colours_are_fixed_whatever_the_selection():
    everything = figures.condition_colors(list(CONDITIONS))
    assert len(set(everything.values())) == len(CONDITIONS)
    subset = figures.condition_colors(["uspersona/domain", "baseline/umbrela"])
    assert subset["uspersona/domain"] == everything["uspersona/domain"]
    assert subset["baseline/umbrela"] == everything["baseline/umbrela"]
    assert figures.condition_colors(list(reversed(CONDITIONS))) == everything


@pytest.fixture
def systems():
    rng = np.random.default_rng(0)
    rows = []
    for dataset in ("d1", "d2"):
        human = rng.uniform(0.2, 0.8, 6)
        rows += [(dataset, "human", "human/human", f"r{i}", h) for i, h in enumerate(human)]
        for condition in CONDITIONS[:3]:
            rows += [(dataset, "m", condition, f"r{i}", h + rng.normal(0, 0.05)) for i, h in enumerate(human)]
    return pd.DataFrame(rows, columns=["dataset", "model", "condition", "run", "ndcg"])


def test_scatter_colours_each_condition_with_its_fixed_colour(systems):
    conditions = list(CONDITIONS[:3])
    fig = figures.ndcg_scatter(systems, [("d1", "m"), ("d2", "m")], conditions, **OPTIONS)
    colors = figures.condition_colors(conditions)
    ax = fig.axes[0]
    assert len(ax.collections) == len(conditions)
    for collection, condition in zip(ax.collections, conditions, strict=True):
        assert tuple(collection.get_facecolor()[0][:3]) == pytest.approx(to_rgba(colors[condition])[:3])
        assert len(collection.get_offsets()) == 6
    assert fig.get_figwidth() == pytest.approx(3.5)


def test_figures_are_byte_identical_on_rerun(systems, tmp_path):
    agreement = pd.DataFrame(
        {
            "dataset": ["d1", "d1"],
            "model": ["m", "m"],
            "condition": ["fixed/gap", "fixed/evidence"],
            "κ vs UMBRELA": [0.4, 0.7],
        }
    )
    shares = pd.DataFrame(
        {
            "dataset": ["d1"],
            "condition": ["fixed/gap"],
            **{
                k: [v]
                for k, v in zip(
                    ["-3", "-2", "-1", "0", "+1", "+2", "+3"], [1, 4, 20, 60, 10, 4, 1], strict=True
                )
            },
        }
    )
    makers = {
        "heat": lambda: figures.kappa_heatmap(
            agreement, ["d1"], ["m"], ["fixed/evidence", "fixed/gap"], **OPTIONS
        ),
        "scatter": lambda: figures.ndcg_scatter(systems, [("d1", "m")], list(CONDITIONS[:3]), **OPTIONS),
        "shift": lambda: figures.label_shift_figure(shares, ["d1"], ["fixed/gap"], **OPTIONS),
    }
    for name, make in makers.items():
        for run in ("a", "b"):
            plots.save_figure(make(), tmp_path / run / f"{name}.png", tmp_path / run / f"{name}.pdf", dpi=80)
        for ext in ("png", "pdf"):
            first, second = (tmp_path / r / f"{name}.{ext}" for r in "ab")
            assert first.read_bytes() == second.read_bytes(), f"{name}.{ext} differs between runs"
        pdf = (tmp_path / "a" / f"{name}.pdf").read_bytes()
        assert b"CreationDate" not in pdf and b"Matplotlib" not in pdf
        assert b"tIME" not in (tmp_path / "a" / f"{name}.png").read_bytes()[:200]


def test_save_figure_leaves_no_temporary_files(systems, tmp_path):
    fig = figures.ndcg_scatter(systems, [("d1", "m")], list(CONDITIONS[:2]), **OPTIONS)
    plots.save_figure(fig, tmp_path / "f.png", tmp_path / "f.pdf", dpi=50)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]
