"""Statistics of the persona study: agreement, win rates, ranking stability and rank displacement.

Every function is pure and works on plain arrays or pandas objects; the well-kept libraries do the
statistics (statsmodels for κ and Holm, scipy for Kendall's τ-b, the sign and the Wilcoxon tests). Only
RBO, for which no such library exists, is implemented here.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from stressprobe.errors import StressprobeError
from stressprobe.persona.data import GRADES  # one grade scale for qrels, labels and statistics

#: Decimals kept before ranking systems: scores equal up to float summation noise count as ties.
SCORE_DECIMALS = 12

# scipy and statsmodels are imported inside the functions that use them: together they take seconds to
# import, and most of the workflow's short analysis jobs need neither (bench/bench_demo.py).


def contingency_table(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The 4×4 table of grade pairs (rows: `first`, columns: `second`); both arrays hold grades 0–3."""
    table = np.zeros((len(GRADES), len(GRADES)))
    np.add.at(table, (np.asarray(first, dtype=int), np.asarray(second, dtype=int)), 1)
    return table


def quadratic_kappa_from_table(table: np.ndarray) -> float:
    """Quadratic-weighted Cohen's κ of a 4×4 grade table (statsmodels), NaN where it is undefined.

    κ = 1 − Σ w·observed / Σ w·expected with w = (i − j)². It is undefined (NaN) when the table is empty
    or when the expected disagreement is 0, which happens exactly when both raters give one and the
    same grade to every pair of the query: perfect agreement that chance explains just as well. When
    only one rater uses a single grade, observed equals expected and κ = 0 (chance-level agreement), as
    the formula says; that is kept, because a judge that cannot tell passages apart agrees by chance only.
    """
    from statsmodels.stats.inter_rater import cohens_kappa

    if table.sum() == 0:
        return math.nan
    rows, cols = table.sum(axis=1), table.sum(axis=0)
    if np.count_nonzero(rows) == 1 and np.array_equal(np.nonzero(rows)[0], np.nonzero(cols)[0]):
        return math.nan
    return float(cohens_kappa(table, wt="quadratic", return_results=False))


def quadratic_kappa(first: Sequence[float], second: Sequence[float]) -> float:
    """Quadratic-weighted κ of two aligned label vectors; pairs where either label is NaN are dropped."""
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    keep = ~(np.isnan(first) | np.isnan(second))
    return quadratic_kappa_from_table(contingency_table(first[keep], second[keep]))


def paired_labels(labels: pd.DataFrame, reference: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(qids, labels, reference labels) of the pairs in both frames (`qid, docid, label`), both labelled.

    Pairs are matched on (qid, docid); a pair whose label is missing on either side is excluded
    (pairwise deletion: an unparsed judgment removes that pair only).
    """
    merged = labels.merge(reference, on=["qid", "docid"], suffixes=("", "_ref"), sort=False)
    first, second = merged["label"].to_numpy(float), merged["label_ref"].to_numpy(float)
    keep = ~(np.isnan(first) | np.isnan(second))
    return merged["qid"].to_numpy(str)[keep], first[keep].astype(int), second[keep].astype(int)


#: `analysis.kappa_weights`: quadratic weights over the fixed grades 0–3 (`fixed`), or over the grades
#: either rater uses in the query, by their positions (`present`), as scikit-learn's
#: `cohen_kappa_score(..., weights="quadratic")` builds them (the release's analysis/helpers.py imports it).
KAPPA_WEIGHTS = ("fixed", "present")


def present_grades_table(table: np.ndarray) -> np.ndarray:
    """The grade table restricted to the grades either rater uses: statsmodels then weights by position
    in that list, so grades {0, 2, 3} are 0, 1, 2 apart — scikit-learn's reading of quadratic weights."""
    used = (table.sum(axis=0) + table.sum(axis=1)) > 0
    return table[np.ix_(used, used)]


def kappa_per_query(labels: pd.DataFrame, reference: pd.DataFrame, weights: str = "fixed") -> pd.DataFrame:
    """κ per query between two sets of labels, each a frame `qid, docid, label` (label NaN = unparsed).

    Uses the pairs of `paired_labels`, weighted as `weights` says (`KAPPA_WEIGHTS`). Returns
    `qid, pairs, kappa` for every query with a shared pair.
    """
    if weights not in KAPPA_WEIGHTS:
        raise StressprobeError(
            f"config key 'analysis.kappa_weights': {weights!r}; use one of {', '.join(KAPPA_WEIGHTS)}"
        )
    reduce = present_grades_table if weights == "present" else (lambda table: table)
    qid, first, second = paired_labels(labels, reference)
    codes, qids = pd.factorize(qid, sort=True)
    cells = codes * 16 + first * 4 + second
    tables = np.bincount(cells, minlength=len(qids) * 16).reshape(len(qids), 4, 4).astype(float)
    return pd.DataFrame(
        {
            "qid": pd.Series(qids, dtype=str),
            "pairs": tables.sum(axis=(1, 2)).astype(int),
            "kappa": [quadratic_kappa_from_table(reduce(t)) for t in tables],
        }
    )


#: `analysis.undefined_kappa`: a query whose κ is undefined on either side is a tie (Δ = 0, kept in the
#: denominator) or dropped.
UNDEFINED_KAPPA = ("tie", "drop")


def win_rate_summary(shift: Sequence[float], undefined: str = "tie") -> dict[str, float]:
    """Win rate and mean κ shift of a condition over the baseline, with their paired tests.

    `shift` holds, per query, κ(condition, human) − κ(baseline, human); a NaN entry (κ undefined on
    either side) counts as a tie, Δ = 0 (`undefined` "tie"), or is dropped ("drop"). W% = 100 · wins /
    queries (a tie is not a win), Δ̄ the mean over the same queries. The sign test is an exact
    two-sided binomial test of wins against losses (ties dropped). Δ̄ is tested with the Wilcoxon
    signed-rank test (zero shifts dropped, as in the sign test): per-query κ differences are bounded,
    skewed and often tied at a few values, so a t-test's normality assumption does not hold on 50–90
    queries, while Wilcoxon needs only symmetry and keeps power. A test without data gives p = NaN.
    """
    from scipy import stats

    if undefined not in UNDEFINED_KAPPA:
        raise StressprobeError(
            f"config key 'analysis.undefined_kappa': {undefined!r}; use one of {', '.join(UNDEFINED_KAPPA)}"
        )
    shift = np.asarray(shift, dtype=float)
    shift = np.nan_to_num(shift, nan=0.0) if undefined == "tie" else shift[~np.isnan(shift)]
    wins, losses = int((shift > 0).sum()), int((shift < 0).sum())
    nonzero = shift[shift != 0]
    return {
        "queries": len(shift),
        "wins": wins,
        "ties": len(shift) - wins - losses,
        "losses": losses,
        "win_rate": 100.0 * wins / len(shift) if len(shift) else math.nan,
        "mean_shift": float(shift.mean()) if len(shift) else math.nan,
        "p_sign": stats.binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else math.nan,
        "p_wilcoxon": float(stats.wilcoxon(nonzero, zero_method="wilcox").pvalue)
        if len(nonzero)
        else math.nan,
    }


def holm_adjust(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values (statsmodels); NaN entries stay NaN and do not count as tests."""
    from statsmodels.stats.multitest import multipletests

    pvalues = np.asarray(pvalues, dtype=float)
    adjusted = np.full_like(pvalues, np.nan)
    valid = ~np.isnan(pvalues)
    if valid.any():
        # statsmodels' Holm ends with gc.collect(), which walks every live object (~0.2 s per call in a
        # process holding the study's frames); frozen objects are skipped, and no result changes.
        gc.freeze()
        try:
            adjusted[valid] = multipletests(pvalues[valid], method="holm")[1]
        finally:
            gc.unfreeze()
    return adjusted


def label_shift_counts(labels: pd.DataFrame, baseline: pd.DataFrame) -> pd.Series:
    """How many pairs a condition moves by each of −3…+3 grades from the baseline's label (index −3…3).

    Uses the pairs of `paired_labels` (matched on qid and docid, unparsed on either side excluded).
    """
    _, first, second = paired_labels(labels, baseline)
    return pd.Series(np.bincount(first - second + 3, minlength=7), index=range(-3, 4))


def kendall_tau_b(first: Sequence[float], second: Sequence[float]) -> float:
    """Kendall's τ-b (scipy) of two score vectors over the same systems (ties handled by τ-b)."""
    from scipy import stats

    return float(stats.kendalltau(first, second, variant="b").statistic)


def ranked_systems(scores: pd.Series) -> list[str]:
    """Systems ordered best first by score; equal scores are ordered by system name (the RBO tie rule).

    Ties are broken by name, identically in every ranking, so identical scores give identical lists.
    """
    rounded = scores.round(SCORE_DECIMALS)
    order = sorted(rounded.index, key=lambda name: (-rounded[name], str(name)))
    return [str(name) for name in order]


def rbo_ext(first: Sequence[str], second: Sequence[str], phi: float = 0.9) -> float:
    """Extrapolated rank-biased overlap RBO_ext of two rankings (Webber, Moffat & Zobel 2010, eq. 32).

    Lists may differ in length and in content; each item may occur once per list. With l the longer
    and s the shorter length and X_d the overlap of the prefixes of depth d (the shorter list held at
    its full length beyond s):
        RBO_ext = (1−φ)/φ · [Σ_{d≤l} X_d/d · φ^d + Σ_{s<d≤l} X_s·(d−s)/(s·d) · φ^d]
                  + [(X_l−X_s)/l + X_s/s] · φ^l
    Identical lists give 1, disjoint lists 0; as φ → 0 it tends to 1 if the top items agree, else 0.
    """
    if not 0 < phi < 1:
        raise ValueError(f"rbo_phi must lie strictly between 0 and 1, got {phi}")
    short, long_ = (list(first), list(second)) if len(first) <= len(second) else (list(second), list(first))
    if len(set(short)) != len(short) or len(set(long_)) != len(long_):
        raise ValueError("a ranking lists an item twice")
    s, l = len(short), len(long_)  # noqa: E741 (the paper's names)
    if s == 0:
        return math.nan
    overlap = _prefix_overlaps(short, long_)
    depth = np.arange(1, l + 1)
    weights = phi ** (depth - 1)  # φ^d / φ, kept without dividing by φ so that φ → 0 stays finite
    agreement = (overlap / depth * weights).sum()
    beyond = depth > s
    agreement += (overlap[s - 1] * (depth[beyond] - s) / (s * depth[beyond]) * weights[beyond]).sum()
    tail = ((overlap[-1] - overlap[s - 1]) / l + overlap[s - 1] / s) * phi**l
    return float((1 - phi) * agreement + tail)


def _prefix_overlaps(short: list[str], long_: list[str]) -> np.ndarray:
    """X_d for d = 1…len(long_): items shared by short[:min(d, s)] and long_[:d]."""
    seen_short: set[str] = set()
    seen_long: set[str] = set()
    overlap, shared = [], 0
    for d, item_long in enumerate(long_):
        if d < len(short):
            item_short = short[d]
            if item_short == item_long:
                shared += 1
            else:
                shared += (item_short in seen_long) + (item_long in seen_short)
            seen_short.add(item_short)
        else:
            shared += item_long in seen_short
        seen_long.add(item_long)
        overlap.append(shared)
    return np.asarray(overlap, dtype=float)


def system_ranks(scores: pd.Series) -> pd.Series:
    """Rank of each system, 1 = best; tied scores share the mean of the ranks they span.

    Average ranks keep Δr symmetric under ties (two tied systems both sit at 1.5, neither is favoured
    by an arbitrary order) and match the tie treatment of τ-b.
    """
    from scipy import stats

    rounded = scores.round(SCORE_DECIMALS).to_numpy()
    return pd.Series(stats.rankdata(-rounded, method="average"), index=scores.index)


def rank_displacement(condition: pd.Series, baseline: pd.Series) -> pd.Series:
    """Δr(s) = r_condition(s) − r_baseline(s) over the systems scored under both (negative = moved up)."""
    common = condition.index.intersection(baseline.index).sort_values()
    return system_ranks(condition[common]) - system_ranks(baseline[common])


def bootstrap_mean_ci(
    values: Sequence[float], resamples: int, seed: int, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean: resample the values with replacement `resamples` times.

    Vectorised numpy with `numpy.random.default_rng(seed)`, so the same seed gives the same interval.
    """
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def consistent_direction(displacements: Sequence[float]) -> int:
    """+1 / −1 when every Δr has that sign (all models agree), else 0 (mixed signs or any Δr = 0)."""
    signs = np.sign(np.asarray(displacements, dtype=float))
    if len(signs) and (signs == signs[0]).all() and signs[0] != 0:
        return int(signs[0])
    return 0
