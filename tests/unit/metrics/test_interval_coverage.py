"""Coverage study: do the nominal 95% intervals cover the population value about 95% of the time?

Binormal model: negatives N(0, 1), positives N(µ, 1) with µ = 1.5 (population ROC AUC
Φ(µ/√2) ≈ 0.856); each of the n = 20,000 rows is positive with probability π = 0.01
(Bernoulli, so n_pos varies from set to set, ≈ 200). Population values come from numerical
integration along the population curve, independently of the code under test. Each check
allows 90-99%: with S sets the coverage estimate has a standard error of about √(0.05·0.95/S).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from app.metrics.intervals import bootstrap_intervals, likelihood_intervals, mean_intervals
from app.metrics.ranking import rank

MU = 1.5
PRIOR = 0.01
N = 20_000
THRESHOLD = 1.5
SETS = 1000
LIKELIHOOD_SETS = 500


def population_average_precision(prior: float, mu: float = MU) -> float:
    """∫ precision d(recall) along the population curve: recall(t) = Φ̄(t - µ), FPR(t) = Φ̄(t),
    precision(t) = π·recall / (π·recall + (1 - π)·FPR), d(recall) = φ(t - µ) dt."""

    def integrand(t: float) -> float:
        tpr, fpr = stats.norm.sf(t - mu), stats.norm.sf(t)
        return float(prior * tpr / (prior * tpr + (1 - prior) * fpr) * stats.norm.pdf(t - mu))

    value, _ = integrate.quad(integrand, -12.0, mu + 12.0, limit=200, epsabs=1e-12)
    return float(value)


def population_roc_auc(mu: float = MU) -> float:
    """∫ TPR d(FPR) = ∫ Φ̄(t - µ)·φ(t) dt: the population AUC, which must equal Φ(µ/√2)."""
    value, _ = integrate.quad(
        lambda t: float(stats.norm.sf(t - mu) * stats.norm.pdf(t)), -12.0, mu + 12.0, limit=200
    )
    return float(value)


def binormal_set(rng: np.random.Generator, prior: float) -> tuple[np.ndarray, np.ndarray]:
    labels = (rng.random(N) < prior).astype(np.int8)
    return rng.normal(size=N) + MU * labels, labels


def covered(interval: list[float] | None, value: float) -> bool:
    assert interval is not None
    return interval[0] <= value <= interval[1]


def test_population_values_are_right() -> None:
    assert population_roc_auc() == pytest.approx(stats.norm.cdf(MU / math.sqrt(2)), abs=1e-9)
    # With π = 1 every threshold has precision 1; with µ = 0 precision is π everywhere.
    assert population_average_precision(1 - 1e-12) == pytest.approx(1.0, abs=1e-9)
    assert population_average_precision(0.3, mu=0.0) == pytest.approx(0.3, abs=1e-9)


@pytest.mark.slow
def test_bootstrap_intervals_cover_the_population_values() -> None:
    truth = {
        "roc_auc": float(stats.norm.cdf(MU / math.sqrt(2))),
        "average_precision": population_average_precision(PRIOR),
        "average_precision@0.5": population_average_precision(0.5),
    }
    hits = dict.fromkeys(truth, 0)
    rng = np.random.default_rng(20240601)
    for i in range(SETS):
        scores, labels = binormal_set(rng, PRIOR)
        out = bootstrap_intervals(
            scores, labels, rank(scores, labels), threshold=THRESHOLD, pi0=[0.5], seed=i
        )
        hits["roc_auc"] += covered(out["regular"]["roc_auc"], truth["roc_auc"])
        hits["average_precision"] += covered(
            out["regular"]["average_precision"], truth["average_precision"]
        )
        hits["average_precision@0.5"] += covered(
            out["calibrated"]["0.5"]["average_precision"], truth["average_precision@0.5"]
        )
    coverage = {name: count / SETS for name, count in hits.items()}
    print(f"\ncoverage of nominal 95% intervals over {SETS} sets: {coverage}; truth {truth}")
    for name, value in coverage.items():
        assert 0.90 <= value <= 0.99, (name, value)


@pytest.mark.slow
def test_likelihood_interval_covers_zero_under_pure_prior_shift() -> None:
    """Window π = 0.005, reference π = 0.01, same P(s | y): the likelihood part is 0."""
    hits: dict[str, int] = {}
    rng = np.random.default_rng(20240602)
    for i in range(LIKELIHOOD_SETS):
        scores, labels = binormal_set(rng, PRIOR / 2)
        ref_scores, ref_labels = binormal_set(rng, PRIOR)
        out = likelihood_intervals(
            scores,
            labels,
            rank(scores, labels),
            ref_scores,
            ref_labels,
            rank(ref_scores, ref_labels),
            threshold=THRESHOLD,
            seed=i,
        )
        for name, interval in out.items():
            hits[name] = hits.get(name, 0) + covered(interval, 0.0)
    coverage = {name: count / LIKELIHOOD_SETS for name, count in hits.items()}
    print(f"\ncoverage of 0 by the likelihood intervals over {LIKELIHOOD_SETS} pairs: {coverage}")
    assert len(coverage) == 5
    for name, value in coverage.items():
        assert 0.90 <= value <= 0.99, (name, value)


@pytest.mark.slow
def test_mean_intervals_cover_the_population_values() -> None:
    """s ~ U(0, 1), y ~ Bernoulli(s): brier = brier_pos = brier_neg = 1/6, log loss = 1/2,
    ks_abc = E[s | y=1] - E[s | y=0] = 2/3 - 1/3 = 1/3."""
    truth = {"brier": 1 / 6, "brier_pos": 1 / 6, "brier_neg": 1 / 6, "log_loss": 0.5}
    truth["ks_abc"] = 1 / 3
    hits = dict.fromkeys(truth, 0)
    rng = np.random.default_rng(20240603)
    sets = 400
    for _ in range(sets):
        scores = rng.random(2000)
        labels = (rng.random(2000) < scores).astype(np.int8)
        out = mean_intervals(scores, labels, score_kind="probability")
        for name, value in truth.items():
            hits[name] += covered(out[name], value)
    coverage = {name: count / sets for name, count in hits.items()}
    print(f"\ncoverage of the normal-approximation intervals over {sets} sets: {coverage}")
    for name, value in coverage.items():
        assert 0.90 <= value <= 0.99, (name, value)
