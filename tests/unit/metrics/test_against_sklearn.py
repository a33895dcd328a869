"""Random sets with heavy ties against scikit-learn, SciPy and the literal reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy.stats import ks_2samp
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    average_precision_score,
    brier_score_loss,
    log_loss,
    precision_recall_curve,
    precision_recall_fscore_support,
    roc_auc_score,
)

from calmon.metrics import evaluate
from tests.unit.metrics import reference

TOL = 1e-12
CASES = [(seed, decimals) for seed in range(6) for decimals in (1, 2)]


def _random_set(
    seed: int, decimals: int, n: int = 3000
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Scores of a noisy binormal model squashed to [0, 1], rounded (heavy ties)."""
    rng = np.random.default_rng(seed)
    prior = (0.05, 0.2, 0.5)[seed % 3]
    y = (rng.random(n) < prior).astype(np.int64)
    raw = rng.normal(loc=1.2 * y, scale=1.0)
    s = np.round(1.0 / (1.0 + np.exp(-raw)), decimals)
    return s, y


@pytest.fixture(params=CASES, ids=[f"seed{s}-dec{d}" for s, d in CASES])
def case(request: pytest.FixtureRequest) -> tuple[Any, Any, dict[str, Any]]:
    seed, decimals = request.param
    s, y = _random_set(seed, decimals)
    return s, y, evaluate(s, y, threshold=0.5, pi0=[0.5, 0.1, 0.01])


def test_ranking_metrics(case: tuple[Any, Any, dict[str, Any]]) -> None:
    s, y, got = case
    reg = got["regular"]
    assert reg["roc_auc"] == pytest.approx(roc_auc_score(y, s), abs=TOL)
    assert reg["average_precision"] == pytest.approx(average_precision_score(y, s), abs=TOL)
    ks = ks_2samp(s[y == 0], s[y == 1], alternative="greater", method="asymp").statistic
    assert reg["ks"] == pytest.approx(ks, abs=TOL)
    assert reg["ks_abc"] == pytest.approx(s[y == 1].mean() - s[y == 0].mean(), abs=TOL)


def test_best_f1(case: tuple[Any, Any, dict[str, Any]]) -> None:
    s, y, got = case
    precision, recall, thresholds = precision_recall_curve(y, s)
    with np.errstate(invalid="ignore"):
        f1 = 2 * precision * recall / (precision + recall)
    f1 = np.nan_to_num(f1[:-1])
    best = f1.max()
    assert got["regular"]["best_f1"] == pytest.approx(best, abs=TOL)
    assert got["regular"]["best_f1_threshold"] == thresholds[f1 >= best - TOL].max()


def test_threshold_metrics(case: tuple[Any, Any, dict[str, Any]]) -> None:
    s, y, got = case
    p, r, f, _ = precision_recall_fscore_support(y, (s >= 0.5).astype(int), average="binary")
    reg = got["regular"]
    assert reg["precision"] == pytest.approx(p, abs=TOL)
    assert reg["recall"] == pytest.approx(r, abs=TOL)
    assert reg["f1"] == pytest.approx(f, abs=TOL)
    negatives = s[y == 0]
    assert reg["fpr"] == pytest.approx(np.mean(negatives >= 0.5), abs=TOL)


def test_probability_metrics(case: tuple[Any, Any, dict[str, Any]]) -> None:
    s, y, got = case
    reg = got["regular"]
    prior = y.mean()
    brier = brier_score_loss(y, s)
    assert reg["brier"] == pytest.approx(brier, abs=TOL)
    assert reg["brier_skill"] == pytest.approx(1 - brier / (prior * (1 - prior)), abs=TOL)
    assert reg["brier_pos"] == pytest.approx(brier_score_loss(y[y == 1], s[y == 1]), abs=TOL)
    assert reg["brier_neg"] == pytest.approx(brier_score_loss(y[y == 0], s[y == 0]), abs=TOL)
    # The data holds exact 0s and 1s: give scikit-learn the documented 1e-15 clipping.
    clipped = np.clip(s, 1e-15, 1 - 1e-15)
    assert reg["log_loss"] == pytest.approx(log_loss(y, clipped), abs=TOL)


def test_ece_and_reliability(case: tuple[Any, Any, dict[str, Any]]) -> None:
    s, y, got = case
    prob_true, prob_pred = calibration_curve(y, s, n_bins=10)
    edges = np.linspace(0.0, 1.0, 11)
    counts = np.bincount(np.searchsorted(edges[1:-1], s), minlength=10)
    occupied = counts[counts > 0]
    gaps = np.abs(prob_pred - prob_true)
    assert got["regular"]["ece"] == pytest.approx(np.sum(occupied / s.size * gaps), abs=TOL)
    assert got["regular"]["mce"] == pytest.approx(gaps.max(), abs=TOL)
    bins = got["reliability"]
    assert [b["count"] for b in bins] == counts.tolist()
    filled = [b for b in bins if b["count"]]
    assert [b["mean_score"] for b in filled] == pytest.approx(prob_pred, abs=TOL)
    assert [b["fraction_positive"] for b in filled] == pytest.approx(prob_true, abs=TOL)
    assert all(b["mean_score"] is None for b in bins if not b["count"])


@pytest.mark.parametrize("seed", range(4))
def test_quantile_reliability(seed: int) -> None:
    s, y = _random_set(seed, 2)
    got = evaluate(s, y, reliability_bins=5, reliability_strategy="quantile")
    prob_true, prob_pred = calibration_curve(y, s, n_bins=5, strategy="quantile")
    edges = np.percentile(s, np.linspace(0, 100, 6))
    bins = got["reliability"]
    assert [b["lower"] for b in bins] == edges[:-1].tolist()
    assert [b["upper"] for b in bins] == edges[1:].tolist()
    filled = [b for b in bins if b["count"]]
    assert sum(b["count"] for b in bins) == s.size
    assert [b["mean_score"] for b in filled] == pytest.approx(prob_pred, abs=TOL)
    assert [b["fraction_positive"] for b in filled] == pytest.approx(prob_true, abs=TOL)


@pytest.mark.parametrize(("seed", "decimals"), CASES)
def test_calibrated_against_reference(seed: int, decimals: int) -> None:
    # The literal oracle is quadratic; a small set keeps it fast and still heavily tied.
    s, y = _random_set(seed, decimals, n=600)
    got = evaluate(s, y, pi0=[0.5, 0.1, 0.01])
    for key, pi0 in [("regular", None), ("0.5", 0.5), ("0.1", 0.1), ("0.01", 0.01)]:
        values = got["regular"] if pi0 is None else got["calibrated"][key]
        want = reference.prior_dependent(s, y, pi0)
        for name, expected in want.items():
            assert values[name] == pytest.approx(expected, abs=1e-10), (key, name)


def test_calibrated_precision_at_threshold(case: tuple[Any, Any, dict[str, Any]]) -> None:
    s, y, got = case
    tp = np.sum((s >= 0.5) & (y == 1))
    fp = np.sum((s >= 0.5) & (y == 0))
    tpr, fpr = tp / y.sum(), fp / (y.size - y.sum())
    for pi0 in (0.5, 0.1, 0.01):
        values = got["calibrated"][repr(pi0)]
        # The paper's form: P_c = TPR / (TPR + (1 - pi0)/pi0 * FPR).
        pc = tpr / (tpr + (1 - pi0) / pi0 * fpr)
        assert values["precision"] == pytest.approx(pc, abs=TOL)
        assert values["f1"] == pytest.approx(2 * pc * tpr / (pc + tpr), abs=TOL)
