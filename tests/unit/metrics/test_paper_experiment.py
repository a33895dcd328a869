"""The paper's §3.2 experiment: calibrated AP does not move with the class ratio.

Binormal scores, positives N(2, 1), negatives N(1.8, 1), N = 10^6 rows, π from 0.5 down to
0.001. Regular AP collapses with π; AP calibrated at π0 = 0.5 stays at the population value.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import integrate, stats

from calmon.metrics import evaluate

MU_POS, MU_NEG, N = 2.0, 1.8, 10**6
PRIORS = (0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)


def population_calibrated_ap(pi0: float) -> float:
    """∫ P_c d(TPR) along the population curve: P_c = 1 / (1 + (1-π0)/π0 · FPR/TPR)."""

    def integrand(t: float) -> float:
        odds = np.exp(stats.norm.logsf(t - MU_NEG) - stats.norm.logsf(t - MU_POS))
        precision = 1.0 / (1.0 + (1.0 - pi0) / pi0 * odds)
        return float(precision * stats.norm.pdf(t - MU_POS))

    value, _ = integrate.quad(integrand, MU_POS - 12.0, MU_POS + 12.0, limit=200)
    return float(value)


def test_population_value_is_the_papers() -> None:
    assert abs(population_calibrated_ap(0.5) - 0.5478) <= 1e-3


def test_calibrated_ap_is_stable_across_priors() -> None:
    population = population_calibrated_ap(0.5)
    rng = np.random.default_rng(20200914)
    regular, calibrated = [], []
    for prior in PRIORS:
        n_pos = round(prior * N)
        scores = np.concatenate(
            [rng.normal(MU_POS, 1.0, n_pos), rng.normal(MU_NEG, 1.0, N - n_pos)]
        )
        labels = np.zeros(N, dtype=np.int8)
        labels[:n_pos] = 1
        got = evaluate(scores, labels, pi0=[0.5], score_kind="score")
        regular.append(got["regular"]["average_precision"])
        calibrated.append(got["calibrated"]["0.5"]["average_precision"])
    assert regular[0] / regular[-1] > 100.0, regular
    assert all(a > b for a, b in itertools.pairwise(regular)), regular
    for prior, value in zip(PRIORS, calibrated, strict=True):
        assert abs(value - population) <= 0.03, (prior, value, population)
