"""Properties that hold for every set (Hypothesis)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calmon.metrics import curve_metrics, evaluate, split_from_arrays
from calmon.metrics.curves import CALIBRATED_CURVE_METRICS, REGULAR_CURVE_METRICS

# Scores on a small integer grid so ties across classes are frequent.
grid = st.integers(min_value=-12, max_value=12)


@st.composite
def labelled_sets(draw: st.DrawFn, min_size: int = 0) -> tuple[Any, Any]:
    n = draw(st.integers(min_value=min_size, max_value=60))
    k = np.array(draw(st.lists(grid, min_size=n, max_size=n)), dtype=np.int64)
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.int64)
    return k, y


def _same(a: Any, b: Any, tol: float = 1e-12) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(abs(a - b) <= tol)


def _assert_same_metrics(a: dict[str, Any], b: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        assert _same(a[name], b[name]), (name, a[name], b[name])


@settings(max_examples=150, deadline=None)
@given(data=labelled_sets(), perm_seed=st.integers(0, 2**32 - 1))
def test_row_order_does_not_matter(data: tuple[Any, Any], perm_seed: int) -> None:
    k, y = data
    s = (k + 12) / 24.0
    order = np.random.default_rng(perm_seed).permutation(k.size)
    a = evaluate(s, y, pi0=[0.3])
    b = evaluate(s[order], y[order], pi0=[0.3])
    _assert_same_metrics(a["regular"], b["regular"], tuple(a["regular"]))
    _assert_same_metrics(
        a["calibrated"]["0.3"], b["calibrated"]["0.3"], tuple(a["calibrated"]["0.3"])
    )
    assert a["reliability"] == b["reliability"]


def _transform(k: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Strictly increasing and exact on the grid: distinct integers stay distinct floats."""
    x = k.astype(np.float64)
    return np.sinh(x / 3.0) * 100.0 + x**3


RANKING_METRICS = (
    "precision",
    "recall",
    "fpr",
    "f1",
    "roc_auc",
    "ks",
    "average_precision",
    "best_f1",
    "pr_gain_auc",
)


@settings(max_examples=150, deadline=None)
@given(data=labelled_sets(), tau=grid)
def test_increasing_transform_leaves_ranking_metrics(data: tuple[Any, Any], tau: int) -> None:
    k, y = data
    s_a = k / 5.0
    s_b = _transform(k)
    tau_b = float(_transform(np.array([tau]))[0])
    a = evaluate(s_a, y, threshold=tau / 5.0, pi0=[0.5, 0.05], score_kind="score")
    b = evaluate(s_b, y, threshold=tau_b, pi0=[0.5, 0.05], score_kind="score")
    _assert_same_metrics(a["regular"], b["regular"], RANKING_METRICS)
    for key in ("0.5", "0.05"):
        names = ("precision", "f1", "average_precision", "best_f1", "pr_gain_auc")
        _assert_same_metrics(a["calibrated"][key], b["calibrated"][key], names)
        thr_a = a["calibrated"][key]["best_f1_threshold"]
        thr_b = b["calibrated"][key]["best_f1_threshold"]
        if thr_a is None:
            assert thr_b is None
        else:
            assert thr_b == float(_transform(np.array([round(thr_a * 5)]))[0])
    thr_a = a["regular"]["best_f1_threshold"]
    thr_b = b["regular"]["best_f1_threshold"]
    assert (thr_a is None and thr_b is None) or thr_b == float(
        _transform(np.array([round(thr_a * 5)]))[0]
    )


@settings(max_examples=150, deadline=None)
@given(data=labelled_sets(min_size=1))
def test_calibrating_at_own_prior_is_exact(data: tuple[Any, Any]) -> None:
    k, y = data
    s = (k + 12) / 24.0
    prior = evaluate(s, y)["prior"]
    if not 0.0 < prior < 1.0:
        return
    got = evaluate(s, y, pi0=[prior])
    calibrated = got["calibrated"][repr(prior)]
    for name, value in calibrated.items():
        assert value == got["regular"][name], name


@settings(max_examples=100, deadline=None)
@given(window=labelled_sets(), ref=labelled_sets(), tau=grid)
def test_prior_plus_likelihood_is_total(
    window: tuple[Any, Any], ref: tuple[Any, Any], tau: int
) -> None:
    split = split_from_arrays(window[0], window[1], ref[0], ref[1], threshold=float(tau))
    assert set(split) == {"precision", "f1", "average_precision", "best_f1", "pr_gain_auc"}
    options: dict[str, Any] = {"threshold": float(tau), "score_kind": "score"}
    current = evaluate(window[0], window[1], **options)
    baseline = evaluate(ref[0], ref[1], **options)
    for name, parts in split.items():
        if parts["total"] is None:
            assert parts["prior"] is None
            assert parts["likelihood"] is None
        else:
            assert parts["prior"] + parts["likelihood"] == parts["total"], name
            a, d = current["regular"][name], baseline["regular"][name]
            b = evaluate(window[0], window[1], pi0=[baseline["prior"]], **options)["calibrated"]
            c = evaluate(ref[0], ref[1], pi0=[current["prior"]], **options)["calibrated"]
            b_value = b[repr(baseline["prior"])][name]
            c_value = c[repr(current["prior"])][name]
            # ... and still the change of the metric, to a few roundings of the four terms
            scale = abs(a) + abs(b_value) + abs(c_value) + abs(d)
            assert abs(parts["total"] - (a - d)) <= 4 * np.finfo(float).eps * scale, name


@st.composite
def count_stacks(draw: st.DrawFn) -> tuple[Any, ...]:
    rows = draw(st.integers(1, 6))
    k = draw(st.integers(0, 12))
    thresholds = np.sort(
        np.array(draw(st.lists(grid, min_size=k, max_size=k, unique=True)), dtype=np.float64)
    )[::-1]
    cells = st.lists(st.integers(0, 4), min_size=rows * k, max_size=rows * k)
    pos, tied, above = (np.array(draw(cells)).reshape(rows, k) for _ in range(3))
    below = np.array(draw(st.lists(st.integers(0, 5), min_size=rows, max_size=rows)))
    return thresholds, pos, tied, above, below


@settings(max_examples=150, deadline=None)
@given(stack=count_stacks())
def test_batched_equals_per_row(stack: tuple[Any, ...]) -> None:
    thresholds, pos, tied, above, below = stack
    batched = curve_metrics(thresholds, pos, tied, above, below, pi0=[0.4])
    for b in range(pos.shape[0]):
        single = curve_metrics(thresholds, pos[b], tied[b], above[b], below[b], pi0=[0.4])
        for name in REGULAR_CURVE_METRICS:
            np.testing.assert_allclose(
                batched.regular[name][b], single.regular[name], rtol=0, atol=1e-13
            )
        for name in CALIBRATED_CURVE_METRICS:
            np.testing.assert_allclose(
                batched.calibrated[0.4][name][b], single.calibrated[0.4][name], rtol=0, atol=1e-13
            )


@pytest.mark.parametrize("n", [1, 2])
def test_tiny_sets_never_raise(n: int) -> None:
    for y in ([0] * n, [1] * n):
        got = evaluate([0.5] * n, y, pi0=[0.5])
        assert got["regular"]["roc_auc"] is None
        assert all(v is None for v in got["calibrated"]["0.5"].values())
