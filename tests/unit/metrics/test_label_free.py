"""Label-free estimates (:mod:`calmon.metrics.label_free`) against a labelled truth.

Streams are binormal scores passed through a logistic (probabilities that are not calibrated
at any prior), rounded to 4 decimals so that ties occur; a label shift changes only π, a
likelihood drift moves the positives' scores.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from calmon.arrays import BoolArray, FloatArray
from calmon.catalogue import ESTIMATED_CALIBRATED, ESTIMATED_REGULAR
from calmon.metrics.evaluation import evaluate
from calmon.metrics.label_free import (
    CHECK_BINS_PER_CLASS,
    LabelShiftReference,
    adjusted_probabilities,
    assess_window,
    bbse_prior,
    estimate_prior,
    estimate_window,
    expected_metrics,
    harmonic_gap,
    label_shift_check,
    label_shift_reference,
    metrics_of_levels,
    metrics_of_runs,
    pav,
    prior_from_counts,
    solve_shares,
)
from calmon.metrics.ranking import rank
from calmon.verdict import CHECK_LEVEL


def draw(
    rng: np.random.Generator, n: int, pi: float, *, separation: float = 1.5
) -> tuple[FloatArray, BoolArray]:
    y = rng.random(n) < pi
    s = np.where(y, rng.normal(separation, 1.0, n), rng.normal(0.0, 1.0, n))
    return np.round(1.0 / (1.0 + np.exp(-(s - 2.0))), 4), y


def reference_of(rng: np.random.Generator, n: int = 50_000) -> LabelShiftReference:
    scores, labels = draw(rng, n, 0.1)
    fitted = label_shift_reference(rank(scores, labels))
    assert fitted is not None
    return fitted


def brute_isotonic(values: FloatArray, weights: FloatArray) -> FloatArray:
    """Isotonic fit by the minimum-maximum formula: fit_i = max_{j≤i} min_{k≥i} mean(j..k)."""
    n = values.size
    fit = np.empty(n)
    for i in range(n):
        fit[i] = max(
            min(np.average(values[j : k + 1], weights=weights[j : k + 1]) for k in range(i, n))
            for j in range(i + 1)
        )
    return fit


def test_pav_matches_the_min_max_formula() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(1, 12))
        values = rng.integers(0, 4, n).astype(float)
        weights = rng.integers(1, 5, n).astype(float)
        level = pav(values, weights)
        means = np.bincount(level, values * weights) / np.bincount(level, weights)
        np.testing.assert_allclose(means[level], brute_isotonic(values, weights))
        assert np.all(np.diff(means) > 0)


def test_reference_levels_are_isotonic_and_cover_every_row() -> None:
    rng = np.random.default_rng(4)
    scores, labels = draw(rng, 5_000, 0.2)
    reference = label_shift_reference(rank(scores, labels))
    assert reference is not None
    assert np.all(np.diff(reference.fraction) > 0)
    assert reference.pos.sum() == labels.sum()
    assert reference.neg.sum() == labels.size - labels.sum()
    levels = reference.levels(scores)
    np.testing.assert_array_equal(np.bincount(levels, weights=labels), reference.pos)
    np.testing.assert_array_equal(np.bincount(levels, weights=~labels), reference.neg)
    assert reference.prior == pytest.approx(labels.mean())


def test_no_reference_without_both_classes() -> None:
    scores = np.array([0.1, 0.4, 0.8])
    assert label_shift_reference(rank(scores, np.zeros(3, dtype=bool))) is None
    assert label_shift_reference(rank(scores, np.ones(3, dtype=bool))) is None
    reference = label_shift_reference(rank(scores, np.array([False, True, True])))
    assert estimate_window(reference, np.empty(0), threshold=0.5, pi0=[0.5]) is None
    assert estimate_window(None, scores, threshold=0.5, pi0=[0.5]) is None


@pytest.mark.parametrize("pi", [0.01, 0.05, 0.2])
def test_prior_under_label_shift(pi: float) -> None:
    rng = np.random.default_rng(5)
    reference = reference_of(rng, 100_000)
    scores, labels = draw(rng, 100_000, pi)
    estimate = estimate_prior(reference, scores, seed=1)
    assert estimate is not None
    assert estimate.n == scores.size
    half_width = (estimate.upper - estimate.lower) / 2
    # within 3 bootstrap standard deviations (the coverage test measures the interval)
    assert abs(estimate.ratio - labels.mean()) < 1.5 * half_width
    assert half_width < 0.4 * pi + 0.002


def test_em_beats_bbse_under_label_shift() -> None:
    """Over repeated windows the EM estimate's error is well below BBSE's (which uses one bit
    per row, the side of the threshold)."""
    rng = np.random.default_rng(6)
    em_errors, bbse_errors = [], []
    for _ in range(40):
        ref_scores, ref_labels = draw(rng, 20_000, 0.1)
        reference = label_shift_reference(rank(ref_scores, ref_labels))
        assert reference is not None
        scores, _ = draw(rng, 20_000, 0.03)
        estimate = estimate_prior(reference, scores, replicates=2, seed=0)
        assert estimate is not None
        em_errors.append(estimate.ratio - 0.03)
        bbse_errors.append(bbse_prior(ref_scores, ref_labels, scores, threshold=0.5) - 0.03)
    em_rmse = float(np.sqrt(np.mean(np.square(em_errors))))
    bbse_rmse = float(np.sqrt(np.mean(np.square(bbse_errors))))
    assert em_rmse < 0.9 * bbse_rmse


def test_estimated_metrics_close_to_measured_under_label_shift() -> None:
    rng = np.random.default_rng(8)
    reference = reference_of(rng, 100_000)
    for pi in (0.05, 0.2):
        scores, labels = draw(rng, 200_000, pi)
        estimated = estimate_window(reference, np.sort(scores), threshold=0.5, pi0=[0.1], seed=2)
        assert estimated is not None
        measured = evaluate(scores, labels, threshold=0.5, pi0=[0.1])
        assert estimated["method"] == "saerens_em_isotonic"
        for name in ESTIMATED_REGULAR:
            assert estimated["regular"][name] == pytest.approx(
                measured["regular"][name], abs=0.03
            ), name
        for name in ESTIMATED_CALIBRATED:
            assert estimated["calibrated"]["0.1"][name] == pytest.approx(
                measured["calibrated"]["0.1"][name], abs=0.03
            ), name


def test_expected_metrics_of_hard_labels_are_the_measured_ones() -> None:
    """With p' equal to the labels the expected counts are the counts: the same numbers as
    :func:`evaluate`."""
    rng = np.random.default_rng(9)
    scores, labels = draw(rng, 3_000, 0.3)
    expected = expected_metrics(scores, labels.astype(float), threshold=0.5, pi0=[0.2])
    measured = evaluate(scores, labels, threshold=0.5, pi0=[0.2])
    for name in ESTIMATED_REGULAR:
        assert expected["regular"][name] == pytest.approx(measured["regular"][name], rel=1e-12)
    for name in ESTIMATED_CALIBRATED:
        assert expected["calibrated"]["0.2"][name] == pytest.approx(
            measured["calibrated"]["0.2"][name], rel=1e-12
        )


def test_calibrated_estimates_do_not_follow_the_prior() -> None:
    """Windows at π = 0.02 and 0.3: the estimated precision follows π, the calibrated estimates
    stay at the reference's (the expected TPR and FPR are the reference's whatever π̂)."""
    rng = np.random.default_rng(10)
    ref_scores, ref_labels = draw(rng, 100_000, 0.1)
    reference = label_shift_reference(rank(ref_scores, ref_labels))
    measured = evaluate(ref_scores, ref_labels, threshold=0.5, pi0=[0.1])
    results = []
    for pi in (0.02, 0.3):
        scores, _ = draw(rng, 100_000, pi)
        estimated = estimate_window(reference, np.sort(scores), threshold=0.5, pi0=[0.1], seed=4)
        assert estimated is not None
        results.append(estimated)
    assert results[1]["regular"]["precision"] - results[0]["regular"]["precision"] > 0.5
    for name in ESTIMATED_CALIBRATED:
        for estimated in results:
            assert estimated["calibrated"]["0.1"][name] == pytest.approx(
                measured["calibrated"]["0.1"][name], abs=0.02
            ), name


def test_likelihood_drift_is_not_detected() -> None:
    """The positives' scores fall (the model got worse) at an unchanged π: the measured ROC
    AUC drops, while the estimate reports the reference's ranking quality and a wrong, lower
    π̂. Only labels show this drift."""
    rng = np.random.default_rng(11)
    reference = reference_of(rng, 100_000)
    scores, labels = draw(rng, 100_000, 0.1, separation=0.75)
    estimated = estimate_window(reference, np.sort(scores), threshold=0.5, pi0=[0.1], seed=3)
    assert estimated is not None
    measured = evaluate(scores, labels, threshold=0.5, pi0=[0.1])
    assert measured["regular"]["roc_auc"] < 0.72
    assert estimated["regular"]["roc_auc"] > 0.8
    assert estimated["positive_class_ratio_interval"][1] < 0.1
    # the estimate is wrong, and its label-shift check says so
    assert estimated["label_shift"]["holds"] is False
    assert estimated["verdict"] == "scores_changed"


def test_check_bins_hold_rows_and_follow_both_classes() -> None:
    rng = np.random.default_rng(4)
    reference = reference_of(rng)
    assert reference.bin_pos.size <= 2 * CHECK_BINS_PER_CLASS
    assert np.all(reference.bin_pos + reference.bin_neg > 0)
    assert np.all(np.diff(reference.group_bin) >= 0)
    # each class's share per bin is at most about 1/Q plus one tied block
    assert reference.bin_pos.max() / reference.bin_pos.sum() < 2.0 / CHECK_BINS_PER_CLASS
    assert reference.bin_neg.max() / reference.bin_neg.sum() < 2.0 / CHECK_BINS_PER_CLASS
    # bin bounds in a sorted array agree with a search per score
    scores = np.sort(draw(rng, 5_000, 0.3)[0])
    groups = np.searchsorted(reference.ascending, scores, "left") + np.searchsorted(
        reference.ascending, scores, "right"
    )
    expected = np.bincount(reference.group_bin[groups], minlength=reference.bin_pos.size)
    assert np.diff(reference.bin_bounds(scores)).tolist() == expected.tolist()


def test_the_check_holds_under_label_shift_and_rejects_a_change_of_the_negatives() -> None:
    rng = np.random.default_rng(5)
    reference = reference_of(rng)
    held = []
    for pi in (0.01, 0.1, 0.3):
        for _ in range(5):
            scores = np.sort(draw(rng, 20_000, pi)[0])
            check = label_shift_check(
                reference, np.diff(reference.bin_bounds(scores)).astype(np.float64), seed=1
            )
            assert check.p_value is not None
            held.append(check.holds)
    assert held.count(True) >= 14
    # the negatives' scores rise by half a standard deviation: no mixture explains it
    y = rng.random(20_000) < 0.02
    z = np.where(y, rng.normal(1.5, 1.0, y.size), rng.normal(0.5, 1.0, y.size))
    scores = np.sort(np.round(1.0 / (1.0 + np.exp(-(z - 2.0))), 4))
    check = label_shift_check(
        reference, np.diff(reference.bin_bounds(scores)).astype(np.float64), seed=1
    )
    assert check.holds is False
    assert check.p_value is not None
    assert check.p_value < CHECK_LEVEL


def test_a_tiny_window_gets_no_check_and_a_boundary_estimate_a_real_interval() -> None:
    rng = np.random.default_rng(6)
    reference = reference_of(rng)
    tiny = np.array([0.01, 0.02, 0.02, 0.03])
    estimated = estimate_window(reference, tiny, threshold=0.5, pi0=[0.1], seed=1)
    assert estimated is not None
    assert estimated["label_shift"] == {
        "p_value": None,
        "holds": None,
        "method": "cvm_pearson_mixture_bootstrap",
    }
    assert estimated["verdict"] == "not_enough_data"
    assert estimated["positive_class_ratio"] == 0.0
    lower, upper = estimated["positive_class_ratio_interval"]
    assert lower == 0.0
    assert upper > 0.05
    # a large window far below the positives: π̂ = 0 with a one-sided bound above 0
    low = np.sort(np.full(10_000, 0.01))
    found = assess_window(reference, low, seed=1)
    assert found is not None
    assert found[0].ratio == 0.0
    assert 0.0 < found[0].upper < 0.01


@pytest.mark.slow
def test_prior_interval_coverage() -> None:
    """Coverage of the 95% interval of π̂ under pure label shift (reference of 2·10^4 rows at
    π_ref = 0.1, drawn anew each time): the table of ``docs/measurements/label-free.md``."""
    rng = np.random.default_rng(7)
    repetitions = 100
    hits = 0
    cells = 0
    for pi in (0.01, 0.05, 0.2):
        for n in (10_000, 100_000):
            covered = 0
            for r in range(repetitions):
                reference = reference_of(rng, 20_000)
                scores, _ = draw(rng, n, pi)
                estimate = estimate_prior(reference, scores, seed=r)
                assert estimate is not None
                covered += estimate.lower <= pi <= estimate.upper
            assert covered >= 0.86 * repetitions, (pi, n, covered)
            hits += covered
            cells += repetitions
    assert hits >= 0.9 * cells


@pytest.mark.parametrize("decimals", [2, 4, None])
def test_level_bounds_path_equals_a_search_per_distinct_score(decimals: int | None) -> None:
    """The window estimate locates level bounds in the sorted scores; they must be exactly
    what searching every distinct score gives, and its metrics (per level) those of the
    per-score formula up to rounding (tied scores, continuous scores, and window scores equal
    to the reference's positive scores)."""
    rng = np.random.default_rng(11)
    ref_scores, ref_labels = draw(rng, 20_000, 0.1)
    scores, _ = draw(rng, 8_000, 0.2)
    if decimals is None:
        ref_scores = 1.0 / (1.0 + np.exp(-rng.normal(0.0, 1.5, ref_scores.size) - ref_labels))
        scores = 1.0 / (1.0 + np.exp(-rng.normal(0.0, 1.5, scores.size)))
    else:
        ref_scores, scores = np.round(ref_scores, decimals), np.round(scores, decimals)
    scores = np.sort(np.concatenate((scores, ref_scores[ref_labels][:300])))
    reference = label_shift_reference(rank(ref_scores, ref_labels))
    assert reference is not None
    levels = np.arange(reference.pos.size)
    bounds = reference.level_bounds(scores)
    np.testing.assert_array_equal(np.repeat(levels, np.diff(bounds)), reference.levels(scores))

    fast = estimate_window(reference, scores, threshold=0.3, pi0=[0.1, 0.5], seed=5)
    assert fast is not None
    ascending, run_sizes = np.unique(scores, return_counts=True)
    run_levels = reference.levels(ascending)
    groups = np.searchsorted(reference.ascending, ascending, side="left") + np.searchsorted(
        reference.ascending, ascending, side="right"
    )
    run_cells = reference.fit.group_cell[groups]
    cells = int(reference.fit.group_cell[-1]) + 1
    counts = np.bincount(run_cells, weights=run_sizes, minlength=cells).astype(float)
    np.testing.assert_array_equal(counts, np.diff(reference.cell_bounds(scores)))
    prior = prior_from_counts(reference, counts, seed=5)
    assert prior is not None
    pos_runs = adjusted_probabilities(reference, prior.ratio)[run_levels] * run_sizes
    slow = metrics_of_runs(ascending, run_sizes, pos_runs, threshold=0.3, pi0=[0.1, 0.5])
    assert fast["positive_class_ratio"] == prior.ratio
    assert fast["positive_class_ratio_interval"] == [prior.lower, prior.upper]
    assert_same_metrics(fast, slow)


def draw_beta(
    rng: np.random.Generator, n: int, pi: float, *, risen: float = 0.0
) -> tuple[FloatArray, BoolArray]:
    """Beta(5, 2) positives, Beta(2, 5) negatives; a share ``risen`` of the negatives with
    their logit raised by 3 (a covariate shift reaching few negatives)."""
    y = rng.random(n) < pi
    s = np.where(y, rng.beta(5.0, 2.0, n), rng.beta(2.0, 5.0, n))
    up = ~y & (rng.random(n) < risen)
    s[up] = 1.0 / (1.0 + (1.0 - s[up]) / s[up] * np.exp(-3.0))
    return s, y


def test_prior_at_a_rare_prior_is_not_biased_by_its_own_reference() -> None:
    """π = 0.002 (40 positives a window) against references of 20,000 rows at 0.1: levels
    fitted and counted on the same rows made π̂ 12% too high on average here (a level the
    reference happens to see without negatives counts a window's negatives there as
    positives); cross-fitted, the mean relative error stays within sampling noise."""
    rng = np.random.default_rng(21)
    errors = []
    for _ in range(6):
        ref_scores, ref_labels = draw_beta(rng, 20_000, 0.1)
        reference = label_shift_reference(rank(ref_scores, ref_labels))
        assert reference is not None
        for _ in range(10):
            scores, labels = draw_beta(rng, 20_000, 0.002)
            estimate = estimate_prior(reference, scores, replicates=2, seed=0)
            assert estimate is not None
            errors.append(estimate.ratio / labels.mean() - 1.0)
    assert abs(float(np.mean(errors))) < 0.08


def test_the_check_sees_a_few_negatives_rising_at_a_rare_prior() -> None:
    """1% of the negatives rise into the positives' range at π = 0.005: π̂ is about 4 times
    the truth, and the check flags the window: the upper-tail statistic sees that the top
    bins hold fewer rows than the inflated mixture predicts (Cramér-von Mises alone flagged
    about 1 window in 5). Pure label shift at the same prior is not flagged."""
    rng = np.random.default_rng(22)
    ref_scores, ref_labels = draw_beta(rng, 50_000, 0.1)
    reference = label_shift_reference(rank(ref_scores, ref_labels))
    assert reference is not None
    flagged, held = 0, 0
    for window in range(8):
        for risen, tally in ((0.01, True), (0.0, False)):
            scores, labels = draw_beta(rng, 20_000, 0.005, risen=risen)
            found = assess_window(reference, np.sort(scores), seed=window)
            assert found is not None
            estimate, check = found
            if tally:
                assert estimate.ratio > 2.0 * labels.mean()
                flagged += check.holds is False
            else:
                held += check.holds is True
    assert flagged >= 6
    assert held == 8


def test_below_zero_the_root_is_the_tangent_at_zero() -> None:
    """A window with fewer rows in the top level than the negatives alone predict: the
    equation is negative at 0, so π̂ = 0, and with ``below`` the root of its tangent at 0,
    Σ d_j(0)(m_j - n b_j) / Σ d_j(0) n (a_j - b_j), d_j(0) = (a'_j - b'_j) / b'_j."""
    a = np.array([0.2, 0.3, 0.5])
    b = np.array([0.6, 0.3, 0.1])
    counts = np.array([650.0, 300.0, 50.0])
    n = counts.sum()
    d = (a - b) / b
    tangent = float((d * (counts - n * b)).sum() / (d * n * (a - b)).sum())
    assert tangent < 0.0
    assert float(solve_shares(counts, a, b)) == 0.0
    assert float(solve_shares(counts, a, b, below=True)) == pytest.approx(tangent, rel=1e-12)
    # an interior root is the same either way
    inside = np.array([500.0, 300.0, 200.0])
    assert float(solve_shares(inside, a, b, below=True)) == float(solve_shares(inside, a, b))


def test_an_interval_reaching_zero_says_the_ratio_is_not_resolved() -> None:
    """At π = 0.002 (about 40 positives in 20,000 rows) π̂'s spread is of the order of π: its
    interval reaches 0, and the record says the value is not resolved; at π = 0.1 it is."""
    rng = np.random.default_rng(23)
    reference = reference_of(rng, 20_000)
    resolved = []
    for pi in (0.002, 0.1):
        scores, _ = draw(rng, 20_000, pi)
        estimated = estimate_window(reference, np.sort(scores), threshold=0.5, pi0=[0.1], seed=1)
        assert estimated is not None
        lower = estimated["positive_class_ratio_interval"][0]
        assert estimated["positive_class_ratio_resolved"] is (lower > 0.0)
        resolved.append(estimated["positive_class_ratio_resolved"])
    assert resolved == [False, True]


def assert_same_metrics(fast: dict[str, Any], slow: dict[str, Any], *, rtol: float = 1e-12) -> None:
    """Every estimated metric of ``fast`` within ``rtol`` (relative) of ``slow``'s, NaN alike."""
    pairs = [(fast["regular"], slow["regular"])] + [
        (fast["calibrated"][key], slow["calibrated"][key]) for key in slow["calibrated"]
    ]
    assert fast["calibrated"].keys() == slow["calibrated"].keys()
    for got, want in pairs:
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=0.0, err_msg=name)


def per_score_metrics(
    reference: LabelShiftReference, scores: FloatArray, ratio: float, pi0: list[float]
) -> dict[str, Any]:
    """The estimated metrics of sorted ``scores`` at π̂ = ``ratio`` by the per-score formula:
    one block per distinct score (:func:`metrics_of_runs`)."""
    ascending, run_sizes = np.unique(scores, return_counts=True)
    pos_runs = adjusted_probabilities(reference, ratio)[reference.levels(ascending)] * run_sizes
    return metrics_of_runs(ascending, run_sizes, pos_runs, threshold=0.3, pi0=pi0)


@pytest.mark.parametrize(
    ("decimals", "pi", "ratio"),
    [(None, 0.2, 0.2), (None, 0.01, 0.003), (4, 0.2, 0.25), (2, 0.05, 0.05), (1, 0.5, 0.9)],
)
def test_metrics_per_level_are_the_per_score_ones(
    decimals: int | None, pi: float, ratio: float
) -> None:
    """ROC AUC and AP per isotonic level (closed forms within a level, tied runs on their
    own) equal the per-score formula to 1e-12 relative: continuous scores, scores with a few
    ties, and coarse ones where most rows are tied (decimals 1: a handful of distinct scores,
    levels starting with a tie), at priors from rare to most rows positive."""
    rng = np.random.default_rng(17)
    ref_scores, ref_labels = draw(rng, 20_000, 0.1)
    scores, _ = draw(rng, 30_000, pi)
    if decimals is not None:
        ref_scores, scores = np.round(ref_scores, decimals), np.round(scores, decimals)
    scores = np.sort(scores)
    reference = label_shift_reference(rank(ref_scores, ref_labels))
    assert reference is not None
    pi0 = [0.01, 0.1, 0.5]
    fast = metrics_of_levels(
        scores,
        reference.level_bounds(scores),
        adjusted_probabilities(reference, ratio),
        threshold=0.3,
        pi0=pi0,
    )
    assert_same_metrics(fast, per_score_metrics(reference, scores, ratio, pi0))
    if decimals == 1:
        assert np.unique(scores).size < 100


def test_metrics_per_level_of_a_large_window_are_the_per_score_ones_in_extended_precision() -> None:
    """At 10^6 continuous scores the per-score formula's own rounding, a cumulative sum over
    every distinct score, reaches several 1e-12: the per-level values are held to 1e-12 of
    the same per-score formula summed in extended precision (np.longdouble)."""
    rng = np.random.default_rng(23)
    ref_scores, ref_labels = draw(rng, 40_000, 0.1)
    scores, _ = draw(rng, 1_000_000, 0.2)
    scores = np.sort(scores)
    reference = label_shift_reference(rank(ref_scores, ref_labels))
    assert reference is not None
    adjusted = adjusted_probabilities(reference, 0.2)
    fast = metrics_of_levels(
        scores, reference.level_bounds(scores), adjusted, threshold=0.3, pi0=[0.1]
    )
    ascending, run_sizes = np.unique(scores, return_counts=True)
    pos = (adjusted[reference.levels(ascending)] * run_sizes)[::-1].astype(np.longdouble)
    neg = run_sizes[::-1].astype(np.longdouble) - pos
    tp, fp = np.cumsum(pos), np.cumsum(neg)
    n_pos, n_neg = tp[-1], fp[-1]
    auc = 1 - ((pos * fp).sum() - (pos * neg).sum() / 2) / (n_pos * n_neg)
    ratio = n_pos / n_neg * (1 - np.longdouble(0.1)) / np.longdouble(0.1)
    for got, r in (
        (fast["regular"]["average_precision"], 1),
        (fast["calibrated"]["0.1"]["average_precision"], ratio),
    ):
        ap = (pos * tp / (tp + r * fp)).sum() / n_pos
        assert abs(got - float(ap)) <= 1e-12 * float(ap)
    assert abs(fast["regular"]["roc_auc"] - float(auc)) <= 1e-12 * float(auc)


@pytest.mark.parametrize("start", [1e-3, 0.5, 1.0, 7.25, 15.9, 16.0, 250.0, 3e6])
def test_harmonic_gap_is_the_sum_it_stands_for(start: float) -> None:
    """ψ(x + m) - ψ(x) against Σ 1/(x + t) summed term by term (each term rounded once, the
    sum exactly rounded by math.fsum), m from 0 to 5000."""
    counts = np.array([0, 1, 2, 3, 17, 400, 5000], dtype=np.float64)
    got = harmonic_gap(np.full(counts.size, start), counts)
    for m, value in zip(counts.astype(int), got, strict=True):
        summed = math.fsum(1.0 / (start + t) for t in range(m))
        assert abs(value - summed) <= 1e-15 * summed, (m, value, summed)
