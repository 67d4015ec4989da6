"""Benchmark: every table and figure of the persona study at the study's full scale, on synthetic inputs.

DL20: 54 queries × 59 runs, RAG24: 86 queries × 77 runs, 6 judge models × 9 conditions; judged pairs per
query chosen so DL20 has ~11k pairs per cell. Inputs are written in the judging stage's formats (not
timed); then the same library functions the analysis scripts call build every output, and the script
prints the seconds of each step and the total (target: < 60 s on 2 cores).

    .venv/bin/python bench/bench_analysis.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from stressprobe.persona import analysis, judgment_tables, paper_tables, system_tables, vs_paper  # noqa: E402
from tests.support.analysis_fixtures import DatasetSpec, StudySpec, study_paths, write_study_files  # noqa: E402
from tests.support.helpers import ROOT

MODELS = ["gpt-4o", "gpt-4o-mini", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-72b"]
SPEC = StudySpec(
    datasets=[DatasetSpec("dl20", 54, 59, 210), DatasetSpec("rag24", 86, 77, 230)],
    models=MODELS,
)
CONFIG = {
    "alpha": 0.05,
    "rbo_phi": 0.9,
    "bootstrap": {"resamples": 1000, "seed": 42, "level": 0.95},
    "top_k_sensitive": 10,
    "figure2_width_in": 7.0,
    "figure_width_in": 3.5,
    "font_size": 7,
    "panel_columns": 2,
    "dpi": 300,
}


def build_all(root: Path, order: dict) -> list[tuple[str, float]]:
    """Every output through the library, as the rules run it; returns (step, wall s, CPU s)."""
    paths = study_paths(root, order)
    tables, figures = root / "results" / "tables", root / "results" / "figures"
    times = []

    def step(name, fn, *args):
        start, cpu = time.perf_counter(), time.process_time()
        fn(*args)
        times.append((name, time.perf_counter() - start, time.process_time() - cpu))

    for ds, p in paths.items():
        step(
            f"judgments frames {ds}",
            analysis.write_judgment_frames,
            ds,
            p["labels"],
            p["label_cells"],
            p["human"],
            p["kappa"],
            p["shift"],
        )
        step(
            f"system frame {ds}",
            analysis.write_system_frame,
            ds,
            p["ndcg"],
            p["ndcg_cells"],
            p["topics"],
            p["systems"],
        )
    datasets = list(paths.values())

    def frames(key):
        return analysis.read_frames([p[key] for p in datasets], order)

    fig = lambda name: (figures / f"{name}.png", figures / f"{name}.pdf")  # noqa: E731
    step(
        "kappa table", lambda: judgment_tables.write_kappa_table(frames("kappa"), tables / "kappa_agreement")
    )
    step(
        "figure 1",
        lambda: figures.write_kappa_heatmap(frames("kappa"), fig("figure1_kappa_heatmap"), order, CONFIG),
    )
    step(
        "table 3",
        lambda: judgment_tables.write_win_rate_tables(
            frames("kappa"), CONFIG["alpha"], tables / "table3_win_rate", tables / "table3_significance"
        ),
    )
    step(
        "label shift table",
        lambda: judgment_tables.write_label_shift_table(frames("shift"), tables / "label_shift"),
    )
    step(
        "label shift figure",
        lambda: figures.write_label_shift_figure(frames("shift"), fig("label_shift"), order, CONFIG),
    )
    step(
        "figure 2",
        lambda: figures.write_ndcg_scatter(frames("systems"), fig("figure2_ndcg_scatter"), order, CONFIG),
    )
    step(
        "table 4",
        lambda: system_tables.write_ranking_agreement(
            frames("systems"), CONFIG["rbo_phi"], tables / "table4_ranking_agreement", frames("shift")
        ),
    )
    step(
        "table 5",
        lambda: system_tables.write_displacement_table(
            frames("systems"), tables / "table5_rank_displacement", frames("shift")
        ),
    )
    boot = CONFIG["bootstrap"]
    step(
        "table 6",
        lambda: system_tables.write_displacement_ci(
            frames("systems"),
            boot["resamples"],
            boot["seed"],
            boot["level"],
            tables / "table6_displacement_ci",
            frames("shift"),
        ),
    )
    run_types = analysis.read_run_types(order["dataset"], [p["run_metadata"] for p in datasets])
    step(
        "table 7",
        lambda: system_tables.write_sensitive_systems(
            frames("systems"),
            run_types,
            CONFIG["top_k_sensitive"],
            tables / "table7_sensitive_systems",
            frames("shift"),
        ),
    )
    step(
        "table 4 (paper layout)",
        lambda: paper_tables.write_ranking_blocks(
            frames("systems"),
            CONFIG["rbo_phi"],
            order["condition"],
            tables / "table4_ranking_agreement_paper",
        ),
    )
    step(
        "table 7 (paper layout)",
        lambda: paper_tables.write_representative_systems(
            frames("systems"),
            run_types,
            {},
            CONFIG["top_k_sensitive"],
            tables / "table7_sensitive_systems_paper",
        ),
    )
    step(
        "vs_paper",
        lambda: vs_paper.write_vs_paper(
            ROOT / "resources" / "paper" / "persona_values.tsv",
            frames("kappa"),
            frames("systems"),
            CONFIG["rbo_phi"],
            boot,
            {},
            tables / "vs_paper",
            tables / "vs_paper_summary",
        ),
    )
    step(
        "direction consistency",
        lambda: system_tables.write_direction_consistency(
            frames("systems"),
            tables / "direction_consistency",
            tables / "direction_consistency_counts",
            frames("shift"),
        ),
    )
    step(
        "persona sources",
        lambda: system_tables.write_persona_sources(
            frames("kappa"),
            frames("systems"),
            CONFIG["rbo_phi"],
            tables / "persona_sources",
            frames("shift"),
        ),
    )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep inputs and outputs here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        start = time.perf_counter()
        order = write_study_files(root, SPEC)
        pairs = SPEC.datasets[0].queries * SPEC.datasets[0].pairs_per_query
        print(
            f"synthetic inputs written in {time.perf_counter() - start:.1f} s (not timed); "
            f"DL20 {pairs} judged pairs per cell, {len(MODELS)} models × {len(order['condition'])} conditions"
        )
        times = build_all(root, order)
        print(f"  {'step':28s} {'wall s':>7s} {'CPU s':>7s}")
        for name, wall, cpu in times:
            print(f"  {name:28s} {wall:7.2f} {cpu:7.2f}")
        wall, cpu = sum(t[1] for t in times), sum(t[2] for t in times)
        print(f"total analysis: {wall:.2f} s wall, {cpu:.2f} s CPU (target < 60 s on 2 cores)")


if __name__ == "__main__":
    main()
