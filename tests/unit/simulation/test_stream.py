"""The synthetic stream: window plan, determinism, and its distribution against the truth."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from scipy import stats

from calmon.metrics import evaluate
from calmon.simulation.population import roc_auc
from calmon.simulation.stream import (
    DEFAULT_PHASES,
    PHASES,
    SCORE_MAP,
    Phase,
    WindowData,
    WindowPlan,
    generate_window,
    phase_bounds,
    plan_windows,
    separation_for_auc,
)
from calmon.timeline import WINDOW_SECONDS

NOW = datetime(2024, 5, 1, 12, 7, 31, 250_000, tzinfo=UTC)


def _plan(phase: str, size: int, index: int = 0) -> WindowPlan:
    start = datetime(2024, 5, 1, 11, 0, tzinfo=UTC)
    return WindowPlan(
        index=index, phase=PHASES[phase], start=start, end=start + timedelta(minutes=5), size=size
    )


def _latent(data: WindowData) -> np.ndarray:
    """Invert the score map: the latent z of every row."""
    logit = np.log(data.scores) - np.log1p(-data.scores)
    out: np.ndarray = (logit - SCORE_MAP.intercept) / SCORE_MAP.slope
    return out


@pytest.mark.parametrize("window", list(WINDOW_SECONDS))
def test_windows_are_aligned_contiguous_and_end_before_now(window: str) -> None:
    phases = [PHASES[name] for name in DEFAULT_PHASES]
    plans = plan_windows(phases=phases, window=window, windows_per_phase=3, per_window=10, now=NOW)
    length = WINDOW_SECONDS[window]
    assert len(plans) == 9
    assert [p.index for p in plans] == list(range(9))
    assert [p.phase.name for p in plans] == [n for n in DEFAULT_PHASES for _ in range(3)]
    for plan in plans:
        assert plan.start.timestamp() % length == 0
        assert (plan.end - plan.start).total_seconds() == length
        assert plan.size == 10
    assert all(a.end == b.start for a, b in itertools.pairwise(plans))
    assert plans[-1].end <= NOW
    # the last window is the last closed one: the next would still be open at NOW
    assert plans[-1].end + timedelta(seconds=length) > NOW
    assert phase_bounds(plans, "prior") == (plans[3].start, plans[5].end)
    assert phase_bounds(plans[:3], "prior") is None


def test_plan_on_a_boundary_ends_there() -> None:
    boundary = datetime(2024, 5, 1, 12, 5, tzinfo=UTC)
    plans = plan_windows(
        phases=[PHASES["stable"]], window="5m", windows_per_phase=2, per_window=1, now=boundary
    )
    assert plans[-1].end == boundary
    assert plans[0].start == boundary - timedelta(minutes=10)


def test_plan_rejects_empty_windows() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan_windows(
            phases=[PHASES["stable"]], window="5m", windows_per_phase=0, per_window=1, now=NOW
        )


def test_window_rows_are_well_formed() -> None:
    plan = _plan("stable", 5_000, index=3)
    data = generate_window(plan, seed=11)
    n = plan.size
    assert len(data.ids) == len(set(data.ids)) == n
    assert data.ids[0] == f"s11-{int(plan.start.timestamp())}-0"
    assert data.timestamps.shape == data.scores.shape == data.labels.shape == (n,)
    start_us = int(plan.start.timestamp()) * 1_000_000
    end_us = int(plan.end.timestamp()) * 1_000_000
    assert np.all(np.diff(data.timestamps) >= 0)
    assert data.timestamps.min() >= start_us
    assert data.timestamps.max() < end_us
    assert np.all((data.scores > 0.0) & (data.scores < 1.0))
    assert set(np.unique(data.labels).tolist()) == {0, 1}
    assert data.n_pos == int(data.labels.sum())


def test_windows_are_a_function_of_seed_and_index() -> None:
    plan = _plan("prior", 2_000, index=5)
    a, b = generate_window(plan, seed=7), generate_window(plan, seed=7)
    assert a.ids == b.ids
    np.testing.assert_array_equal(a.timestamps, b.timestamps)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.labels, b.labels)
    other_seed = generate_window(plan, seed=8)
    other_index = generate_window(_plan("prior", 2_000, index=6), seed=7)
    assert not np.array_equal(a.scores, other_seed.scores)
    assert not np.array_equal(a.scores, other_index.scores)
    assert set(a.ids).isdisjoint(other_seed.ids)


def test_labels_are_not_sorted_by_score_or_time() -> None:
    data = generate_window(_plan("stable", 20_000), seed=3)
    positions = np.flatnonzero(data.labels)
    # positives spread over the whole window, not packed at one end
    assert positions.min() < 1_000
    assert positions.max() > 19_000
    assert abs(stats.spearmanr(np.arange(20_000), data.scores).statistic) < 0.05


@pytest.mark.parametrize("phase", list(PHASES))
def test_empirical_prior_and_auc_match_the_population(phase: str) -> None:
    spec = PHASES[phase]
    n = 200_000
    data = generate_window(_plan(phase, n), seed=21)
    n_pos = data.n_pos
    sd = math.sqrt(n * spec.prior * (1 - spec.prior))
    assert abs(n_pos - n * spec.prior) < 5 * sd
    auc = evaluate(data.scores, data.labels)["regular"]["roc_auc"]
    # both class CDFs are within 1/m of the truth, so AUC is within 1/n_pos + 1/n_neg
    assert abs(auc - roc_auc(spec.separation)) <= 1 / n_pos + 1 / (n - n_pos)


@pytest.mark.parametrize("phase", list(PHASES))
def test_each_class_is_a_stratified_sample_of_its_normal(phase: str) -> None:
    spec = PHASES[phase]
    data = generate_window(_plan(phase, 50_000), seed=5)
    latent = _latent(data)
    for label, mean in ((1, spec.separation), (0, 0.0)):
        z = np.sort(latent[data.labels == label])
        m = z.size
        cdf = stats.norm.cdf(z - mean)
        # the k-th smallest value lies in the k-th slice of probability 1/m
        k = np.arange(m)
        assert np.all(cdf >= k / m - 1e-9)
        assert np.all(cdf <= (k + 1) / m + 1e-9)


def test_prior_shift_keeps_the_class_conditional_scores() -> None:
    stable, shifted = PHASES["stable"], PHASES["prior"]
    assert shifted.separation == stable.separation
    assert stable.prior / shifted.prior >= 3
    a = generate_window(_plan("stable", 100_000), seed=1)
    b = generate_window(_plan("prior", 100_000), seed=2)
    for label in (0, 1):
        sa, sb = a.scores[a.labels == label], b.scores[b.labels == label]
        ks = stats.ks_2samp(sa, sb).statistic
        assert ks <= 1 / sa.size + 1 / sb.size + 1e-12


def test_likelihood_drift_keeps_the_prior_and_lowers_auc() -> None:
    stable, drifted = PHASES["stable"], PHASES["likelihood"]
    assert drifted.prior == stable.prior
    assert roc_auc(stable.separation) == pytest.approx(0.90, abs=1e-12)
    assert roc_auc(drifted.separation) == pytest.approx(0.80, abs=1e-12)


def test_score_map_is_the_stable_posterior() -> None:
    stable = PHASES["stable"]
    z = np.linspace(-4, 6, 41)
    likelihood_ratio = stats.norm.pdf(z - stable.separation) / stats.norm.pdf(z)
    odds = stable.prior / (1 - stable.prior) * likelihood_ratio
    np.testing.assert_allclose(SCORE_MAP.scores(z), odds / (1 + odds), rtol=1e-12)
    for threshold in (0.1, 0.5, 0.9):
        t = SCORE_MAP.latent_threshold(threshold)
        assert SCORE_MAP.scores(np.array([t]))[0] == pytest.approx(threshold, abs=1e-12)
    assert SCORE_MAP.latent_threshold(0.0) == -math.inf
    assert SCORE_MAP.latent_threshold(1.0) == math.inf


def test_separation_for_auc_inverts_roc_auc() -> None:
    for auc in (0.55, 0.7, 0.9, 0.99):
        assert roc_auc(separation_for_auc(auc)) == pytest.approx(auc, abs=1e-12)
    assert isinstance(PHASES["stable"], Phase)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_tiny_windows(size: int) -> None:
    for seed in range(20):
        data = generate_window(_plan("stable", size), seed=seed)
        assert len(data.ids) == data.scores.size == data.labels.size == size
        assert np.all(np.isfinite(data.scores))
