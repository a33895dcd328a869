"""Coverage study: do the nominal 95% intervals cover the population value about 95% of the time?

Binormal model: negatives N(0, 1), positives N(µ, 1), over the range of separations a
monitored model lives in: µ = 1.0, 1.5 and 2.2 (population ROC AUC Φ(µ/√2) ≈ 0.760, 0.856,
0.940); each of the n = 20,000 rows is positive with probability π = 0.01 (Bernoulli, so n_pos
varies from set to set, ≈ 200); decision threshold 1.5. Population values come from numerical
integration along the population curve, independently of the code under test. With S sets a
coverage estimate has a standard error of about √(0.05·0.95/S). The likelihood intervals are
studied at µ = 1.5 for the reference (the drift split's intervals, both parts).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from app.metrics.evaluation import prepare
from app.metrics.intervals import bootstrap_intervals, mean_intervals
from app.metrics.ranking import rank
from app.metrics.split import shapley_parts, split_intervals

MU = 1.5
MUS = (1.0, MU, 2.2)
"""Separations of the bootstrap study: population ROC AUC from 0.76 to 0.94."""
AUC_RANGE = (0.75, 0.95)
PRIOR = 0.01
N = 20_000
THRESHOLD = 1.5
PI0 = 0.5
SETS = 600
"""Sets per separation (1,800 in all)."""
LIKELIHOOD_SETS = 300

STRICT = (0.90, 0.99)
"""Band for smooth metrics: about ±4.5 standard errors of the coverage estimate at 600 sets."""
LOOSE = (0.85, 0.99)
"""Band for non-smooth metrics: best F1 and KS are maxima over thresholds; the bootstrap
describes such statistics less well (``docs/intervals.md``)."""
AUPRG_BAND = (0.80, 0.99)
"""Band for regular AUPRG: at π = 0.01 its curve starts at recall gain 0, i.e. at
TP = π·n_pos ≈ 2 positives, so it hinges on the few top-scored positives; it covers 85-91%
(least for the best separated model, whose AUPRG is nearest its bound 1)."""

SPLIT_BANDS = {"best_f1": LOOSE, "pr_gain_auc": (0.90, 1.0)}
"""Bands of the split's parts other than STRICT: best F1 is a maximum (LOOSE); the AUPRG parts
over-cover (97-99.5%, conservative), as regular AUPRG hinges on the few top-scored positives
at π = 0.01 and its bootstrap spread is wider than its sampling spread."""


def tpr(t: float, mu: float = MU) -> float:
    return float(stats.norm.sf(t - mu))


def fpr(t: float) -> float:
    return float(stats.norm.sf(t))


def precision(t: float, prior: float, mu: float = MU) -> float:
    """Population precision at threshold t with positive ratio ``prior``."""
    return prior * tpr(t, mu) / (prior * tpr(t, mu) + (1 - prior) * fpr(t))


def f1(t: float, prior: float, mu: float = MU) -> float:
    p, r = precision(t, prior, mu), tpr(t, mu)
    return 2 * p * r / (p + r)


def population_average_precision(prior: float, mu: float = MU) -> float:
    """∫ precision d(recall) along the population curve: recall(t) = Φ̄(t - µ), FPR(t) = Φ̄(t),
    precision(t) = π·recall / (π·recall + (1 - π)·FPR), d(recall) = φ(t - µ) dt."""

    def integrand(t: float) -> float:
        return precision(t, prior, mu) * float(stats.norm.pdf(t - mu))

    value, _ = integrate.quad(integrand, -12.0, mu + 12.0, limit=200, epsabs=1e-12)
    return float(value)


def population_roc_auc(mu: float = MU) -> float:
    """∫ TPR d(FPR) = ∫ Φ̄(t - µ)·φ(t) dt: the population AUC, which must equal Φ(µ/√2)."""
    value, _ = integrate.quad(
        lambda t: tpr(t, mu) * float(stats.norm.pdf(t)), -12.0, mu + 12.0, limit=200
    )
    return float(value)


def population_best_f1(prior: float, mu: float = MU) -> float:
    """max over t of the population F1."""
    result = optimize.minimize_scalar(
        lambda t: -f1(t, prior, mu), bounds=(-5.0, mu + 8.0), method="bounded"
    )
    return float(-result.fun)


def population_auprg(c: float, mu: float = MU) -> float:
    """∫ PG d(RG) over RG ≥ 0 with PG = 1 - FPR/TPR (the prior cancels) and
    RG = 1 - (c/(1 - c))·(1 - TPR)/TPR, which is 0 where TPR = c and rises to 1 as t → -∞;
    d(RG)/dt = -(c/(1 - c))·φ(t - µ)/TPR²."""
    t_star = mu + float(stats.norm.isf(c))

    def integrand(t: float) -> float:
        gain = 1 - fpr(t) / tpr(t, mu)
        return gain * c / (1 - c) * float(stats.norm.pdf(t - mu)) / tpr(t, mu) ** 2

    value, _ = integrate.quad(integrand, -12.0, t_star, limit=200)
    return float(value)


def population_values(mu: float = MU) -> dict[str, float]:
    """Every metric with a bootstrap interval, at PRIOR ("name") and at PI0 ("name@0.5")."""
    values = {
        "roc_auc": population_roc_auc(mu),
        "ks": float(2 * stats.norm.cdf(mu / 2) - 1),  # TPR - FPR peaks where φ(t - µ) = φ(t)
        "recall": tpr(THRESHOLD, mu),
        "fpr": fpr(THRESHOLD),
    }
    for prior, suffix in ((PRIOR, ""), (PI0, f"@{PI0}")):
        for name, value in prior_dependent_values(prior, mu).items():
            values[f"{name}{suffix}"] = value
    return values


def prior_dependent_values(prior: float, mu: float) -> dict[str, float]:
    """The metrics split into prior and likelihood parts, at positive ratio ``prior``."""
    return {
        "precision": precision(THRESHOLD, prior, mu),
        "f1": f1(THRESHOLD, prior, mu),
        "average_precision": population_average_precision(prior, mu),
        "best_f1": population_best_f1(prior, mu),
        "pr_gain_auc": population_auprg(prior, mu),
    }


def binormal_set(
    rng: np.random.Generator, prior: float, mu: float = MU
) -> tuple[np.ndarray, np.ndarray]:
    labels = (rng.random(N) < prior).astype(np.int8)
    return rng.normal(size=N) + mu * labels, labels


def covered(interval: list[float] | None, value: float) -> bool:
    assert interval is not None
    return interval[0] <= value <= interval[1]


@pytest.mark.parametrize("mu", MUS)
def test_population_values_are_right(mu: float) -> None:
    auc = population_roc_auc(mu)
    assert auc == pytest.approx(stats.norm.cdf(mu / math.sqrt(2)), abs=1e-9)
    assert AUC_RANGE[0] < auc < AUC_RANGE[1]
    # With π = 1 every threshold has precision 1; with µ = 0 precision is π everywhere.
    assert population_average_precision(1 - 1e-12, mu) == pytest.approx(1.0, abs=1e-9)
    assert population_average_precision(0.3, mu=0.0) == pytest.approx(0.3, abs=1e-9)
    values = population_values(mu)
    t = np.linspace(-5, 8, 200_001)
    assert values["ks"] == pytest.approx(np.max(stats.norm.sf(t - mu) - stats.norm.sf(t)))
    assert values["best_f1"] == pytest.approx(max(f1(x, PRIOR, mu) for x in t[::100]), abs=1e-5)
    # AP by the trapezoid rule in recall along a fine grid of thresholds.
    recall = stats.norm.sf(t - mu)
    fp = stats.norm.sf(t)
    for prior, name in ((PRIOR, "average_precision"), (PI0, f"average_precision@{PI0}")):
        curve = prior * recall / (prior * recall + (1 - prior) * fp)
        assert values[name] == pytest.approx(-np.trapezoid(curve, recall), abs=1e-6), name
    # AUPRG by the trapezoid rule on a fine grid of the population PRG curve (c = π0).
    grid = np.linspace(-8, mu + float(stats.norm.isf(PI0)), 400_001)
    tp, fp = stats.norm.sf(grid - mu), stats.norm.sf(grid)
    gain = 1 - fp / tp
    recall_gain = 1 - PI0 / (1 - PI0) * (1 - tp) / tp
    assert values[f"pr_gain_auc@{PI0}"] == pytest.approx(-np.trapezoid(gain, recall_gain), abs=1e-6)


REQUIRED = ("roc_auc", "average_precision", f"average_precision@{PI0}")
"""The metrics whose coverage the monitoring contract states: 90-99% at every separation."""
BANDS = {"best_f1": LOOSE, f"best_f1@{PI0}": LOOSE, "ks": LOOSE, "pr_gain_auc": AUPRG_BAND}
"""Coverage bands of the metrics not held to STRICT."""


@pytest.mark.slow
@pytest.mark.parametrize("mu", MUS)
def test_bootstrap_intervals_cover_the_population_values(mu: float) -> None:
    truth = population_values(mu)
    assert AUC_RANGE[0] < truth["roc_auc"] < AUC_RANGE[1]
    hits = dict.fromkeys(truth, 0)
    rng = np.random.default_rng([20240601, round(mu * 100)])
    for i in range(SETS):
        scores, labels = binormal_set(rng, PRIOR, mu)
        prepared = prepare(scores, labels, score_kind="score")
        out = bootstrap_intervals(prepared, threshold=THRESHOLD, pi0=[PI0], seed=i)
        intervals = out["regular"] | {
            f"{name}@{PI0}": value for name, value in out["calibrated"][repr(PI0)].items()
        }
        for name, value in truth.items():
            hits[name] += covered(intervals[name], value)
    coverage = {name: count / SETS for name, count in hits.items()}
    print(f"\ncoverage of nominal 95% intervals over {SETS} sets, µ = {mu}:")
    for name, value in coverage.items():
        print(f"  {name:24s} {value:.3f}   population value {truth[name]:.4f}")
    for name, value in coverage.items():
        low, high = BANDS.get(name, STRICT)
        assert low <= value <= high, (name, value)
    for name in REQUIRED:
        assert STRICT[0] <= coverage[name] <= STRICT[1], (name, coverage[name])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("window_mu", "seed"), [(MU, 20240602), (1.2, 20240604)], ids=["prior_shift", "drift"]
)
def test_split_intervals_cover_the_population_parts(window_mu: float, seed: int) -> None:
    """Window π = 0.005, reference π = 0.01 (µ = 1.5). Both parts' population values come from
    the split's formula on population values at both priors under both models: with the
    window's µ = 1.5 (pure prior shift) the likelihood part is 0 for every metric; with
    µ = 1.2 both parts are non-zero."""
    window_prior = PRIOR / 2
    window = prior_dependent_values(window_prior, window_mu)
    window_at_ref = prior_dependent_values(PRIOR, window_mu)
    ref_at_window = prior_dependent_values(window_prior, MU)
    ref = prior_dependent_values(PRIOR, MU)
    truth = {
        name: dict(
            zip(
                ("prior", "likelihood"),
                shapley_parts(window[name], window_at_ref[name], ref_at_window[name], ref[name])[
                    1:
                ],
                strict=True,
            )
        )
        for name in ref
    }
    hits = {(name, part): 0 for name in truth for part in ("prior", "likelihood")}
    rng = np.random.default_rng(seed)
    for i in range(LIKELIHOOD_SETS):
        scores, labels = binormal_set(rng, window_prior, window_mu)
        ref_scores, ref_labels = binormal_set(rng, PRIOR)
        out = split_intervals(
            scores,
            labels,
            rank(scores, labels),
            ref_scores,
            ref_labels,
            rank(ref_scores, ref_labels),
            threshold=THRESHOLD,
            seed=i,
        )
        assert out.keys() == truth.keys()
        for name, part in hits:
            hits[name, part] += covered(out[name][part], truth[name][part])
    coverage = {key: count / LIKELIHOOD_SETS for key, count in hits.items()}
    print(f"\nsplit intervals, window µ = {window_mu}, {LIKELIHOOD_SETS} pairs:")
    for (name, part), value in coverage.items():
        print(f"  {name:18s} {part:10s} {value:.3f}   population part {truth[name][part]:+.4f}")
    for (name, part), value in coverage.items():
        band = SPLIT_BANDS.get(name, STRICT)
        assert band[0] <= value <= band[1], (name, part, value)


@pytest.mark.slow
def test_mean_intervals_cover_the_population_values() -> None:
    """s ~ U(0, 1), y ~ Bernoulli(s): brier = brier_pos = brier_neg = 1/6, log loss = 1/2,
    ks_abc = E[s | y=1] - E[s | y=0] = 2/3 - 1/3 = 1/3, brier_skill = 1 - (1/6)/(1/4) = 1/3."""
    truth = {"brier": 1 / 6, "brier_pos": 1 / 6, "brier_neg": 1 / 6, "log_loss": 0.5}
    truth["ks_abc"] = 1 / 3
    truth["brier_skill"] = 1 / 3
    hits = dict.fromkeys(truth, 0)
    rng = np.random.default_rng(20240603)
    sets = 400
    for _ in range(sets):
        scores = rng.random(2000)
        labels = (rng.random(2000) < scores).astype(np.int8)
        prepared = prepare(scores, labels, score_kind="probability")
        out = mean_intervals(prepared.pos_sorted, prepared.neg_sorted, score_kind="probability")
        for name, value in truth.items():
            hits[name] += covered(out[name], value)
    coverage = {name: count / sets for name, count in hits.items()}
    print(f"\ncoverage of the normal-approximation intervals over {sets} sets: {coverage}")
    for name, value in coverage.items():
        assert 0.90 <= value <= 0.99, (name, value)
