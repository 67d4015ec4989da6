"""Tables 4 and 7 of the persona paper in the paper's layouts (the long tables stay in `analysis`).

Table 4: per dataset a τ block and an RBO block, judge models as rows and conditions as columns (UMBRELA
last, as the paper's "UMB." column). Table 7: representative systems per dataset with their type from the
run metadata and the ranges of mean and max |Δr| over the listed systems; the systems are configured
(run names, or `prefix*` for a family of runs) or, when none are, the most sensitive ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from stressprobe import tables
from stressprobe.errors import StressprobeError
from stressprobe.persona import analysis, pins, system_tables
from stressprobe.persona.judging import CONDITIONS

BASELINE = CONDITIONS[0]
METRICS = ("τ-b", "RBO")


def ranking_blocks_table(ranking: pd.DataFrame, conditions: Sequence[str]) -> pd.DataFrame:
    """Table 4 in blocks: rows dataset × metric (τ-b, then RBO) × model, a column per condition.

    `ranking` is the long Table 4 (`system_tables.ranking_agreement_table`); `conditions` are the configured
    ones, laid out in the paper's order (PersonaHub, USPersona, Evidence, GAP, UMBRELA last); a condition
    absent from the table is left out.
    """
    present = set(ranking["condition"].astype(str)) if not ranking.empty else set()
    columns = analysis.in_paper_order([c for c in conditions if c in present and c != BASELINE])
    columns += [BASELINE] if BASELINE in present else []
    rows = []
    for dataset, block in ranking.groupby("dataset", observed=True, sort=True):
        for metric in METRICS:
            for model, cells in block.groupby("model", observed=True, sort=True):
                values = cells.set_index(cells["condition"].astype(str))[metric]
                rows.append(
                    {
                        "dataset": dataset,
                        "metric": metric,
                        "model": model,
                        **{c: values.get(c) for c in columns},
                    }
                )
    frame = pd.DataFrame(rows, columns=["dataset", "metric", "model", *columns])
    return frame.astype({c: float for c in columns})


def representative_systems_table(
    displacement: pd.DataFrame,
    run_types: Mapping[str, Mapping[str, str]],
    selection: Mapping[str, Sequence[str]],
    top_k: int,
) -> pd.DataFrame:
    """Table 7 as in the paper: per dataset and system type, the representative systems and the ranges
    (min–max over them) of Sensitivity(s) = mean |Δr| and of max |Δr|.

    `selection` maps a dataset to its configured entries (run names or `prefix*` families); a dataset
    without one falls back to its `top_k` most sensitive runs. A configured entry that matches no run of
    the dataset is an error naming it (a typo would silently drop a system). Runs without metadata get
    the type `unknown`.
    """
    sensitivity = system_tables.sensitivity_frame(displacement, ["dataset"])
    rows = []
    for dataset, block in sensitivity.groupby("dataset", observed=True, sort=True):
        block = block.set_index("run")
        types = run_types.get(str(dataset), {})
        entries = list(selection.get(str(dataset), []))
        if entries:
            expanded = pins.expand_systems(entries, list(block.index))
            missing = [e for e, runs in expanded.items() if not runs]
            if missing:
                raise StressprobeError(
                    f"analysis.representative_systems.{dataset}: '{missing[0]}' matches no run of the "
                    f"dataset ({len(block)} runs); fix the name or end a family prefix with '*'"
                )
        else:
            ranked = block.sort_values(["sensitivity", "max_abs_rank"], ascending=False, kind="stable")
            expanded = {run: [run] for run in ranked.index[:top_k]}
        groups: dict[str, list[tuple[str, list[str]]]] = {}
        for entry, runs in expanded.items():
            kinds = sorted({types.get(r) or "unknown" for r in runs})
            groups.setdefault(", ".join(kinds), []).append((entry, runs))
        for kind, members in groups.items():
            runs = [r for _, matched in members for r in matched]
            rows.append(
                {
                    "dataset": dataset,
                    "systems": ", ".join(entry for entry, _ in members),
                    "runs": len(runs),
                    "mean |Δr| min": block.loc[runs, "sensitivity"].min(),
                    "mean |Δr| max": block.loc[runs, "sensitivity"].max(),
                    "max |Δr| min": block.loc[runs, "max_abs_rank"].min(),
                    "max |Δr| max": block.loc[runs, "max_abs_rank"].max(),
                    "type": kind,
                }
            )
    columns = ["dataset", "systems", "runs", "mean |Δr| min", "mean |Δr| max", "max |Δr| min", "max |Δr| max"]
    return pd.DataFrame(rows, columns=[*columns, "type"])


_DECIMALS = {"mean |Δr| min": 2, "mean |Δr| max": 2, "max |Δr| min": 1, "max |Δr| max": 1}


def write_ranking_blocks(systems: pd.DataFrame, phi: float, conditions: Sequence[str], stem: str) -> None:
    """Table 4 in the paper's layout: τ-b and RBO blocks per dataset, models × conditions."""
    table = ranking_blocks_table(system_tables.ranking_agreement_table(systems, phi), conditions)
    tables.write_table(table, stem)


def check_selection(selection: Mapping[str, Sequence[str]], datasets: Sequence[str]) -> None:
    """A configured dataset name that is not a judging dataset is an error (a typo would silently fall
    back to the most sensitive runs)."""
    for dataset in selection:
        if dataset not in datasets:
            raise StressprobeError(
                f"analysis.representative_systems: '{dataset}' is not a judging dataset "
                f"({', '.join(datasets)}); fix the name"
            )


def write_representative_systems(
    systems: pd.DataFrame,
    run_types: Mapping[str, Mapping[str, str]],
    selection: Mapping[str, Sequence[str]],
    top_k: int,
    stem: str,
    datasets: Sequence[str] | None = None,
) -> None:
    """Table 7 in the paper's layout: representative systems per dataset and type, with |Δr| ranges.

    `datasets`: the configured ones, against which `selection`'s names are checked (when given).
    """
    if datasets is not None:
        check_selection(selection, datasets)
    table = representative_systems_table(
        system_tables.displacement_frame(systems), run_types, selection, top_k
    )
    tables.write_table(table, stem, _DECIMALS)
