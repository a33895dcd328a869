"""The positive blocks of a set, against counts taken row by row."""

from __future__ import annotations

import numpy as np
import pytest

from calmon.metrics.ranking import rank


@pytest.mark.parametrize("seed", range(5))
def test_blocks_match_row_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 25, size=400).astype(np.float64)
    y = (rng.random(400) < 0.3).astype(np.int64)
    r = rank(s, y)
    expected_thresholds = np.unique(s[y == 1])[::-1]
    np.testing.assert_array_equal(r.thresholds, expected_thresholds)
    previous = np.inf
    for k, t in enumerate(r.thresholds):
        assert r.pos[k] == np.sum((s == t) & (y == 1))
        assert r.neg_tied[k] == np.sum((s == t) & (y == 0))
        assert r.neg_above[k] == np.sum((s > t) & (s < previous) & (y == 0))
        assert r.tp[k] == np.sum((s >= t) & (y == 1))
        assert r.fp[k] == np.sum((s >= t) & (y == 0))
        assert r.fp_before[k] == np.sum((s > t) & (y == 0))
        previous = t
    assert r.neg_below == np.sum((s < r.thresholds[-1]) & (y == 0))
    assert (r.n_pos, r.n_neg) == (int(y.sum()), int((1 - y).sum()))


def test_no_positives_and_empty() -> None:
    r = rank(np.array([0.3, 0.1]), np.array([0, 0]))
    assert r.thresholds.size == 0
    assert (r.neg_below, r.n_pos, r.n_neg) == (2, 0, 2)
    empty = rank(np.array([]), np.array([], dtype=np.int64))
    assert (empty.thresholds.size, empty.neg_below, empty.n_pos, empty.n_neg) == (0, 0, 0, 0)


def test_only_positives() -> None:
    r = rank(np.array([0.2, 0.2, 0.9]), np.array([1, 1, 1]))
    np.testing.assert_array_equal(r.thresholds, [0.9, 0.2])
    np.testing.assert_array_equal(r.pos, [1, 2])
    np.testing.assert_array_equal(r.neg_tied, [0, 0])
    np.testing.assert_array_equal(r.neg_above, [0, 0])
    assert r.neg_below == 0
