"""How the pooled-decision study (``studies/decision.py``) chooses each hour's pool: back until
the pool holds the positives it needs, and, with a minimum span, over at least that many
hours, so that a week holds as many distinct pools at a high prior as at the base rate."""

from __future__ import annotations

import numpy as np

from studies.decision import MAX_SPAN_HOURS, Pool, pool_start


def _windows(positives: list[int]) -> list[Pool]:
    return [(np.zeros(n), np.zeros(10)) for n in positives]


def test_without_a_minimum_span_the_positives_alone_decide() -> None:
    windows = _windows([60] * 48)
    # 400 positives: the window and six before it (7 * 60 = 420)
    assert pool_start(windows, 47, min_positives=400) == 41
    assert pool_start(windows, 47, min_positives=400, min_span=0) == 41
    assert pool_start(windows, 47, min_positives=60) == 47


def test_a_minimum_span_pools_at_least_that_many_hours() -> None:
    windows = _windows([60] * 48)
    assert pool_start(windows, 47, min_positives=400, min_span=20) == 28
    # a window that alone holds enough positives is its own pool, as in the service
    assert pool_start(windows, 47, min_positives=60, min_span=20) == 47
    # where the positives need more hours than the span, they decide
    sparse = _windows([7] * 100)
    assert pool_start(sparse, 99, min_positives=400, min_span=20) == 99 - 57


def test_the_pool_stops_at_the_first_window_and_at_the_maximum_span() -> None:
    assert pool_start(_windows([60] * 10), 9, min_positives=400, min_span=20) == 0
    empty = _windows([0] * (MAX_SPAN_HOURS + 20))
    hour = MAX_SPAN_HOURS + 19
    assert pool_start(empty, hour, min_positives=400, min_span=20) == hour - MAX_SPAN_HOURS + 1
