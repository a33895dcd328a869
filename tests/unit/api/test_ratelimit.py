"""Token-bucket arithmetic of the write rate limit, on a clock the test moves."""

from __future__ import annotations

import pytest

from calmon.api.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_refill_at_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.retry_after(0) for _ in range(3)] == [None, None, None]
    assert limiter.retry_after(0) == 1
    clock.now += 0.5  # one request's worth at 2/s
    assert limiter.retry_after(0) is None
    assert limiter.retry_after(0) == 1
    clock.now += 60  # refills to the burst, not beyond
    assert [limiter.retry_after(0) for _ in range(4)] == [None, None, None, 1]


def test_keys_have_their_own_buckets() -> None:
    limiter = RateLimiter(rate=1.0, burst=1, clock=Clock())
    assert limiter.retry_after(0) is None
    assert limiter.retry_after(0) == 1
    assert limiter.retry_after(1) is None
    assert limiter.retry_after(-1) is None


def test_retry_after_counts_whole_seconds_to_the_next_request() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=0.1, burst=1, clock=clock)
    assert limiter.retry_after(0) is None
    assert limiter.retry_after(0) == 10
    clock.now += 4
    assert limiter.retry_after(0) == 6


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_bad_parameters(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="rate"):
        RateLimiter(rate=rate, burst=burst)


def test_waiting_takes_nothing() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=1 / 60, burst=2, clock=clock)
    assert [limiter.waiting("10.0.0.1") for _ in range(5)] == [None] * 5
    assert [limiter.retry_after("10.0.0.1") for _ in range(3)] == [None, None, 60]
    assert limiter.waiting("10.0.0.1") == 60
    assert limiter.waiting("10.0.0.2") is None
    clock.now += 15
    assert limiter.waiting("10.0.0.1") == 45


def test_keys_beyond_max_keys_share_one_bucket() -> None:
    """Addresses are the client's choice: refilled buckets are forgotten, and while
    ``max_keys`` addresses are still limited the next ones share one bucket."""
    clock = Clock()
    limiter = RateLimiter(rate=1.0, burst=1, clock=clock, max_keys=3)
    assert [limiter.retry_after(f"a{i}") for i in range(3)] == [None] * 3
    assert limiter.retry_after("b0") is None  # the shared bucket's one request
    assert limiter.retry_after("b1") == 1
    assert limiter.retry_after("a0") == 1  # known keys keep their own
    clock.now += 5  # every bucket refilled: forgotten on the next new key
    assert limiter.retry_after("c0") is None
    assert limiter.retry_after("c0") == 1
    assert limiter.retry_after("c1") is None
    assert len(limiter._buckets) <= 3
