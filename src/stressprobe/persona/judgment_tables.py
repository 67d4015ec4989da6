"""The persona study's judgment-level tables: agreement with UMBRELA and human labels (the data of Figure 1),
Table 3's win rates and mean κ shifts with their tests, and the label-shift profile."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from stressprobe import tables
from stressprobe.persona import metrics
from stressprobe.persona.analysis import (
    BASELINE,
    CELL,
    DECIMALS,
    READ_COLUMNS,
    SHIFTS,
    in_paper_order,
    with_categories_of,
)
from stressprobe.persona.judging import HUMAN
from stressprobe.scoring import UNANSWERED


def kappa_agreement_table(kappa: pd.DataFrame) -> pd.DataFrame:
    """Mean per-query κ vs UMBRELA and vs human labels per dataset × model × condition (NaN κ skipped), with
    the cell's failed calls on the human-judged queries (`unanswered`: in no κ)."""
    means = kappa.pivot_table(
        index=CELL, columns="reference", values="kappa", aggfunc="mean", observed=True, dropna=False
    )
    means = means.reindex(columns=["umbrela", HUMAN])
    human = kappa[kappa["reference"] == HUMAN]
    defined = human.dropna(subset=["kappa"]).groupby(CELL, observed=True).size()
    failed = human.groupby(CELL, observed=True)[UNANSWERED].sum()
    table = pd.DataFrame(
        {
            "κ vs UMBRELA": means["umbrela"],
            "κ vs human": means[HUMAN],
            "queries": defined.reindex(means.index, fill_value=0).astype(int),
            UNANSWERED: failed.reindex(means.index, fill_value=0).astype(int),
        }
    )
    return table.dropna(how="all", subset=["κ vs UMBRELA", "κ vs human"]).reset_index()


def win_rate_significance_table(kappa: pd.DataFrame, undefined: str = "tie") -> pd.DataFrame:
    """Table 3 in long form: W%, Δ̄ and their tests per dataset × model × non-baseline condition.

    Per query Δ = κ(condition, human) − κ(UMBRELA, human) of the same model. A query where either κ is
    undefined is a tie (`undefined` "tie": not a win, Δ = 0, W% and Δ̄ over all queries, as the paper's
    whole-number W% show) or left out ("drop", `analysis.undefined_kappa`). A query whose κ is undefined
    because a side got no answer for any of its pairs (every call failed) is neither: it is left out and
    counted (`unanswered_queries`), beside the two sides' failed calls (`unanswered`). p-values are
    Holm-adjusted across the conditions of each dataset × model.
    """
    human = kappa[kappa["reference"] == HUMAN].pivot_table(
        index=["dataset", "model", "qid"],
        columns="condition",
        values=["kappa", "pairs", UNANSWERED],
        observed=True,
        dropna=False,
        aggfunc="first",
    )
    rows = []
    for (dataset, model), block in human.groupby(level=["dataset", "model"], observed=True):
        kappas, failed = block["kappa"], block[UNANSWERED].fillna(0)
        # A side with failed calls and no compared pair on a query: its κ there is no answer's.
        unscored = (block["pairs"].fillna(0) == 0) & (failed > 0)
        if BASELINE not in kappas:
            continue
        for condition in kappas.columns:
            if condition == BASELINE or kappas[condition].isna().all():
                continue
            keep = ~(unscored[condition] | unscored[BASELINE])
            summary = metrics.win_rate_summary((kappas[condition] - kappas[BASELINE])[keep], undefined)
            rows.append(
                {
                    "dataset": dataset,
                    "model": model,
                    "condition": condition,
                    **summary,
                    f"{UNANSWERED}_queries": int((~keep).sum()),
                    UNANSWERED: int(failed[condition].sum() + failed[BASELINE].sum()),
                }
            )
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


def label_shift_table(shift: pd.DataFrame, by: Sequence[str] = tuple(CELL)) -> pd.DataFrame:
    """Share (%) of pairs moved by each of −3…+3 grades vs UMBRELA, plus stricter / more lenient totals.

    `shift` holds the counts of `dataset_label_shift`; rows are pooled (counts summed) over `by`, so
    `by=("dataset", "condition")` gives the profile over all models.
    """
    read = [c for c in READ_COLUMNS if c in shift]  # frames of older runs have no reading counts
    columns = ["pairs", "unparsed", UNANSWERED, *read, *[f"shift_{s}" for s in SHIFTS]]
    pooled = shift.groupby(list(by), observed=True)[columns].sum().reset_index()
    counts = pooled[[f"shift_{s}" for s in SHIFTS]].to_numpy(float)
    compared = counts.sum(axis=1, keepdims=True)
    shares = np.divide(100 * counts, compared, out=np.full_like(counts, np.nan), where=compared > 0)
    table = pooled[[*by, "pairs", "unparsed", UNANSWERED, *read]].copy()
    table["compared"] = compared[:, 0].astype(int)
    for i, s in enumerate(SHIFTS):
        table[f"{s:+d}" if s else "0"] = shares[:, i]
    table["stricter"] = shares[:, :3].sum(axis=1)
    table["more lenient"] = shares[:, 4:].sum(axis=1)
    return table


def write_kappa_table(kappa: pd.DataFrame, stem: str) -> None:
    """Mean κ vs UMBRELA and vs human labels per dataset × model × condition (the data of Figure 1)."""
    tables.write_table(kappa_agreement_table(kappa), stem, DECIMALS)


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
    tables.write_table(detail, detail_stem, DECIMALS)


def write_label_shift_table(shift: pd.DataFrame, stem: str) -> None:
    """Label shift profile per dataset × model × condition."""
    tables.write_table(label_shift_table(shift), stem, DECIMALS)
