"""Each statistic of stressprobe.persona.metrics against an independent computation on small hand-built inputs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stressprobe.errors import StressprobeError
from stressprobe.persona import metrics


def kappa_by_definition(a, b) -> float:
    """Quadratic κ written out: 1 − mean squared disagreement / its mean over all cross pairs (chance)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    observed = np.mean((a - b) ** 2)
    expected = np.mean((a[:, None] - b[None, :]) ** 2)
    return 1 - observed / expected


def labels_frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["qid", "docid", "label"]).astype({"label": float})


# ---- κ ----


@pytest.mark.parametrize("seed", range(5))
def test_kappa_matches_definition_on_random_labels_with_ties(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, 30)
    b = np.clip(a + rng.integers(-1, 2, 30), 0, 3)
    assert metrics.quadratic_kappa(a, b) == pytest.approx(kappa_by_definition(a, b))


def test_kappa_matches_scikit_learn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    a, b = [0, 1, 2, 3, 3, 2, 1, 0, 2], [0, 2, 2, 3, 1, 2, 1, 1, 3]
    expected = sklearn_metrics.cohen_kappa_score(a, b, weights="quadratic", labels=[0, 1, 2, 3])
    assert metrics.quadratic_kappa(a, b) == pytest.approx(expected)


def test_kappa_drops_pairs_with_a_missing_label_pairwise():
    a = [0, 1, np.nan, 3, 2, 1]
    b = [0, 2, 3, np.nan, 2, 1]
    assert metrics.quadratic_kappa(a, b) == pytest.approx(kappa_by_definition([0, 1, 2, 1], [0, 2, 2, 1]))


def test_kappa_of_a_query_with_one_label_value():
    # Both raters give the same single grade: chance explains the agreement fully, κ is undefined.
    assert math.isnan(metrics.quadratic_kappa([2, 2, 2], [2, 2, 2]))
    # One rater constant, the other varies: observed = expected disagreement, κ = 0 by the formula.
    assert metrics.quadratic_kappa([2, 2, 2, 2], [0, 1, 2, 3]) == pytest.approx(
        kappa_by_definition([2, 2, 2, 2], [0, 1, 2, 3])
    )
    assert metrics.quadratic_kappa([2, 2, 2, 2], [0, 1, 2, 3]) == pytest.approx(0.0)
    # Both constant at different grades: complete disagreement equal to chance, κ = 0.
    assert metrics.quadratic_kappa([1, 1], [3, 3]) == pytest.approx(0.0)
    assert math.isnan(metrics.quadratic_kappa([], []))
    assert math.isnan(metrics.quadratic_kappa([np.nan], [1]))


def test_kappa_per_query_matches_definition_query_by_query():
    human = labels_frame(
        [
            ("q1", "a", 0),
            ("q1", "b", 1),
            ("q1", "c", 3),
            ("q1", "d", 2),
            ("q2", "a", 2),
            ("q2", "b", 2),
            ("q2", "c", 2),  # one label value
            ("q3", "a", 0),
            ("q3", "b", 3),
        ]
    )
    judge = labels_frame(
        [
            ("q1", "a", 0),
            ("q1", "b", 2),
            ("q1", "c", 3),
            ("q1", "d", None),  # unparsed pair
            ("q2", "a", 2),
            ("q2", "b", 2),
            ("q2", "c", 2),
            ("q3", "a", 1),
            ("q3", "b", 3),
            ("q3", "zzz", 2),  # pair without a human label
            ("q4", "a", 1),  # query without human labels
        ]
    )
    result = metrics.kappa_per_query(judge, human).set_index("qid")
    assert list(result.index) == ["q1", "q2", "q3"]
    assert result.loc["q1", "pairs"] == 3
    assert result.loc["q1", "kappa"] == pytest.approx(kappa_by_definition([0, 2, 3], [0, 1, 3]))
    assert math.isnan(result.loc["q2", "kappa"])
    assert result.loc["q3", "kappa"] == pytest.approx(kappa_by_definition([1, 3], [0, 3]))


def test_kappa_per_query_of_disjoint_labels_is_empty():
    result = metrics.kappa_per_query(labels_frame([("q1", "a", 1)]), labels_frame([("q1", "b", 1)]))
    assert result.empty and list(result.columns) == ["qid", "pairs", "kappa"]


# ---- win rate and tests ----


def exact_sign_test(wins: int, losses: int) -> float:
    n = wins + losses
    tail = sum(math.comb(n, k) for k in range(0, min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def exact_wilcoxon(differences) -> float:
    """Two-sided exact signed-rank p by enumerating every sign assignment (distinct magnitudes, no zeros)."""
    ranks = stats.rankdata(np.abs(differences))
    observed = ranks[np.asarray(differences) > 0].sum()
    totals = [
        sum(r for r, s in zip(ranks, signs, strict=True) if s)
        for signs in itertools.product([0, 1], repeat=len(ranks))
    ]
    mean = ranks.sum() / 2
    return float(np.mean([abs(t - mean) >= abs(observed - mean) - 1e-12 for t in totals]))


def test_win_rate_summary_counts_ties_and_drops_undefined_queries_on_request():
    shift = [0.3, -0.1, 0.0, 0.25, np.nan, 0.6, -0.45, 0.05, 0.0, 0.15, 0.7]
    summary = metrics.win_rate_summary(shift, undefined="drop")
    defined = [s for s in shift if not math.isnan(s)]
    assert summary["queries"] == len(defined) == 10
    assert (summary["wins"], summary["ties"], summary["losses"]) == (6, 2, 2)
    assert summary["win_rate"] == pytest.approx(100 * 6 / 10)
    assert summary["mean_shift"] == pytest.approx(sum(defined) / len(defined))
    assert summary["p_sign"] == pytest.approx(exact_sign_test(6, 2))
    assert summary["p_wilcoxon"] == pytest.approx(exact_wilcoxon([s for s in defined if s != 0]))


def test_by_default_an_undefined_query_is_a_tie_over_all_queries_and_the_tests_are_unchanged():
    # The paper's W% are whole numbers of all 54 / 86 queries: an undefined κ is no win and a shift of 0.
    shift = [0.3, -0.1, 0.0, 0.25, np.nan, 0.6, -0.45, 0.05, 0.0, 0.15, 0.7]
    summary = metrics.win_rate_summary(shift)
    defined = [s for s in shift if not math.isnan(s)]
    assert summary["queries"] == 11
    assert (summary["wins"], summary["ties"], summary["losses"]) == (6, 3, 2)
    assert summary["win_rate"] == pytest.approx(100 * 6 / 11)
    assert summary["mean_shift"] == pytest.approx(sum(defined) / 11)
    # Ties and zero shifts leave both tests as they are.
    assert summary["p_sign"] == pytest.approx(exact_sign_test(6, 2))
    assert summary["p_wilcoxon"] == pytest.approx(exact_wilcoxon([s for s in defined if s != 0]))
    with pytest.raises(StressprobeError, match=r"analysis\.undefined_kappa"):
        metrics.win_rate_summary(shift, undefined="skip")


def test_win_rate_summary_without_data_gives_nan_p_values():
    summary = metrics.win_rate_summary([np.nan, 0.0, 0.0], undefined="drop")
    assert summary["queries"] == 2 and summary["win_rate"] == 0
    assert math.isnan(summary["p_sign"]) and math.isnan(summary["p_wilcoxon"])
    assert math.isnan(metrics.win_rate_summary([])["win_rate"])


def holm_by_hand(pvalues):
    order = np.argsort(pvalues)
    m = len(pvalues)
    adjusted, running = np.empty(m), 0.0
    for i, index in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[index]))
        adjusted[index] = running
    return adjusted


def test_holm_adjust_matches_the_step_down_procedure_and_skips_nan():
    p = np.array([0.01, 0.04, np.nan, 0.03, 0.5])
    adjusted = metrics.holm_adjust(p)
    valid = ~np.isnan(p)
    assert math.isnan(adjusted[2])
    np.testing.assert_allclose(adjusted[valid], holm_by_hand(p[valid]))
    assert np.isnan(metrics.holm_adjust([np.nan])).all()


def test_label_shift_counts_each_shift_and_excludes_unparsed_pairs():
    base = labels_frame([("q", "a", 0), ("q", "b", 3), ("q", "c", 1), ("q", "d", 2), ("q", "e", 2)])
    cond = labels_frame([("q", "a", 3), ("q", "b", 0), ("q", "c", 1), ("q", "d", None), ("q", "e", 1)])
    counts = metrics.label_shift_counts(cond, base)
    assert list(counts.index) == [-3, -2, -1, 0, 1, 2, 3]
    assert counts.to_dict() == {-3: 1, -2: 0, -1: 1, 0: 1, 1: 0, 2: 0, 3: 1}


# ---- rankings ----


def tau_b_by_definition(x, y) -> float:
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif dx == dy:
            concordant += 1
        else:
            discordant += 1
    return (concordant - discordant) / math.sqrt(
        (concordant + discordant + ties_x) * (concordant + discordant + ties_y)
    )


def test_kendall_tau_b_with_ties_matches_definition():
    x = [0.5, 0.4, 0.4, 0.3, 0.2, 0.2, 0.1]
    y = [0.45, 0.5, 0.3, 0.3, 0.1, 0.25, 0.1]
    assert metrics.kendall_tau_b(x, y) == pytest.approx(tau_b_by_definition(x, y))
    assert metrics.kendall_tau_b(x, x) == pytest.approx(1.0)


def rbo_ext_by_definition(first, second, p) -> float:
    """Webber et al. (2010) eq. 32 computed literally from prefix sets."""
    short, long_ = sorted([list(first), list(second)], key=len)
    s, l = len(short), len(long_)  # noqa: E741
    overlap = {d: len(set(short[:d]) & set(long_[:d])) for d in range(1, l + 1)}
    total = sum(overlap[d] / d * p**d for d in range(1, l + 1))
    total += sum(overlap[s] * (d - s) / (s * d) * p**d for d in range(s + 1, l + 1))
    return (1 - p) / p * total + ((overlap[l] - overlap[s]) / l + overlap[s] / s) * p**l


def test_rbo_hand_computed_swap_of_the_top_two():
    # X = (0, 2, 3): A_1 = 0, A_2 = A_3 = 1, so RBO_ext = (1-p)/p (p^2 + p^3) + p^3.
    p = 0.9
    assert metrics.rbo_ext(["a", "b", "c"], ["b", "a", "c"], p) == pytest.approx(
        (1 - p) / p * (p**2 + p**3) + p**3
    )


def test_rbo_hand_computed_uneven_lists():
    # S = [a, c], L = [a, b, c]: X = (1, 1, 2); eq. 32 by hand.
    p = 0.9
    by_hand = (1 - p) / p * (1 * p + 1 / 2 * p**2 + 2 / 3 * p**3 + 1 * (3 - 2) / (2 * 3) * p**3) + (
        (2 - 1) / 3 + 1 / 2
    ) * p**3
    assert metrics.rbo_ext(["a", "c"], ["a", "b", "c"], p) == pytest.approx(by_hand)


@pytest.mark.parametrize("seed", range(6))
def test_rbo_matches_literal_definition_and_is_symmetric(seed):
    rng = np.random.default_rng(seed)
    items = [f"s{i}" for i in range(15)]
    first = list(rng.permutation(items)[: rng.integers(3, 15)])
    second = list(rng.permutation(items)[: rng.integers(3, 15)])
    value = metrics.rbo_ext(first, second, 0.9)
    assert value == pytest.approx(rbo_ext_by_definition(first, second, 0.9))
    assert value == pytest.approx(metrics.rbo_ext(second, first, 0.9))
    assert 0.0 <= value <= 1.0


@pytest.mark.parametrize("phi", [0.5, 0.9, 0.99])
def test_rbo_identical_is_one_and_disjoint_is_zero(phi):
    ranking = [f"run{i}" for i in range(40)]
    assert metrics.rbo_ext(ranking, ranking, phi) == pytest.approx(1.0)
    assert metrics.rbo_ext(ranking, [f"other{i}" for i in range(40)], phi) == 0.0
    # A ranking and its own extension: the extrapolation assumes the agreement goes on.
    assert metrics.rbo_ext(ranking[:10], ranking, phi) == pytest.approx(1.0)


def test_rbo_limit_phi_to_zero_only_the_top_item_counts():
    assert metrics.rbo_ext(["a", "b", "c"], ["a", "c", "b"], 1e-9) == pytest.approx(1.0, abs=1e-8)
    assert metrics.rbo_ext(["a", "b", "c"], ["b", "a", "c"], 1e-9) == pytest.approx(0.0, abs=1e-8)


def test_rbo_rejects_bad_phi_and_duplicates():
    with pytest.raises(ValueError):
        metrics.rbo_ext(["a"], ["a"], 1.0)
    with pytest.raises(ValueError):
        metrics.rbo_ext(["a", "a"], ["a"], 0.9)


def test_ranked_systems_breaks_ties_by_name():
    scores = pd.Series({"zeta": 0.5, "alpha": 0.5, "mid": 0.7, "low": 0.1 + 0.2})
    near_tie = pd.Series({"zeta": 0.5, "alpha": 0.5 + 1e-15, "mid": 0.7, "low": 0.3})
    assert metrics.ranked_systems(scores) == ["mid", "alpha", "zeta", "low"]
    assert metrics.ranked_systems(near_tie) == ["mid", "alpha", "zeta", "low"]


def test_system_ranks_average_ties_and_rank_one_is_best():
    ranks = metrics.system_ranks(pd.Series({"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}))
    assert ranks.to_dict() == {"a": 1.0, "b": 2.5, "c": 2.5, "d": 4.0}


def test_rank_displacement_uses_systems_scored_under_both():
    baseline = pd.Series({"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6, "gone": 0.95})
    condition = pd.Series({"a": 0.5, "b": 0.8, "c": 0.8, "d": 0.1})
    delta = metrics.rank_displacement(condition, baseline)
    # Baseline ranks without "gone": a 1, b 2, c 3, d 4; condition: b, c tied at 1.5, a 3, d 4.
    assert delta.to_dict() == {"a": 3 - 1, "b": 1.5 - 2, "c": 1.5 - 3, "d": 0.0}
    assert (metrics.rank_displacement(baseline, baseline) == 0).all()


# ---- bootstrap and direction ----


def test_bootstrap_ci_is_seeded_and_agrees_with_scipy():
    values = np.random.default_rng(7).gamma(2.0, 1.5, 200)
    low, high = metrics.bootstrap_mean_ci(values, 5000, seed=42)
    assert (low, high) == metrics.bootstrap_mean_ci(values, 5000, seed=42)
    assert (low, high) != metrics.bootstrap_mean_ci(values, 5000, seed=43)
    reference = stats.bootstrap(
        (values,), np.mean, n_resamples=5000, method="percentile", rng=np.random.default_rng(1)
    ).confidence_interval
    assert low < values.mean() < high
    assert low == pytest.approx(reference.low, abs=0.05) and high == pytest.approx(reference.high, abs=0.05)


def test_bootstrap_ci_of_constant_values_is_a_point_and_empty_is_nan():
    assert metrics.bootstrap_mean_ci([2.0] * 9, 100, seed=1) == pytest.approx((2.0, 2.0))
    assert all(math.isnan(v) for v in metrics.bootstrap_mean_ci([], 100, seed=1))


def test_consistent_direction():
    assert metrics.consistent_direction([2, 1, 3]) == 1
    assert metrics.consistent_direction([-1, -0.5]) == -1
    assert metrics.consistent_direction([2, -1]) == 0
    assert metrics.consistent_direction([0, 0]) == 0
    assert metrics.consistent_direction([1, 0]) == 0


def test_kappa_weights_fixed_or_as_sklearn_weights_the_grades_present():
    from sklearn.metrics import cohen_kappa_score

    # q1 uses grades 0, 2, 3 only (no 1): the two readings differ; q2 uses all four: they agree.
    rows = [
        ("q1", "a", 0, 0),
        ("q1", "b", 2, 0),
        ("q1", "c", 3, 2),
        ("q1", "d", 3, 3),
        ("q1", "e", 0, 2),
        ("q2", "a", 0, 1),
        ("q2", "b", 1, 1),
        ("q2", "c", 2, 3),
        ("q2", "d", 3, 3),
        ("q2", "e", 2, 0),
    ]
    frame = pd.DataFrame(rows, columns=["qid", "docid", "label", "ref"])
    labels, reference = (
        frame[["qid", "docid", "label"]],
        frame[["qid", "docid", "ref"]].rename(columns={"ref": "label"}),
    )
    fixed = metrics.kappa_per_query(labels, reference, "fixed").set_index("qid")["kappa"]
    present = metrics.kappa_per_query(labels, reference, "present").set_index("qid")["kappa"]
    for qid in ("q1", "q2"):
        block = frame[frame["qid"] == qid]
        assert present[qid] == pytest.approx(
            cohen_kappa_score(block["label"], block["ref"], weights="quadratic")
        )
        # fixed: sklearn told the labels are always 0-3
        assert fixed[qid] == pytest.approx(
            cohen_kappa_score(block["label"], block["ref"], weights="quadratic", labels=[0, 1, 2, 3])
        )
    assert fixed["q2"] == pytest.approx(present["q2"])
    assert abs(fixed["q1"] - present["q1"]) > 0.05
    with pytest.raises(StressprobeError, match="analysis.kappa_weights"):
        metrics.kappa_per_query(labels, reference, "sklearn")
