"""The persona study's system-level tables: Table 4's ranking agreement, the rank displacement of Tables
5-7 and its direction consistency, and the PersonaHub-USPersona comparison."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from stressprobe import tables
from stressprobe.persona import metrics
from stressprobe.persona.analysis import (
    BASELINE,
    CELL,
    DECIMALS,
    PAPER_TABLE5_ORDER,
    in_paper_order,
    with_categories_of,
)
from stressprobe.persona.judging import HUMAN, HUMAN_CONDITION, RETRIEVED_SOURCES
from stressprobe.persona.judgment_tables import kappa_agreement_table, win_rate_significance_table
from stressprobe.scoring import UNANSWERED


def _scores(systems: pd.DataFrame, dataset, model, condition) -> pd.Series:
    block = systems[
        (systems["dataset"] == dataset) & (systems["model"] == model) & (systems["condition"] == condition)
    ]
    return pd.Series(block["ndcg"].to_numpy(), index=block["run"].to_numpy())


def ranking_agreement_table(systems: pd.DataFrame, phi: float) -> pd.DataFrame:
    """Table 4: Kendall's τ-b and RBO_ext(φ) of each condition's system ranking vs the human ranking.

    τ-b uses the nDCG@10 scores of the systems scored under both; RBO compares the full rankings
    (ties broken by run name, see `metrics.ranked_systems`).
    """
    rows = []
    judged = systems[systems["model"] != HUMAN]
    for (dataset, model, condition), _ in judged.groupby(CELL, observed=True):
        scores = _scores(systems, dataset, model, condition)
        human = _scores(systems, dataset, HUMAN, HUMAN_CONDITION)
        common = scores.index.intersection(human.index)
        rows.append(
            {
                "dataset": dataset,
                "model": model,
                "condition": condition,
                "systems": len(common),
                "τ-b": metrics.kendall_tau_b(scores[common], human[common]),
                "RBO": metrics.rbo_ext(metrics.ranked_systems(scores), metrics.ranked_systems(human), phi),
            }
        )
    return pd.DataFrame(rows)


def displacement_frame(systems: pd.DataFrame) -> pd.DataFrame:
    """Δr and ΔnDCG@10 of every system under every non-baseline condition vs its model's UMBRELA ranking.

    Columns: dataset, model, condition, run, delta_rank, delta_ndcg (condition − UMBRELA).
    """
    parts = []
    judged = systems[(systems["model"] != HUMAN) & (systems["condition"] != BASELINE)]
    for (dataset, model, condition), _ in judged.groupby(CELL, observed=True):
        scores, baseline = (
            _scores(systems, dataset, model, condition),
            _scores(systems, dataset, model, BASELINE),
        )
        if baseline.empty:
            continue
        delta_rank = metrics.rank_displacement(scores, baseline)
        runs = delta_rank.index
        parts.append(
            pd.DataFrame(
                {
                    "dataset": dataset,
                    "model": model,
                    "condition": condition,
                    "run": runs,
                    "delta_rank": delta_rank.to_numpy(),
                    "delta_ndcg": (scores[runs] - baseline[runs]).to_numpy(),
                }
            )
        )
    # No non-baseline condition with a baseline (e.g. `conditions: [fixed/gap]`) leaves no parts.
    columns = ["dataset", "model", "condition", "run", "delta_rank", "delta_ndcg"]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    return with_categories_of(frame, systems)


def displacement_by_condition_table(displacement: pd.DataFrame) -> pd.DataFrame:
    """Table 5: per dataset × condition, over systems and averaged over models (max: over both)."""
    frame = displacement.assign(
        abs_rank=displacement["delta_rank"].abs(),
        abs_ndcg=displacement["delta_ndcg"].abs(),
        affected=displacement["delta_rank"] != 0,
    )
    per_model = frame.groupby(CELL, observed=True).agg(
        mean_abs_rank=("abs_rank", "mean"),
        max_abs_rank=("abs_rank", "max"),
        mean_abs_ndcg=("abs_ndcg", "mean"),
        affected=("affected", "sum"),
        mean_ndcg=("delta_ndcg", "mean"),
    )
    table = per_model.groupby(["dataset", "condition"], observed=True).agg(
        models=("mean_abs_rank", "size"),
        mean_abs_rank=("mean_abs_rank", "mean"),
        max_abs_rank=("max_abs_rank", "max"),
        mean_abs_ndcg=("mean_abs_ndcg", "mean"),
        affected=("affected", "mean"),
        mean_ndcg=("mean_ndcg", "mean"),
    )
    # |mean ΔnDCG@10|: the size of the mean signed shift; the paper's Table 5 values fit this one
    # (RAG24 PersonaHub-Domain: 0.000 with a mean |Δr| of 1.96, impossible for a mean of absolute shifts).
    table["abs_mean_ndcg"] = table["mean_ndcg"].abs()
    return table.reset_index().rename(
        columns={
            "mean_abs_rank": "mean |Δr|",
            "max_abs_rank": "max |Δr|",
            "mean_abs_ndcg": "mean |ΔnDCG@10|",
            "affected": "affected systems",
            "mean_ndcg": "mean ΔnDCG@10",
            "abs_mean_ndcg": "|mean ΔnDCG@10|",
        }
    )


def sensitivity_frame(displacement: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Sensitivity(s) = mean of |Δr(s, p)| over non-UMBRELA conditions (and rows pooled in), and max |Δr|."""
    frame = displacement.assign(abs_rank=displacement["delta_rank"].abs())
    return (
        frame.groupby([*by, "run"], observed=True)
        .agg(sensitivity=("abs_rank", "mean"), max_abs_rank=("abs_rank", "max"))
        .reset_index()
    )


def displacement_ci_table(
    displacement: pd.DataFrame, resamples: int, seed: int, level: float = 0.95
) -> pd.DataFrame:
    """Table 6: per dataset × model, mean |Δr| with a percentile bootstrap CI over systems, and max |Δr|.

    The statistic is the mean over systems of Sensitivity(s); systems are resampled with replacement.
    """
    sensitivity = sensitivity_frame(displacement, ["dataset", "model"])
    rows = []
    for (dataset, model), block in sensitivity.groupby(["dataset", "model"], observed=True):
        low, high = metrics.bootstrap_mean_ci(block["sensitivity"], resamples, seed, level)
        rows.append(
            {
                "dataset": dataset,
                "model": model,
                "systems": len(block),
                "mean |Δr|": block["sensitivity"].mean(),
                "CI low": low,
                "CI high": high,
                "max |Δr|": block["max_abs_rank"].max(),
            }
        )
    return sort_within_datasets(pd.DataFrame(rows), "mean |Δr|")


def sort_within_datasets(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """Rows grouped by dataset (config order), largest `column` first within each (the paper's Table 6)."""
    if table.empty:
        return table
    order = np.lexsort((-table[column].to_numpy(float), _positions(table["dataset"])))
    return table.iloc[order].reset_index(drop=True)


def _positions(values: pd.Series) -> np.ndarray:
    """Sort keys of a column in config order (its categories), else in order of first appearance."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return np.asarray(values.cat.codes)
    return pd.factorize(values)[0]


def best_in_datasets(table: pd.DataFrame, column: str) -> pd.DataFrame | None:
    """Mask of the largest `column` within each dataset (the paper's bold in Tables 5 and 6)."""
    if table.empty:
        return None
    mask = pd.DataFrame(False, index=table.index, columns=table.columns)
    values = table[column].astype(float)
    best = values.groupby(table["dataset"].astype(str)).transform("max")
    mask[column] = values.eq(best) & values.notna()
    return mask


def sensitive_systems_table(
    displacement: pd.DataFrame, run_types: Mapping[str, Mapping[str, str]], top_k: int
) -> pd.DataFrame:
    """Table 7: the `top_k` systems per dataset by Sensitivity(s) (over models and conditions).

    Ties in sensitivity are ordered by max |Δr| and then by run name. `run_types` maps
    dataset → run → type; a run without metadata gets a blank type.
    """
    sensitivity = sensitivity_frame(displacement, ["dataset"])
    sensitivity = sensitivity.sort_values(
        ["dataset", "sensitivity", "max_abs_rank", "run"], ascending=[True, False, False, True]
    )
    top = sensitivity.groupby("dataset", observed=True).head(top_k).copy()
    top.insert(1, "rank", top.groupby("dataset", observed=True).cumcount() + 1)
    top["type"] = [
        run_types.get(str(d), {}).get(r, "") for d, r in zip(top["dataset"], top["run"], strict=True)
    ]
    return top.rename(columns={"sensitivity": "mean |Δr|", "max_abs_rank": "max |Δr|"})[
        ["dataset", "rank", "run", "type", "mean |Δr|", "max |Δr|"]
    ].reset_index(drop=True)


def direction_consistency_tables(displacement: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """System–condition pairs whose sign of Δr is the same (and non-zero) under every model.

    Returns (list, counts): the list with direction `up` (Δr < 0, better rank) or `down` and mean Δr;
    counts per dataset × condition of consistent pairs among all pairs. Only models that scored the
    system under the condition take part; with a single model every non-zero Δr counts as consistent.
    """
    groups = displacement.groupby(["dataset", "condition", "run"], observed=True)["delta_rank"]
    summary = groups.agg(
        models="size", direction=metrics.consistent_direction, mean_delta="mean"
    ).reset_index()
    consistent = summary[summary["direction"] != 0].copy()
    consistent["direction"] = np.where(consistent["direction"] < 0, "up", "down")
    listing = consistent.rename(columns={"mean_delta": "mean Δr"})[
        ["dataset", "condition", "run", "direction", "models", "mean Δr"]
    ].reset_index(drop=True)
    counts = (
        summary.groupby(["dataset", "condition"], observed=True)
        .agg(
            pairs=("direction", "size"),
            consistent=("direction", lambda d: int((d != 0).sum())),
            up=("direction", lambda d: int((d < 0).sum())),
            down=("direction", lambda d: int((d > 0).sum())),
        )
        .reset_index()
    )
    return listing, counts


def persona_source_table(
    agreement: pd.DataFrame, significance: pd.DataFrame, ranking: pd.DataFrame, displacement: pd.DataFrame
) -> pd.DataFrame:
    """PersonaHub vs USPersona per matched role, side by side, per dataset × model.

    Metrics: mean κ vs UMBRELA, W% (vs UMBRELA, on human labels), τ-b and RBO vs human, mean |Δr|; one column
    per metric and source (PH = PersonaHub, US = USPersona). A metric missing for a cell stays blank.
    """
    mean_rank = (
        displacement.assign(abs_rank=displacement["delta_rank"].abs())
        .groupby(CELL, observed=True)["abs_rank"]
        .mean()
        .rename("mean |Δr|")
        .reset_index()
    )
    parts = [
        agreement[[*CELL, "κ vs UMBRELA"]],
        significance.reindex(columns=[*CELL, "W%"]),
        ranking.reindex(columns=[*CELL, "τ-b", "RBO"]),
        mean_rank,
    ]
    merged = parts[0].astype({c: str for c in CELL})
    for part in parts[1:]:
        merged = merged.merge(part.astype({c: str for c in CELL}), on=CELL, how="left")
    # (not expand=True: with no cell at all, e.g. no answer parsed, it has no columns to name)
    source_role = merged["condition"].str.split("/", n=1)
    merged = merged.assign(source=source_role.str[0], role=source_role.str[1])
    merged = merged[merged["source"].isin(RETRIEVED_SOURCES)]
    metrics = [
        (metric, source, f"{metric} {short}")
        for metric in ("κ vs UMBRELA", "W%", "τ-b", "RBO", "mean |Δr|")
        for source, short in zip(RETRIEVED_SOURCES, ("PH", "US"), strict=True)
    ]
    rows = []
    for (dataset, model, role), block in merged.groupby(["dataset", "model", "role"], sort=False):
        row = {"dataset": dataset, "model": model, "role": role}
        for metric, source, column in metrics:
            value = block.loc[block["source"] == source, metric]
            row[column] = value.iloc[0] if len(value) else math.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=["dataset", "model", "role", *(column for *_, column in metrics)])


def failed_calls(shift: pd.DataFrame) -> dict[tuple[str, str, str], int]:
    """(dataset, model, condition) -> the cell's failed judging calls, from the label-shift frame."""
    grouped = shift.groupby(CELL, observed=True)[UNANSWERED].sum()
    return {tuple(str(k) for k in key): int(n) for key, n in grouped.items()}


def with_unanswered(
    table: pd.DataFrame, shift: pd.DataFrame, by: Sequence[str], vs_umbrela: bool = False
) -> pd.DataFrame:
    """`table` with the failed judging calls behind each row (from the label-shift frame; the row's nDCG@10
    left their documents out of the rankings): `unanswered`, those of the cells matching the row on `by`.
    Rows built from the displacement against UMBRELA (`vs_umbrela`) count their conditions' cells there and,
    in `unanswered_umbrela`, the UMBRELA cells of the same models, once per model."""
    counts = failed_calls(shift)

    def matches(cell: tuple[str, str, str], row: pd.Series) -> bool:
        named = dict(zip(CELL, cell, strict=True))
        return all(named[c] == str(row[c]) for c in by)

    def conditions(row: pd.Series) -> int:
        return sum(n for c, n in counts.items() if matches(c, row) and not (vs_umbrela and c[2] == BASELINE))

    def umbrela(row: pd.Series) -> int:
        models = {c[:2] for c in counts if matches(c, row) and c[2] != BASELINE}
        return sum(counts.get((*m, BASELINE), 0) for m in sorted(models))

    table = table.copy()
    table[UNANSWERED] = [conditions(row) for _, row in table.iterrows()]
    if vs_umbrela:
        table[f"{UNANSWERED}_umbrela"] = [umbrela(row) for _, row in table.iterrows()]
    return table


def write_ranking_agreement(systems: pd.DataFrame, phi: float, stem: str, shift: pd.DataFrame) -> None:
    """Table 4: τ-b and RBO_ext(φ) of every condition's ranking vs the human ranking, with the cell's
    failed judging calls (`shift`: the label-shift frame)."""
    table = ranking_agreement_table(systems, phi)
    tables.write_table(with_unanswered(table, shift, CELL) if not table.empty else table, stem, DECIMALS)


def write_displacement_table(systems: pd.DataFrame, stem: str, shift: pd.DataFrame) -> None:
    """Table 5: rank and nDCG displacement per dataset × condition; the largest mean |Δr| per dataset bold;
    with the failed judging calls of the condition's and UMBRELA's cells (`shift`: the label-shift frame)."""
    table = displacement_by_condition_table(displacement_frame(systems))
    if not table.empty:
        table = with_unanswered(table, shift, ["dataset", "condition"], vs_umbrela=True)
    if not table.empty:  # rows as in the paper: by role, PersonaHub before USPersona, then the fixed roles
        conditions = table["condition"].astype(str)
        rank = {c: i for i, c in enumerate(in_paper_order(conditions.unique(), PAPER_TABLE5_ORDER))}
        order = np.lexsort((conditions.map(rank).to_numpy(), _positions(table["dataset"])))
        table = table.iloc[order].reset_index(drop=True)
    tables.write_table(table, stem, DECIMALS, bold=best_in_datasets(table, "mean |Δr|"))


def write_displacement_ci(
    systems: pd.DataFrame, resamples: int, seed: int, level: float, stem: str, shift: pd.DataFrame
) -> None:
    """Table 6: mean |Δr| per dataset × model with its bootstrap CI over systems, most sensitive first; with
    the failed judging calls of the model's conditions and of its UMBRELA cell (`shift`: the label-shift
    frame)."""
    table = displacement_ci_table(displacement_frame(systems), resamples, seed, level)
    table = with_unanswered(table, shift, ["dataset", "model"], vs_umbrela=True)
    tables.write_table(table, stem, DECIMALS, bold=best_in_datasets(table, "mean |Δr|"))


def write_sensitive_systems(
    systems: pd.DataFrame,
    run_types: Mapping[str, Mapping[str, str]],
    top_k: int,
    stem: str,
    shift: pd.DataFrame,
) -> None:
    """Table 7: the most sensitive systems per dataset with their type from the run metadata; with the
    failed judging calls of the dataset's conditions and UMBRELA cells (`shift`: the label-shift frame)."""
    table = sensitive_systems_table(displacement_frame(systems), run_types, top_k)
    tables.write_table(with_unanswered(table, shift, ["dataset"], vs_umbrela=True), stem, DECIMALS)


def write_direction_consistency(
    systems: pd.DataFrame, list_stem: str, counts_stem: str, shift: pd.DataFrame
) -> None:
    """System–condition pairs with the same sign of Δr under every model: the list and counts; each row
    with the failed judging calls of its condition's and UMBRELA's cells (`shift`: the label-shift frame)."""
    listing, counts = direction_consistency_tables(displacement_frame(systems))
    by = ["dataset", "condition"]
    tables.write_table(with_unanswered(listing, shift, by, vs_umbrela=True), list_stem, DECIMALS)
    tables.write_table(with_unanswered(counts, shift, by, vs_umbrela=True), counts_stem, DECIMALS)


def with_source_unanswered(table: pd.DataFrame, shift: pd.DataFrame) -> pd.DataFrame:
    """The persona-source table with the failed judging calls behind each side: `unanswered PH` and
    `unanswered US` (the role's cell of each source) and `unanswered_umbrela` (the model's UMBRELA cell,
    which κ, W% and Δr compare with)."""
    counts = failed_calls(shift)
    table = table.copy()
    for source, short in zip(RETRIEVED_SOURCES, ("PH", "US"), strict=True):
        table[f"{UNANSWERED} {short}"] = [
            counts.get((str(r["dataset"]), str(r["model"]), f"{source}/{r['role']}"), 0)
            for _, r in table.iterrows()
        ]
    table[f"{UNANSWERED}_umbrela"] = [
        counts.get((str(r["dataset"]), str(r["model"]), BASELINE), 0) for _, r in table.iterrows()
    ]
    return table


def write_persona_sources(
    kappa: pd.DataFrame,
    systems: pd.DataFrame,
    phi: float,
    stem: str,
    shift: pd.DataFrame,
    undefined: str = "tie",
) -> None:
    """PersonaHub vs USPersona per matched role, side by side, with the failed judging calls behind each
    side (`shift`: the label-shift frame)."""
    table = persona_source_table(
        kappa_agreement_table(kappa),
        win_rate_significance_table(kappa, undefined),
        ranking_agreement_table(systems, phi),
        displacement_frame(systems),
    )
    tables.write_table(with_source_unanswered(table, shift), stem, DECIMALS)
