"""The persona study's aggregation: read the judging stage's files into tidy frames and build each table.

Frames are tidy (one row per observation) with the columns `dataset, model, condition` as pandas
categoricals in config order, so every table lists datasets, models and conditions as the config does.
The statistics themselves live in `stressprobe.persona.metrics`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from stressprobe import tables
from stressprobe.errors import StressprobeError
from stressprobe.io import atomic_write, read_jsonl
from stressprobe.persona import metrics
from stressprobe.persona.data import Qrels, read_qrels, read_run_metadata, read_topics
from stressprobe.persona.evaluation import MEASURE, read_ndcg_table
from stressprobe.persona.judging import CONDITIONS, HUMAN, HUMAN_CONDITION, RETRIEVED_SOURCES
from stressprobe.persona.prompts import RULES

BASELINE = CONDITIONS[0]
SHIFTS = tuple(range(-3, 4))
_CELL = ["dataset", "model", "condition"]
#: The paper's column order of Tables 3 and 4 (by source, then role; the fixed roles; UMBRELA last) and its
#: row order of Table 5 (by role, PersonaHub before USPersona). Only the paper-layout tables use them.
PAPER_COLUMN_ORDER = (*CONDITIONS[3:], *CONDITIONS[1:3], BASELINE)
PAPER_TABLE5_ORDER = (
    *(c for role in ("query", "domain", "orthogonal") for c in CONDITIONS[3:] if c.endswith("/" + role)),
    *CONDITIONS[1:3],
)


def in_paper_order(conditions, paper_order: Sequence[str] = PAPER_COLUMN_ORDER) -> list[str]:
    """`conditions` in the paper's order; any the paper does not list keep their order, after them."""
    conditions = [str(c) for c in conditions]
    return [c for c in paper_order if c in conditions] + [c for c in conditions if c not in paper_order]


# ---- reading the judging stage's files ----


def read_judgments(path: str | Path, unparsed: str = "exclude") -> pd.DataFrame:
    """A judgments file (one JSON object per line) → `qid, docid, label` (label NaN = null, i.e. unparsed).

    With `unparsed` "zero" (`judging.unparsed`) an unparsed answer reads as grade 0, as in the cell's qrels.

    The file is parsed in one call for speed (tens of thousands of lines per cell); when that fails,
    it is read again line by line so that the error names the offending line.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        records = json.loads("[" + ",".join(line for line in text.splitlines() if line.strip()) + "]")
        if not all(isinstance(record, dict) for record in records):
            raise ValueError("not an object per line")
    except (OSError, ValueError):
        records = read_jsonl(path)  # raises a StressprobeError naming the file and line
    for number, record in enumerate(records, start=1):
        label = record.get("label", "missing")
        if "qid" not in record or "docid" not in record or not (label is None or type(label) is int):
            raise StressprobeError(
                f"{path}: record {number} lacks qid/docid or has label {label!r} (want 0-3 or null); "
                "regenerate the judgments"
            )
    frame = pd.DataFrame.from_records(records, columns=["qid", "docid", "label"])
    frame = frame.astype({"qid": str, "docid": str, "label": float})
    frame["rule"] = [record.get("label_rule") or "" for record in records]
    if unparsed == "zero":
        graded = [record.get("status") == "unparsed" for record in records]
        frame.loc[graded, "label"] = 0.0
    bad = frame["label"].notna() & ~frame["label"].isin(metrics.GRADES)
    if bad.any():
        number = int(bad.to_numpy().argmax()) + 1
        raise StressprobeError(
            f"{path}: record {number} has label {frame['label'][number - 1]:g}, not a grade 0-3; "
            "regenerate the judgments"
        )
    return frame


def qrels_frame(qrels: Qrels) -> pd.DataFrame:
    """Qrels (qid → docid → grade) → `qid, docid, label`."""
    rows = [(qid, docid, float(grade)) for qid, docs in qrels.items() for docid, grade in docs.items()]
    return pd.DataFrame(rows, columns=["qid", "docid", "label"])


def read_labels(path: str | Path, unparsed: str = "exclude") -> pd.DataFrame:
    """Labels of one judging cell: a judgments `.jsonl`, or TREC qrels (external judges come as qrels)."""
    if str(path).endswith(".jsonl"):
        return read_judgments(path, unparsed)
    return qrels_frame(read_qrels(path, allow_empty=True))


def system_scores(path: str | Path, qids: Sequence[str]) -> pd.Series:
    """Mean nDCG@10 per run of an nDCG table, over the dataset's queries `qids` (its topics).

    Computed from the per-query rows with trec_eval semantics: a run without a row for a query scores
    0 for it; rows of other queries and the `all` rows are ignored (so the mean does not depend on
    which queries the table's writer averaged over).
    """
    if not qids:
        raise StressprobeError(f"{path}: the dataset has no queries; check its topics file")
    wanted, totals = set(qids), {}
    for row in read_ndcg_table(path):
        totals[row["run"]] = totals.get(row["run"], 0.0) + (row[MEASURE] if row["qid"] in wanted else 0.0)
    return pd.Series({run: total / len(wanted) for run, total in sorted(totals.items())}, name="ndcg")


def read_run_types(datasets: Sequence[str], paths: Sequence[str | Path]) -> dict[str, dict[str, str]]:
    """dataset → run → system type from each dataset's `run_metadata.tsv` (same order as `datasets`)."""
    return {dataset: read_run_metadata(path) for dataset, path in zip(datasets, paths, strict=True)}


# ---- tidy frames: ordering and intermediate files ----


def categorize(frame: pd.DataFrame, order: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """Make `dataset`, `model`, `condition` (where present) categoricals in config order.

    Values missing from `order` (e.g. `human`) are appended after the configured ones.
    """
    frame = frame.copy()
    for column, categories in order.items():
        if column in frame:
            extra = sorted(set(frame[column].astype(str)) - set(categories))
            frame[column] = pd.Categorical(frame[column].astype(str), categories=[*categories, *extra])
    return frame


def with_categories_of(frame: pd.DataFrame, source: pd.DataFrame) -> pd.DataFrame:
    """Give `frame`'s dataset/model/condition columns the categories (config order) of `source`'s."""
    columns = [c for c in _CELL if c in frame and isinstance(source[c].dtype, pd.CategoricalDtype)]
    return frame.astype({c: source[c].dtype for c in columns})


def write_frame(frame: pd.DataFrame, path: str | Path) -> None:
    """An intermediate tidy frame as TSV (full float precision), written atomically."""
    atomic_write(path, frame.to_csv(sep="\t", index=False, lineterminator="\n"))


def read_frames(paths: Sequence[str | Path], order: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """Concatenate intermediate TSVs (one per dataset) and order them as the config does."""
    frames = [
        pd.read_csv(p, sep="\t", dtype={"qid": str, "run": str}, keep_default_na=False, na_values=[""])
        for p in paths
    ]
    return categorize(pd.concat(frames, ignore_index=True), order)


# ---- per dataset: judgment level ----


def dataset_kappa(
    dataset: str, cells: Mapping[tuple[str, str], pd.DataFrame], human: pd.DataFrame
) -> pd.DataFrame:
    """Per-query κ of every (model, condition) against human labels and against its model's UMBRELA labels.

    Columns: dataset, model, condition, reference (`human` | `umbrela`), qid, pairs, kappa. Every query of
    the human qrels has a row (0 pairs and κ NaN where a cell shares no labelled pair with the reference),
    so that statistics over all queries (W%, Δ̄) see every one.
    """
    parts = []
    qids = pd.Index(sorted(set(human["qid"].astype(str))), name="qid")
    for (model, condition), labels in cells.items():
        references = {HUMAN: human}
        if condition != BASELINE and (model, BASELINE) in cells:
            references["umbrela"] = cells[(model, BASELINE)]
        for reference, reference_labels in references.items():
            part = metrics.kappa_per_query(labels, reference_labels).set_index("qid")
            part = part.reindex(qids.union(part.index)).fillna({"pairs": 0}).astype({"pairs": int})
            part = part.reset_index()
            parts.append(part.assign(dataset=dataset, model=model, condition=condition, reference=reference))
    columns = ["dataset", "model", "condition", "reference", "qid", "pairs", "kappa"]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


READ_COLUMNS = [f"read_{rule}" for rule in RULES]
_SHIFT_COLUMNS = ["pairs", "unparsed", *READ_COLUMNS, *[f"shift_{s}" for s in SHIFTS]]


def dataset_label_shift(dataset: str, cells: Mapping[tuple[str, str], pd.DataFrame]) -> pd.DataFrame:
    """Per (model, condition): pairs, unparsed pairs, answers read by each rule of `judging.answer_reader`,
    and counts of each grade shift vs UMBRELA (none for UMBRELA's own row, which is there for its counts)."""
    rows = []
    for (model, condition), labels in cells.items():
        if (model, BASELINE) not in cells:
            continue
        rules = labels["rule"].value_counts() if "rule" in labels else pd.Series(dtype=int)
        counts = (
            metrics.label_shift_counts(labels, cells[(model, BASELINE)])
            if condition != BASELINE
            else dict.fromkeys(SHIFTS, 0)
        )
        rows.append(
            {
                "dataset": dataset,
                "model": model,
                "condition": condition,
                "pairs": len(labels),
                "unparsed": int(labels["label"].isna().sum()),
                **{f"read_{rule}": int(rules.get(rule, 0)) for rule in RULES},
                **{f"shift_{s}": int(counts[s]) for s in SHIFTS},
            }
        )
    return pd.DataFrame(rows, columns=["dataset", "model", "condition", *_SHIFT_COLUMNS])


def dataset_system_scores(
    dataset: str, tables: Mapping[tuple[str, str], str | Path], qids: Sequence[str]
) -> pd.DataFrame:
    """nDCG@10 of every run under every (model, condition), dataset, model, condition, run, ndcg."""
    parts = []
    for (model, condition), path in tables.items():
        scores = system_scores(path, qids)
        parts.append(
            pd.DataFrame(
                {
                    "dataset": dataset,
                    "model": model,
                    "condition": condition,
                    "run": scores.index,
                    "ndcg": scores.to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


# ---- tables: judgment level ----


def kappa_agreement_table(kappa: pd.DataFrame) -> pd.DataFrame:
    """Mean per-query κ vs UMBRELA and vs human labels per dataset × model × condition (NaN κ skipped)."""
    means = kappa.pivot_table(
        index=_CELL, columns="reference", values="kappa", aggfunc="mean", observed=True, dropna=False
    )
    means = means.reindex(columns=["umbrela", HUMAN])
    human = kappa[kappa["reference"] == HUMAN].dropna(subset=["kappa"])
    defined = human.groupby(_CELL, observed=True).size().reindex(means.index, fill_value=0)
    table = pd.DataFrame(
        {"κ vs UMBRELA": means["umbrela"], "κ vs human": means[HUMAN], "queries": defined.astype(int)}
    )
    return table.dropna(how="all", subset=["κ vs UMBRELA", "κ vs human"]).reset_index()


def win_rate_significance_table(kappa: pd.DataFrame, undefined: str = "tie") -> pd.DataFrame:
    """Table 3 in long form: W%, Δ̄ and their tests per dataset × model × non-baseline condition.

    Per query Δ = κ(condition, human) − κ(UMBRELA, human) of the same model. A query where either κ is
    undefined is a tie (`undefined` "tie": not a win, Δ = 0, W% and Δ̄ over all queries, as the paper's
    whole-number W% show) or left out ("drop", `analysis.undefined_kappa`). p-values are Holm-adjusted
    across the conditions of each dataset × model.
    """
    human = kappa[kappa["reference"] == HUMAN].pivot_table(
        index=["dataset", "model", "qid"],
        columns="condition",
        values="kappa",
        observed=True,
        dropna=False,
        aggfunc="first",
    )
    rows = []
    for (dataset, model), block in human.groupby(level=["dataset", "model"], observed=True):
        if BASELINE not in block:
            continue
        for condition in block.columns:
            if condition == BASELINE or block[condition].isna().all():
                continue
            summary = metrics.win_rate_summary(block[condition] - block[BASELINE], undefined)
            rows.append({"dataset": dataset, "model": model, "condition": condition, **summary})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = with_categories_of(table, kappa)
    for test in ("p_sign", "p_wilcoxon"):
        table[f"{test}_holm"] = table.groupby(["dataset", "model"], observed=True)[test].transform(
            lambda p: pd.Series(metrics.holm_adjust(p), index=p.index)
        )
    return table.rename(columns={"win_rate": "W%", "mean_shift": "Δ̄"})


def mark_significant(table: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Add `significant`: which of W% (sign test) and Δ̄ (Wilcoxon) have a Holm-adjusted p below `alpha`."""
    marks = [
        " ".join(name for name, p in (("W%", ps), ("Δ̄", pw)) if p < alpha)
        for ps, pw in zip(table["p_sign_holm"], table["p_wilcoxon_holm"], strict=True)
    ]
    return table.assign(significant=marks)


def win_rate_wide_table(significance: pd.DataFrame) -> pd.DataFrame:
    """Table 3 in the paper's layout: one row per dataset × model, one W% column per condition."""
    wide = significance.pivot_table(
        index=["dataset", "model"], columns="condition", values="W%", observed=True
    )
    wide.columns = [str(c) for c in wide.columns]
    return wide.reset_index()


def win_rate_side_by_side_table(significance: pd.DataFrame) -> pd.DataFrame:
    """Table 3 as the paper lays it out: one row per dataset × model; per condition, W% and Δ̄ side by side.

    Columns `<condition> W%` and `<condition> Δ̄`, conditions in the paper's order (PersonaHub, USPersona,
    Evidence, GAP); a condition without a value for any row of the table is left out.
    """
    index = ["dataset", "model"]
    parts = {
        metric: significance.pivot_table(index=index, columns="condition", values=metric, observed=True)
        for metric in ("W%", "Δ̄")
    }
    conditions = in_paper_order(parts["W%"].columns)
    wide = pd.DataFrame(index=parts["W%"].index)
    for condition in conditions:
        for metric in ("W%", "Δ̄"):
            wide[f"{condition} {metric}"] = parts[metric][condition]
    return wide.reset_index()


def label_shift_table(shift: pd.DataFrame, by: Sequence[str] = tuple(_CELL)) -> pd.DataFrame:
    """Share (%) of pairs moved by each of −3…+3 grades vs UMBRELA, plus stricter / more lenient totals.

    `shift` holds the counts of `dataset_label_shift`; rows are pooled (counts summed) over `by`, so
    `by=("dataset", "condition")` gives the profile over all models.
    """
    read = [c for c in READ_COLUMNS if c in shift]  # frames of older runs have no reading counts
    columns = ["pairs", "unparsed", *read, *[f"shift_{s}" for s in SHIFTS]]
    pooled = shift.groupby(list(by), observed=True)[columns].sum().reset_index()
    counts = pooled[[f"shift_{s}" for s in SHIFTS]].to_numpy(float)
    compared = counts.sum(axis=1, keepdims=True)
    shares = np.divide(100 * counts, compared, out=np.full_like(counts, np.nan), where=compared > 0)
    table = pooled[[*by, "pairs", "unparsed", *read]].copy()
    table["compared"] = compared[:, 0].astype(int)
    for i, s in enumerate(SHIFTS):
        table[f"{s:+d}" if s else "0"] = shares[:, i]
    table["stricter"] = shares[:, :3].sum(axis=1)
    table["more lenient"] = shares[:, 4:].sum(axis=1)
    return table


# ---- tables: system level ----


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
    for (dataset, model, condition), _ in judged.groupby(_CELL, observed=True):
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
    for (dataset, model, condition), _ in judged.groupby(_CELL, observed=True):
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
    per_model = frame.groupby(_CELL, observed=True).agg(
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
        .groupby(_CELL, observed=True)["abs_rank"]
        .mean()
        .rename("mean |Δr|")
        .reset_index()
    )
    parts = [
        agreement[[*_CELL, "κ vs UMBRELA"]],
        significance.reindex(columns=[*_CELL, "W%"]),
        ranking.reindex(columns=[*_CELL, "τ-b", "RBO"]),
        mean_rank,
    ]
    merged = parts[0].astype({c: str for c in _CELL})
    for part in parts[1:]:
        merged = merged.merge(part.astype({c: str for c in _CELL}), on=_CELL, how="left")
    source_role = merged["condition"].str.split("/", n=1, expand=True)
    merged = merged.assign(source=source_role[0], role=source_role[1])
    merged = merged[merged["source"].isin(RETRIEVED_SOURCES)]
    rows = []
    for (dataset, model, role), block in merged.groupby(["dataset", "model", "role"], sort=False):
        row = {"dataset": dataset, "model": model, "role": role}
        for metric in ("κ vs UMBRELA", "W%", "τ-b", "RBO", "mean |Δr|"):
            for source, short in zip(RETRIEVED_SOURCES, ("PH", "US"), strict=True):
                value = block.loc[block["source"] == source, metric]
                row[f"{metric} {short}"] = value.iloc[0] if len(value) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


# ---- outputs: one function per table or figure family (called by the scripts and the benchmark) ----

_DECIMALS = {
    "W%": 1,
    "Δ̄": 3,
    "p_sign": 4,
    "p_sign_holm": 4,
    "p_wilcoxon": 4,
    "p_wilcoxon_holm": 4,
    "mean |Δr|": 2,
    "max |Δr|": 1,
    "CI low": 2,
    "CI high": 2,
    "mean Δr": 2,
    "affected systems": 1,
    "mean |ΔnDCG@10|": 4,
    "mean ΔnDCG@10": 4,
    "|mean ΔnDCG@10|": 4,
    "W% PH": 1,
    "W% US": 1,
    "mean |Δr| PH": 2,
    "mean |Δr| US": 2,
    **{f"{s:+d}" if s else "0": 1 for s in SHIFTS},
    "stricter": 1,
    "more lenient": 1,
}


def write_judgment_frames(
    dataset: str,
    label_paths: Sequence[str | Path],
    cells: Sequence[Sequence[str]],
    human_path: str | Path,
    kappa_path: str | Path,
    shift_path: str | Path,
    unparsed: str = "exclude",
) -> None:
    """Per dataset: per-query κ (vs human, vs UMBRELA) and label shift counts of every judged cell."""
    labels = {tuple(cell): read_labels(path, unparsed) for cell, path in zip(cells, label_paths, strict=True)}
    write_frame(dataset_kappa(dataset, labels, read_labels(human_path)), kappa_path)
    write_frame(dataset_label_shift(dataset, labels), shift_path)


def write_system_frame(
    dataset: str,
    ndcg_paths: Sequence[str | Path],
    cells: Sequence[Sequence[str]],
    topics_path: str | Path,
    out_path: str | Path,
) -> None:
    """Per dataset: nDCG@10 of every run under every cell (human included), over the topics' queries."""
    tables_ = {tuple(cell): path for cell, path in zip(cells, ndcg_paths, strict=True)}
    write_frame(dataset_system_scores(dataset, tables_, list(read_topics(topics_path))), out_path)


def write_kappa_table(kappa: pd.DataFrame, stem: str) -> None:
    """Mean κ vs UMBRELA and vs human labels per dataset × model × condition (the data of Figure 1)."""
    tables.write_table(kappa_agreement_table(kappa), stem, _DECIMALS)


def write_kappa_heatmap(
    kappa: pd.DataFrame, figure: tuple[str, str], order: Mapping, figure_options: Mapping
) -> None:
    """Figure 1: heatmap of mean κ vs UMBRELA, conditions × models, one panel per dataset."""
    from stressprobe import plots  # matplotlib: only figure jobs pay for importing it

    conditions = [c for c in order["condition"] if c != BASELINE]
    fig = plots.kappa_heatmap(
        kappa_agreement_table(kappa),
        order["dataset"],
        order["model"],
        conditions,
        **plots.figure_options(figure_options),
    )
    plots.save_figure(fig, *figure, dpi=figure_options["dpi"])


def write_win_rate_tables(
    kappa: pd.DataFrame, alpha: float, wide_stem: str, detail_stem: str, undefined: str = "tie"
) -> None:
    """Table 3: W% and Δ̄ side by side per condition, a row per dataset × model, the best W% of each row
    in bold (the paper's layout); and the long table with the tests."""
    detail = win_rate_significance_table(kappa, undefined)
    detail = mark_significant(detail, alpha) if not detail.empty else detail
    wide = win_rate_side_by_side_table(detail) if not detail.empty else detail
    win_rates = [c for c in wide.columns if str(c).endswith(" W%")]
    decimals = {c: 1 if c.endswith(" W%") else 3 for c in wide.columns if c not in ("dataset", "model")}
    tables.write_table(
        wide,
        wide_stem,
        decimals,
        bold=tables.best_in_rows(wide, win_rates) if win_rates else None,
    )
    tables.write_table(detail, detail_stem, _DECIMALS)


def write_label_shift_table(shift: pd.DataFrame, stem: str) -> None:
    """Label shift profile per dataset × model × condition."""
    tables.write_table(label_shift_table(shift), stem, _DECIMALS)


def write_label_shift_figure(
    shift: pd.DataFrame, figure: tuple[str, str], order: Mapping, figure_options: Mapping
) -> None:
    """Label shift profile pooled over models: a stacked bar per condition, one panel per dataset."""
    from stressprobe import plots  # matplotlib: only figure jobs pay for importing it

    pooled = label_shift_table(shift, by=("dataset", "condition"))
    conditions = [c for c in order["condition"] if c != BASELINE]
    fig = plots.label_shift_figure(
        pooled, order["dataset"], conditions, **plots.figure_options(figure_options)
    )
    plots.save_figure(fig, *figure, dpi=figure_options["dpi"])


def write_ndcg_scatter(
    systems: pd.DataFrame, figure: tuple[str, str], order: Mapping, figure_options: Mapping
) -> None:
    """Figure 2: condition vs human nDCG@10 per run; a row per dataset (config order: DL20 on top in the
    paper's config), a column per judge model."""
    from stressprobe import plots  # matplotlib: only figure jobs pay for importing it

    present = set(zip(systems["dataset"].astype(str), systems["model"].astype(str), strict=True))
    datasets = [d for d in order["dataset"] if any((d, m) in present for m in order["model"])]
    models = [m for m in order["model"] if any((d, m) in present for d in order["dataset"])]
    options = plots.figure_options(figure_options)
    fig = plots.ndcg_scatter_grid(
        systems,
        datasets,
        models,
        order["condition"],
        width=figure_options.get("figure2_width_in") or options["width"],
        font_size=options["font_size"],
    )
    plots.save_figure(fig, *figure, dpi=figure_options["dpi"])


def write_ranking_agreement(systems: pd.DataFrame, phi: float, stem: str) -> None:
    """Table 4: τ-b and RBO_ext(φ) of every condition's ranking vs the human ranking."""
    tables.write_table(ranking_agreement_table(systems, phi), stem, _DECIMALS)


def write_displacement_table(systems: pd.DataFrame, stem: str) -> None:
    """Table 5: rank and nDCG displacement per dataset × condition; the largest mean |Δr| per dataset bold."""
    table = displacement_by_condition_table(displacement_frame(systems))
    if not table.empty:  # rows as in the paper: by role, PersonaHub before USPersona, then the fixed roles
        conditions = table["condition"].astype(str)
        rank = {c: i for i, c in enumerate(in_paper_order(conditions.unique(), PAPER_TABLE5_ORDER))}
        order = np.lexsort((conditions.map(rank).to_numpy(), _positions(table["dataset"])))
        table = table.iloc[order].reset_index(drop=True)
    tables.write_table(table, stem, _DECIMALS, bold=best_in_datasets(table, "mean |Δr|"))


def write_displacement_ci(systems: pd.DataFrame, resamples: int, seed: int, level: float, stem: str) -> None:
    """Table 6: mean |Δr| per dataset × model with its bootstrap CI over systems, most sensitive first."""
    table = displacement_ci_table(displacement_frame(systems), resamples, seed, level)
    tables.write_table(table, stem, _DECIMALS, bold=best_in_datasets(table, "mean |Δr|"))


def write_sensitive_systems(
    systems: pd.DataFrame, run_types: Mapping[str, Mapping[str, str]], top_k: int, stem: str
) -> None:
    """Table 7: the most sensitive systems per dataset with their type from the run metadata."""
    tables.write_table(
        sensitive_systems_table(displacement_frame(systems), run_types, top_k), stem, _DECIMALS
    )


def write_direction_consistency(systems: pd.DataFrame, list_stem: str, counts_stem: str) -> None:
    """System–condition pairs with the same sign of Δr under every model: the list and counts."""
    listing, counts = direction_consistency_tables(displacement_frame(systems))
    tables.write_table(listing, list_stem, _DECIMALS)
    tables.write_table(counts, counts_stem, _DECIMALS)


def write_persona_sources(
    kappa: pd.DataFrame, systems: pd.DataFrame, phi: float, stem: str, undefined: str = "tie"
) -> None:
    """PersonaHub vs USPersona per matched role, side by side."""
    table = persona_source_table(
        kappa_agreement_table(kappa),
        win_rate_significance_table(kappa, undefined),
        ranking_agreement_table(systems, phi),
        displacement_frame(systems),
    )
    tables.write_table(table, stem, _DECIMALS)
