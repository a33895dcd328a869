"""The batched cores: stacked calls, zero-count blocks, shapes."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from calmon.metrics import curve_metrics, evaluate, threshold_metrics
from calmon.metrics.curves import (
    CALIBRATED_CURVE_METRICS,
    REGULAR_CURVE_METRICS,
    auc_and_ap,
    average_precision_at,
    prior_dependent_at,
)

PI0 = (0.5, 0.2, 0.01)


def _random_counts(
    seed: int, replicates: int = 9, k: int = 25
) -> tuple[npt.NDArray[np.float64], Any, Any, Any, Any]:
    """Bootstrap-like counts: small Poisson means so many blocks hold 0 positives."""
    rng = np.random.default_rng(seed)
    thresholds = np.sort(rng.choice(np.arange(1, 200), size=k, replace=False))[::-1] / 10.0
    pos = rng.poisson(0.8, size=(replicates, k))
    tied = rng.poisson(0.5, size=(replicates, k))
    above = rng.poisson(1.5, size=(replicates, k))
    below = rng.poisson(3.0, size=replicates)
    pos[0] = 0  # no positives at all: undefined
    above[1] = tied[1] = 0  # no negatives at all
    below[1] = 0
    return thresholds.astype(np.float64), pos, tied, above, below


def _rows(
    thresholds: npt.NDArray[np.float64], pos: Any, tied: Any, above: Any, below: Any
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """The evaluation set whose blocks are these counts (negatives between blocks sit midway)."""
    scores: list[float] = []
    labels: list[int] = []
    upper = thresholds[0] + 1.0
    for t, p, nt, na in zip(thresholds, pos, tied, above, strict=True):
        scores += [t] * int(p) + [t] * int(nt) + [(t + upper) / 2] * int(na)
        labels += [1] * int(p) + [0] * int(nt) + [0] * int(na)
        upper = t
    scores += [thresholds[-1] - 1.0] * int(below)
    labels += [0] * int(below)
    return np.array(scores), np.array(labels, dtype=np.int64)


@pytest.mark.parametrize("seed", range(4))
def test_stacked_equals_per_row(seed: int) -> None:
    thresholds, pos, tied, above, below = _random_counts(seed)
    batched = curve_metrics(thresholds, pos, tied, above, below, pi0=PI0)
    for b in range(pos.shape[0]):
        single = curve_metrics(thresholds, pos[b], tied[b], above[b], below[b], pi0=PI0)
        for name in REGULAR_CURVE_METRICS:
            assert single.regular[name].shape == ()
            np.testing.assert_allclose(
                batched.regular[name][b], single.regular[name], rtol=0, atol=1e-14
            )
        for p in PI0:
            for name in CALIBRATED_CURVE_METRICS:
                np.testing.assert_allclose(
                    batched.calibrated[p][name][b], single.calibrated[p][name], rtol=0, atol=1e-14
                )


@pytest.mark.parametrize("seed", range(4))
def test_prior_dependent_at_a_prior_per_row(seed: int) -> None:
    """One π0 per row gives, row by row, curve_metrics' regular values and its calibrated
    values at that π0, bit for bit; NaN where π0 is not in (0, 1) or a class is missing."""
    thresholds, pos, tied, above, below = _random_counts(seed)
    rows = pos.shape[0]
    pi0 = np.array([PI0[b % len(PI0)] for b in range(rows)])
    pi0[-1], pi0[-2] = np.nan, 1.0
    regular, calibrated = prior_dependent_at(thresholds, pos, tied, above, below, pi0=pi0)
    for b in range(rows):
        p = float(pi0[b])
        fixed = curve_metrics(thresholds, pos[b], tied[b], above[b], below[b], pi0=[0.5])
        expected = curve_metrics(
            thresholds, pos[b], tied[b], above[b], below[b], pi0=[p] if 0 < p < 1 else []
        )
        for name in CALIBRATED_CURVE_METRICS:
            assert np.array_equal(regular[name][b], fixed.regular[name], equal_nan=True), name
            if 0 < p < 1:
                want = expected.calibrated[p][name]
                assert np.array_equal(calibrated[name][b], want, equal_nan=True), (name, b)
            else:
                assert np.isnan(calibrated[name][b]), (name, b)
    for name in CALIBRATED_CURVE_METRICS:
        assert np.isnan(regular[name][:2]).all()
        assert np.isnan(calibrated[name][:2]).all()
        assert np.isfinite(calibrated[name][2]), name


@pytest.mark.parametrize("seed", range(4))
def test_average_precision_at_equals_prior_dependent_at_bit_for_bit(seed: int) -> None:
    """The drift split's bootstrap path (AP alone) gives the very floats of the full one,
    regular and calibrated at a π0 per row, NaN included."""
    thresholds, pos, tied, above, below = _random_counts(seed)
    pi0 = np.array([PI0[b % len(PI0)] for b in range(pos.shape[0])])
    pi0[-1], pi0[-2] = np.nan, 0.0
    regular, calibrated = prior_dependent_at(thresholds, pos, tied, above, below, pi0=pi0)
    ap_regular, ap_calibrated = average_precision_at(thresholds, pos, tied, above, below, pi0=pi0)
    assert np.array_equal(ap_regular, regular["average_precision"], equal_nan=True)
    assert np.array_equal(ap_calibrated, calibrated["average_precision"], equal_nan=True)
    assert np.isfinite(ap_calibrated[2:-2]).all()
    assert np.isnan(ap_calibrated[-2:]).all()
    empty = np.zeros((pos.shape[0], 0))
    none_regular, none_calibrated = average_precision_at(
        np.zeros(0), empty, empty, empty, below, pi0=pi0
    )
    assert np.isnan(none_regular).all()
    assert np.isnan(none_calibrated).all()


@pytest.mark.parametrize("seed", range(4))
def test_zero_positive_blocks_add_no_point(seed: int) -> None:
    """A replicate equals the set it describes: its empty blocks merge into the next block,
    and it is calibrated with its own class ratio."""
    thresholds, pos, tied, above, below = _random_counts(seed)
    assert (pos[2:] == 0).any()
    batched = curve_metrics(thresholds, pos, tied, above, below, pi0=PI0)
    for b in range(pos.shape[0]):
        s, y = _rows(thresholds, pos[b], tied[b], above[b], below[b])
        want = evaluate(s, y, pi0=PI0, score_kind="score")
        for name in REGULAR_CURVE_METRICS:
            got = float(batched.regular[name][b])
            expected = want["regular"][name]
            if expected is None:
                assert np.isnan(got), (b, name)
            else:
                assert got == pytest.approx(expected, abs=1e-12), (b, name)
        for p in PI0:
            for name in CALIBRATED_CURVE_METRICS:
                got = float(batched.calibrated[p][name][b])
                expected = want["calibrated"][repr(p)][name]
                if expected is None:
                    assert np.isnan(got), (b, p, name)
                else:
                    assert got == pytest.approx(expected, abs=1e-12), (b, p, name)


def test_undefined_rows_are_nan() -> None:
    thresholds, pos, tied, above, below = _random_counts(0)
    values = curve_metrics(thresholds, pos, tied, above, below, pi0=PI0)
    for name in REGULAR_CURVE_METRICS:
        assert np.isnan(values.regular[name][0]), name  # row 0 has no positives
        assert np.isnan(values.regular[name][1]), name  # row 1 has no negatives
        assert np.isfinite(values.regular[name][2:]).all(), name
    for p in PI0:
        for name in CALIBRATED_CURVE_METRICS:
            assert np.isnan(values.calibrated[p][name][:2]).all()


def test_no_blocks() -> None:
    values = curve_metrics(
        np.empty(0), np.empty((3, 0)), np.empty((3, 0)), np.empty((3, 0)), [4, 0, 1], pi0=[0.5]
    )
    for name in REGULAR_CURVE_METRICS:
        assert values.regular[name].shape == (3,)
        assert np.isnan(values.regular[name]).all()


def test_shape_errors() -> None:
    t = np.array([0.9, 0.5])
    with pytest.raises(ValueError, match=r"pos must have shape \(\.\.\., 2\)"):
        curve_metrics(t, [1, 1, 1], [0, 0], [0, 0], 0, pi0=())
    with pytest.raises(ValueError, match="one shape"):
        curve_metrics(t, [[1, 1]], [0, 0], [0, 0], 0, pi0=())
    with pytest.raises(ValueError, match="neg_below must have shape"):
        curve_metrics(t, [1, 1], [0, 0], [0, 0], [0, 0], pi0=())


def test_threshold_metrics_batched() -> None:
    tp = np.array([3, 0, 0, 5, 2])
    fp = np.array([1, 0, 4, 0, 2])
    n_pos = np.array([4, 3, 0, 5, 2])
    n_neg = np.array([6, 2, 5, 0, 8])
    values = threshold_metrics(tp, fp, n_pos, n_neg, pi0=[0.5])
    reg = values.regular
    # Row 2 has no positives and row 3 no negatives: precision would be a sure 0 and 1 there.
    np.testing.assert_allclose(reg["precision"], [0.75, np.nan, np.nan, np.nan, 0.5])
    np.testing.assert_allclose(reg["recall"], [0.75, 0.0, np.nan, 1.0, 1.0])
    np.testing.assert_allclose(reg["fpr"], [1 / 6, 0.0, 0.8, np.nan, 0.25])
    np.testing.assert_allclose(reg["f1"], [0.75, np.nan, np.nan, np.nan, 2 / 3])
    cal = values.calibrated[0.5]
    # r = pi/(1-pi) at pi0 = 0.5: row 0 r = 4/6, P_c = 3/(3 + 4/6).
    np.testing.assert_allclose(cal["precision"], [3 / (3 + 4 / 6), np.nan, np.nan, np.nan, 2 / 2.5])
    pc, rc = 3 / (3 + 4 / 6), 0.75
    assert cal["f1"][0] == pytest.approx(2 * pc * rc / (pc + rc), abs=1e-15)
    for i in range(5):
        single = threshold_metrics(tp[i], fp[i], n_pos[i], n_neg[i], pi0=[0.5])
        for name, arr in reg.items():
            np.testing.assert_array_equal(single.regular[name], arr[i])


@pytest.mark.parametrize("seed", range(4))
def test_auc_and_ap_equal_curve_metrics_bit_for_bit(seed: int) -> None:
    """The label-free estimate's lean path gives the very floats of the full one, fractional
    counts included (one block per distinct score, no negatives between blocks)."""
    rng = np.random.default_rng(seed)
    k = 500
    thresholds = np.sort(rng.random(k))[::-1]
    sizes = rng.integers(1, 4, size=k).astype(np.float64)
    pos = sizes * rng.random(k) ** 3
    tied = sizes - pos
    if seed == 0:
        pos[:] = 0.0  # no positives: undefined
    full = curve_metrics(thresholds, pos, tied, np.zeros(k), np.float64(0.0), pi0=PI0)
    lean = auc_and_ap(thresholds, pos, tied, pi0=PI0)
    for name in ("roc_auc", "average_precision"):
        np.testing.assert_array_equal(lean.regular[name], full.regular[name])
    for p in PI0:
        np.testing.assert_array_equal(
            lean.calibrated[p]["average_precision"], full.calibrated[p]["average_precision"]
        )
    assert np.isnan(lean.regular["roc_auc"]) == (seed == 0)


def test_auc_and_ap_without_blocks() -> None:
    values = auc_and_ap(np.zeros(0), np.zeros(0), np.zeros(0), pi0=(0.5,))
    assert np.isnan(values.regular["average_precision"])
    assert np.isnan(values.calibrated[0.5]["average_precision"])
