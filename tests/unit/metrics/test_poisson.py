"""Table-driven Poisson draws: the tables are the inverse CDF, and the draws follow Poisson(m)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calmon.metrics.poisson import _SUPPORT, TABLE_MEANS, TABLE_SLICES, _tables, poisson


def test_every_table_row_is_the_inverse_cdf_of_its_mean() -> None:
    """A slice maps to one value exactly when no CDF step (per scipy) lies inside it, and then
    to the value the inverse CDF gives its uniforms; only a few percent need a second look."""
    _, table = _tables()
    rows = table.reshape(TABLE_MEANS, TABLE_SLICES)
    starts = np.arange(TABLE_SLICES) / TABLE_SLICES
    ends = starts + (1 - 1e-9) / TABLE_SLICES
    for mean in range(TABLE_MEANS):
        cdf = stats.poisson.cdf(np.arange(_SUPPORT), mean)
        at_start = np.searchsorted(cdf, starts, side="right")
        at_end = np.searchsorted(cdf, ends, side="right")
        resolved = rows[mean] >= 0
        np.testing.assert_array_equal(resolved, at_start == at_end, err_msg=f"mean {mean}")
        np.testing.assert_array_equal(rows[mean][resolved], at_start[resolved])
        assert np.count_nonzero(~resolved) <= 0.05 * TABLE_SLICES


@pytest.mark.parametrize("mean", [1, 2, 5, 17, 63, 100, 255, 256, 1000])
def test_draws_follow_poisson_of_their_mean(mean: int) -> None:
    draws = poisson(np.random.default_rng(mean), np.array([mean], dtype=np.int64), 200_000)
    assert draws.dtype == np.int64
    assert draws.shape == (200_000, 1)
    lo, hi = stats.poisson.ppf([1e-4, 1 - 1e-4], mean).astype(int)
    values = np.clip(draws[:, 0], lo, hi)
    observed = np.bincount(values - lo, minlength=hi - lo + 1).astype(np.float64)
    expected = stats.poisson.pmf(np.arange(lo, hi + 1), mean) * draws.shape[0]
    expected[0] = stats.poisson.cdf(lo, mean) * draws.shape[0]
    expected[-1] = stats.poisson.sf(hi - 1, mean) * draws.shape[0]
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3


def test_mixed_columns_zero_small_and_large_means() -> None:
    lam = np.array([0, 1, 3, 1, 0, 40, 255, 300, 5000], dtype=np.int64)
    draws = poisson(np.random.default_rng(2), lam, 100_000)
    assert draws.shape == (100_000, lam.size)
    assert np.all(draws[:, lam == 0] == 0)
    se = np.sqrt(np.maximum(lam, 1) / 100_000)
    np.testing.assert_array_less(np.abs(draws.mean(axis=0) - lam), 5 * se)
    np.testing.assert_allclose(draws.var(axis=0), lam, rtol=0.03, atol=1e-12)
    # Columns are independent.
    corr = np.corrcoef(draws[:, [1, 2, 5, 6, 7]].T)
    np.testing.assert_array_less(np.abs(corr - np.eye(5)), 0.02)


def test_the_same_generator_state_gives_the_same_draws() -> None:
    lam = np.arange(0, 600, 7, dtype=np.int64)
    first = poisson(np.random.default_rng(9), lam, 50)
    np.testing.assert_array_equal(first, poisson(np.random.default_rng(9), lam, 50))
