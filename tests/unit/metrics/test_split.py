"""Prior / likelihood / total split of a change and the intervals of its parts
(docs/metrics.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calmon.arrays import FloatArray, IntArray
from calmon.metrics import SPLIT_METRICS, drift_split, evaluate, split_from_arrays
from calmon.metrics import split as split_module
from calmon.metrics.intervals import t_quantile
from calmon.metrics.ranking import rank
from calmon.metrics.resampling import (
    cut_at,
    cut_with_fp,
    draw_replicates,
    evaluate_replicates,
)
from calmon.metrics.split import (
    MIN_AP_PART_POSITIVES,
    PART_INTERVAL_METRICS,
    ap_part_df,
    ap_parts_published,
    evaluate_at_prior,
    part_df,
    shapley_parts,
    split_intervals,
    split_intervals_ranked,
)

Z95 = 1.959963984540054


def _binormal(
    rng: np.random.Generator, n: int, prior: float, mu: float, *, draw_classes: bool = False
) -> tuple[FloatArray, IntArray]:
    """n rows, negatives N(0, 1), positives N(mu, 1); round(prior·n) positives, or a
    Binomial(n, prior) number of them with ``draw_classes``."""
    n_pos = int(rng.binomial(n, prior)) if draw_classes else round(prior * n)
    s = np.concatenate([rng.normal(mu, 1.0, n_pos), rng.normal(0.0, 1.0, n - n_pos)])
    y = np.zeros(n, dtype=np.int64)
    y[:n_pos] = 1
    return s, y


def _tied_set() -> tuple[FloatArray, IntArray]:
    """Small set with ties across classes and a run of negatives straddling τ = 0.5."""
    pos = [0.8, 0.8, 0.6, 0.6, 0.6, 0.4, 0.2, 0.2, 0.95]
    neg = [0.9, 0.8, 0.7, 0.65, 0.6, 0.55, 0.55, 0.5, 0.5, 0.45, 0.4, 0.3, 0.3, 0.2, 0.1, 0.05]
    scores = np.array(pos + neg, dtype=np.float64)
    return scores, np.array([1] * len(pos) + [0] * len(neg), dtype=np.int64)


def test_split_from_evaluate_results() -> None:
    """Both orders averaged: the parts follow the formula term by term, add up to the total
    exactly, and the total is the change of the metric."""
    rng = np.random.default_rng(3)
    ref_s, ref_y = _binormal(rng, 4000, 0.3, 1.5)
    win_s, win_y = _binormal(rng, 3000, 0.1, 1.2)
    ref_prior, win_prior = float(ref_y.mean()), float(win_y.mean())
    reference = evaluate(ref_s, ref_y, score_kind="score", threshold=1.0, pi0=[win_prior])
    window = evaluate(win_s, win_y, score_kind="score", threshold=1.0, pi0=[ref_prior])
    split = drift_split(window, reference)
    at_ref = window["calibrated"][repr(ref_prior)]
    ref_at_window = reference["calibrated"][repr(win_prior)]
    for name in SPLIT_METRICS:
        a, b = window["regular"][name], at_ref[name]
        c, d = ref_at_window[name], reference["regular"][name]
        parts = split[name]
        assert parts["prior"] == 0.5 * ((a - b) + (c - d))
        assert parts["likelihood"] == 0.5 * ((b - d) + (a - c))
        assert parts["total"] == parts["prior"] + parts["likelihood"]
        assert parts["total"] == pytest.approx(a - d, abs=1e-15)
        # The two orders differ (the shifts interact); the split is their mean.
        assert parts["prior"] != a - b, name
    assert split == split_from_arrays(win_s, win_y, ref_s, ref_y, threshold=1.0)


def test_each_set_must_be_calibrated_at_the_other_prior() -> None:
    s, y = np.array([0.1, 0.5, 0.9, 0.3]), np.array([0, 1, 1, 0])
    other = np.array([0, 0, 1, 0])
    with pytest.raises(ValueError, match="window has no calibrated values at the reference"):
        drift_split(evaluate(s, y, pi0=[0.5]), evaluate(s, other, pi0=[0.5]))
    with pytest.raises(ValueError, match="reference has no calibrated values at the window"):
        drift_split(evaluate(s, y, pi0=[0.25]), evaluate(s, other, pi0=[0.25]))


@pytest.mark.parametrize("ref_labels", [[0, 0, 0], [1, 1, 1]])
def test_undefined_prior_gives_none(ref_labels: list[int]) -> None:
    s = np.array([0.1, 0.5, 0.9])
    split = split_from_arrays(
        s, np.array([0, 1, 1]), s, np.array(ref_labels), threshold=0.5, intervals=True
    )
    none = dict.fromkeys(("total", "prior", "likelihood", "prior_interval", "likelihood_interval"))
    for parts in split.values():
        assert parts == none
    # The same with the window's prior undefined: swapping the sets does not matter.
    swapped = split_from_arrays(s, np.array(ref_labels), s, np.array([0, 1, 1]), threshold=0.5)
    for parts in swapped.values():
        assert parts == {"total": None, "prior": None, "likelihood": None}


grid = st.integers(min_value=-12, max_value=12)


@st.composite
def labelled_sets(draw: st.DrawFn) -> tuple[FloatArray, IntArray]:
    n = draw(st.integers(min_value=0, max_value=50))
    k = np.array(draw(st.lists(grid, min_size=n, max_size=n)), dtype=np.float64)
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.int64)
    return k / 7.0, y


@settings(max_examples=150, deadline=None)
@given(window=labelled_sets(), ref=labelled_sets(), tau=grid)
def test_swapping_window_and_reference_negates_the_parts_exactly(
    window: tuple[FloatArray, IntArray], ref: tuple[FloatArray, IntArray], tau: int
) -> None:
    forward = split_from_arrays(*window, *ref, threshold=tau / 7.0)
    backward = split_from_arrays(*ref, *window, threshold=tau / 7.0)
    for name in SPLIT_METRICS:
        there, back = forward[name], backward[name]
        for part in ("total", "prior", "likelihood"):
            if there[part] is None:
                assert back[part] is None, (name, part)
            else:
                assert back[part] == -there[part], (name, part, there, back)
        if there["total"] is not None:
            assert there["prior"] + there["likelihood"] == there["total"]


def test_shapley_parts_on_arrays_equal_those_on_floats() -> None:
    rng = np.random.default_rng(2)
    values = rng.random((4, 50))
    arrays = shapley_parts(*values)
    for i in range(50):
        floats = shapley_parts(*(float(v[i]) for v in values))
        assert floats == tuple(float(part[i]) for part in arrays)


def _split_with_sd(
    window_prior: float, window_mu: float, part: str, seed: int
) -> tuple[dict[str, Any], dict[str, float]]:
    """The split (with intervals) of a 200k-row window against a 200k-row reference (π = 0.2,
    µ = 1.5), and each metric's standard error of ``part`` from its interval's half-width."""
    rng = np.random.default_rng(seed)
    ref_s, ref_y = _binormal(rng, 200_000, 0.2, 1.5)
    win_s, win_y = _binormal(rng, 200_000, window_prior, window_mu, draw_classes=True)
    split = split_from_arrays(win_s, win_y, ref_s, ref_y, threshold=1.0, intervals=True, seed=1)
    sd = {}
    for name in PART_INTERVAL_METRICS:
        lo, hi = split[name][f"{part}_interval"]
        sd[name] = (hi - lo) / (2 * Z95)
    return split, sd


def _assert_only_noise_in(split: dict[str, Any], sd: dict[str, float], part: str) -> None:
    """``part`` of every metric within 3 standard errors of 0, the other part's interval
    excluding 0."""
    other = "prior" if part == "likelihood" else "likelihood"
    for name in PART_INTERVAL_METRICS:
        parts = split[name]
        assert abs(parts[part]) <= 3 * sd[name], (name, parts, sd[name])
        other_lo, other_hi = parts[f"{other}_interval"]
        assert not other_lo <= 0 <= other_hi, (name, parts)


@pytest.mark.slow
def test_pure_prior_shift_has_no_likelihood_part() -> None:
    """Same P(score | y), π 0.2 → 0.05: the likelihood part is 0 in the population, so it
    stays within 3 standard errors of 0, while the prior part is far beyond its noise."""
    _assert_only_noise_in(*_split_with_sd(0.05, 1.5, "likelihood", seed=5), "likelihood")


@pytest.mark.slow
def test_pure_likelihood_drift_has_no_prior_part() -> None:
    """Same π = 0.2, µ 1.5 → 0.8: the prior part is 0 in the population (both orders
    calibrate at the same prior up to the window's sampling noise in π_t)."""
    _assert_only_noise_in(*_split_with_sd(0.2, 0.8, "prior", seed=6), "prior")


def test_intervals_are_attached_ordered_and_contain_the_parts() -> None:
    rng = np.random.default_rng(11)
    ref_s, ref_y = _binormal(rng, 5000, 0.2, 1.5)
    win_s, win_y = _binormal(rng, 5000, 0.05, 1.2)
    split = split_from_arrays(win_s, win_y, ref_s, ref_y, threshold=1.0, intervals=True, seed=4)
    for name in SPLIT_METRICS:
        for part in ("prior", "likelihood"):
            bounds = split[name][f"{part}_interval"]
            if name not in PART_INTERVAL_METRICS:
                assert bounds is None, (name, part)
                continue
            assert bounds is not None, (name, part)
            lo, hi = bounds
            assert lo < split[name][part] < hi, (name, part, bounds)
    again = split_from_arrays(win_s, win_y, ref_s, ref_y, threshold=1.0, intervals=True, seed=4)
    assert again == split


def test_evaluate_at_prior_equals_curve_and_threshold_metrics() -> None:
    """evaluate_at_prior (a π0 per replicate) gives the regular metrics and the calibrated
    ones of curve_metrics / threshold_metrics at a fixed π0."""
    scores, labels = _tied_set()
    ranking = rank(scores, labels)
    reps = draw_replicates(
        ranking, cut_at(scores, labels, ranking, 0.5), size=300, rng=np.random.default_rng(9)
    )
    for p in (0.5, 0.05, 0.9):
        regular, at_prior = evaluate_at_prior(ranking.thresholds, reps, np.full(300, p))
        expected_regular, calibrated = evaluate_replicates(ranking.thresholds, reps, [p])
        for name in SPLIT_METRICS:
            np.testing.assert_allclose(at_prior[name], calibrated[p][name], rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(regular[name], expected_regular[name])
        assert np.isfinite(at_prior["average_precision"]).mean() > 0.9


def test_evaluate_at_prior_of_some_metrics_equals_them_among_all() -> None:
    """Asked for a few metrics (the published parts: precision, F1, AP), evaluate_at_prior
    gives exactly their floats among all of them, and nothing else."""
    scores, labels = _tied_set()
    ranking = rank(scores, labels)
    reps = draw_replicates(
        ranking, cut_at(scores, labels, ranking, 0.5), size=50, rng=np.random.default_rng(3)
    )
    pi0 = np.linspace(0.0, 1.0, 50)
    every = evaluate_at_prior(ranking.thresholds, reps, pi0)
    for metrics in (PART_INTERVAL_METRICS, ("precision", "f1"), ("average_precision", "best_f1")):
        some = evaluate_at_prior(ranking.thresholds, reps, pi0, metrics)
        for values, expected in zip(some, every, strict=True):
            assert set(values) == set(metrics)
            for name in metrics:
                assert np.array_equal(values[name], expected[name], equal_nan=True), name


def test_evaluate_at_prior_marks_impossible_priors_undefined() -> None:
    scores, labels = _tied_set()
    ranking = rank(scores, labels)
    reps = draw_replicates(
        ranking, cut_at(scores, labels, ranking, 0.5), size=4, rng=np.random.default_rng(9)
    )
    regular, values = evaluate_at_prior(
        ranking.thresholds, reps, np.array([0.0, 1.0, math.nan, 0.3])
    )
    for name in SPLIT_METRICS:
        assert np.isnan(values[name][:3]).all()
        assert np.isfinite(values[name][3])
        assert np.isfinite(regular[name]).all()


def test_split_intervals_of_a_set_against_itself_contain_zero() -> None:
    rng = np.random.default_rng(21)
    scores, labels = _binormal(rng, 5000, 0.1, 1.5, draw_classes=True)
    ranking = rank(scores, labels)
    out = split_intervals(scores, labels, ranking, scores, labels, ranking, threshold=1.0, seed=4)
    assert set(out) == set(SPLIT_METRICS)
    for name, parts in out.items():
        for part, interval in parts.items():
            if name not in PART_INTERVAL_METRICS:
                assert interval is None, (name, part)
                continue
            assert interval is not None
            assert interval[0] < 0 < interval[1], (name, part)


def test_split_intervals_from_rankings_equal_those_from_rows() -> None:
    """A reference held only as a ranking and its FP(τ) count gives the same intervals."""
    rng = np.random.default_rng(41)
    scores, labels = _binormal(rng, 5000, 0.02, 1.0, draw_classes=True)
    ref_scores, ref_labels = _binormal(rng, 8000, 0.05, 1.5, draw_classes=True)
    window, ref = rank(scores, labels), rank(ref_scores, ref_labels)
    from_rows = split_intervals(
        scores, labels, window, ref_scores, ref_labels, ref, threshold=1.0, seed=6
    )
    ref_fp = int(np.sum((ref_scores >= 1.0) & (ref_labels == 0)))
    from_rankings = split_intervals_ranked(
        window, cut_at(scores, labels, window, 1.0), ref, cut_with_fp(ref, 1.0, ref_fp), seed=6
    )
    assert from_rankings == from_rows
    for name, parts in from_rows.items():
        published = name in PART_INTERVAL_METRICS
        assert all((i is not None) == published for i in parts.values()), name


def test_split_intervals_see_a_worse_model() -> None:
    rng = np.random.default_rng(31)
    ref_scores, ref_labels = _binormal(rng, 20000, 0.02, 2.0, draw_classes=True)
    # Other prior and a worse model; 500 positives.
    scores, labels = _binormal(rng, 50000, 0.01, 1.0, draw_classes=True)
    out = split_intervals(
        scores,
        labels,
        rank(scores, labels),
        ref_scores,
        ref_labels,
        rank(ref_scores, ref_labels),
        threshold=1.5,
        seed=5,
    )
    for name in PART_INTERVAL_METRICS:
        interval = out[name]["likelihood"]
        assert interval is not None
        assert interval[1] < 0, name


@pytest.mark.parametrize("short", ["window", "reference"])
def test_ap_part_intervals_need_enough_positives_in_both_sets(short: str) -> None:
    """AP's parts publish intervals from MIN_AP_PART_POSITIVES positives in each set, not one
    positive below in either; precision and F1 publish theirs regardless."""
    assert ap_parts_published(MIN_AP_PART_POSITIVES, MIN_AP_PART_POSITIVES)
    assert not ap_parts_published(MIN_AP_PART_POSITIVES - 1, 10 * MIN_AP_PART_POSITIVES)
    assert ap_part_df(150, MIN_AP_PART_POSITIVES) == MIN_AP_PART_POSITIVES - 1
    for n_pos, published in ((MIN_AP_PART_POSITIVES, True), (MIN_AP_PART_POSITIVES - 1, False)):
        rng = np.random.default_rng(n_pos)
        full = _binormal(rng, 1000, 0.2, 1.5)
        few = _binormal(rng, 10 * n_pos, 0.1, 1.0)
        window, reference = (few, full) if short == "window" else (full, few)
        split = split_from_arrays(*window, *reference, threshold=1.0, intervals=True, seed=3)
        for name in PART_INTERVAL_METRICS:
            for part in ("prior_interval", "likelihood_interval"):
                expect = published or name != "average_precision"
                assert (split[name][part] is not None) == expect, (name, part, n_pos)


@pytest.mark.parametrize("rare", ["window", "reference"])
def test_precision_and_f1_parts_use_t_at_rare_priors(
    rare: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below RARE_PRIOR (in either set) the parts of precision and F1 get Student's t at
    ap_part_df degrees of freedom: the same replicates, half-widths wider by t/z; at common
    priors the normal quantile (their intervals there already cover)."""
    rng = np.random.default_rng(31)
    rare_set = _binormal(rng, 10_000, 0.002, 2.0)
    common = _binormal(rng, 200, 0.1, 2.0)
    window, reference = (rare_set, common) if rare == "window" else (common, rare_set)
    window_ranking, ref_ranking = rank(*window), rank(*reference)
    assert part_df("precision", window_ranking, ref_ranking) == 19.0
    assert part_df("f1", window_ranking, ref_ranking) == 19.0
    assert part_df("precision", rank(*common), rank(*common)) is None
    assert part_df("average_precision", rank(*common), rank(*common)) == 19.0
    with_t = split_from_arrays(*window, *reference, threshold=1.0, intervals=True, seed=5)
    monkeypatch.setattr(split_module, "RARE_PRIOR", 0.0)
    with_z = split_from_arrays(*window, *reference, threshold=1.0, intervals=True, seed=5)
    ratio = t_quantile(1.959963984540054, 19.0) / 1.959963984540054
    for name in ("precision", "f1"):
        for part in ("prior_interval", "likelihood_interval"):
            wide, narrow = with_t[name][part], with_z[name][part]
            assert wide is not None
            assert narrow is not None
            assert wide[1] - wide[0] == pytest.approx(ratio * (narrow[1] - narrow[0]), rel=1e-9)
            assert (wide[0] + wide[1]) / 2 == pytest.approx((narrow[0] + narrow[1]) / 2, abs=1e-12)


def test_split_intervals_are_none_without_positives() -> None:
    rng = np.random.default_rng(21)
    scores, labels = _binormal(rng, 5000, 0.1, 1.5)
    negatives = np.zeros_like(labels)
    out = split_intervals(
        scores,
        negatives,
        rank(scores, negatives),
        scores,
        labels,
        rank(scores, labels),
        threshold=1.0,
    )
    assert out == {name: {"prior": None, "likelihood": None} for name in SPLIT_METRICS}


def test_bad_arguments_are_refused() -> None:
    rng = np.random.default_rng(21)
    scores, labels = _binormal(rng, 500, 0.1, 1.5)
    ranking = rank(scores, labels)
    with pytest.raises(ValueError, match="level"):
        split_intervals(scores, labels, ranking, scores, labels, ranking, threshold=1.0, level=1)
    with pytest.raises(ValueError, match="replicates"):
        split_intervals(
            scores, labels, ranking, scores, labels, ranking, threshold=1.0, replicates=1
        )
