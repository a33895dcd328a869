"""Prior / likelihood / total split of a change (docs/metrics.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app.metrics import SPLIT_METRICS, drift_split, evaluate, split_from_arrays


def _binormal(
    rng: np.random.Generator, n: int, prior: float, mu: float, *, draw_classes: bool = False
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """n rows, negatives N(0, 1), positives N(mu, 1); round(prior·n) positives, or a
    Binomial(n, prior) number of them with ``draw_classes``."""
    n_pos = int(rng.binomial(n, prior)) if draw_classes else round(prior * n)
    s = np.concatenate([rng.normal(mu, 1.0, n_pos), rng.normal(0.0, 1.0, n - n_pos)])
    y = np.zeros(n, dtype=np.int64)
    y[:n_pos] = 1
    return s, y


def test_split_from_evaluate_results() -> None:
    rng = np.random.default_rng(3)
    ref_s, ref_y = _binormal(rng, 4000, 0.3, 1.5)
    win_s, win_y = _binormal(rng, 3000, 0.1, 1.2)
    reference = evaluate(ref_s, ref_y, score_kind="score", threshold=1.0)
    window = evaluate(win_s, win_y, score_kind="score", threshold=1.0, pi0=[reference["prior"]])
    split = drift_split(window, reference)
    at_ref = window["calibrated"][repr(reference["prior"])]
    for name in SPLIT_METRICS:
        parts = split[name]
        assert parts["prior"] == window["regular"][name] - at_ref[name]
        assert parts["likelihood"] == at_ref[name] - reference["regular"][name]
        assert parts["total"] == parts["prior"] + parts["likelihood"]
        change = window["regular"][name] - reference["regular"][name]
        assert parts["total"] == pytest.approx(change, abs=1e-15)
    assert split == split_from_arrays(win_s, win_y, ref_s, ref_y, threshold=1.0)


def test_window_must_be_calibrated_at_reference_prior() -> None:
    s, y = np.array([0.1, 0.5, 0.9]), np.array([0, 1, 1])
    with pytest.raises(ValueError, match="no calibrated values at the reference prior"):
        drift_split(evaluate(s, y, pi0=[0.5]), evaluate(s, 1 - y))


def test_undefined_reference_gives_none() -> None:
    s = np.array([0.1, 0.5, 0.9])
    split = split_from_arrays(s, np.array([0, 1, 1]), s, np.array([0, 0, 0]), threshold=0.5)
    for parts in split.values():
        assert parts == {"total": None, "prior": None, "likelihood": None}


def _median_split(window_prior: float, window_mu: float, seeds: int = 5) -> dict[str, Any]:
    """Median over a few seeds of the split of a 100k-row window against a 100k-row
    reference (π = 0.2, µ = 1.5)."""
    rows = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        ref_s, ref_y = _binormal(rng, 100_000, 0.2, 1.5)
        # The window's class of each row is drawn, so its π is near, not at, the target.
        win_s, win_y = _binormal(rng, 100_000, window_prior, window_mu, draw_classes=True)
        rows.append(split_from_arrays(win_s, win_y, ref_s, ref_y, threshold=1.0))
    return {
        name: {part: float(np.median([r[name][part] for r in rows])) for part in rows[0][name]}
        for name in SPLIT_METRICS
    }


def test_pure_prior_shift_is_all_prior() -> None:
    split = _median_split(window_prior=0.02, window_mu=1.5)
    for name in ("precision", "average_precision", "best_f1"):
        parts = split[name]
        assert parts["total"] < -0.3, (name, parts)
        assert abs(parts["likelihood"]) < 0.02, (name, parts)


def test_pure_likelihood_drift_is_all_likelihood() -> None:
    split = _median_split(window_prior=0.2, window_mu=0.8)
    for name in ("precision", "f1", "average_precision", "best_f1", "pr_gain_auc"):
        parts = split[name]
        assert parts["total"] < -0.05, (name, parts)
        assert abs(parts["prior"]) < 0.005, (name, parts)


def test_likelihood_intervals_are_attached() -> None:
    rng = np.random.default_rng(11)
    ref_s, ref_y = _binormal(rng, 5000, 0.2, 1.5)
    win_s, win_y = _binormal(rng, 5000, 0.05, 1.5)
    split = split_from_arrays(win_s, win_y, ref_s, ref_y, threshold=1.0, intervals=True, seed=4)
    for name in SPLIT_METRICS:
        bounds = split[name]["likelihood_interval"]
        assert bounds is not None, name
        lo, hi = bounds
        assert lo <= hi
