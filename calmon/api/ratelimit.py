"""Per-client token buckets (answered 429 with ``Retry-After`` when empty).

Each API worker keeps its own buckets, so with ``calmon api --workers N`` a client may reach N
times the configured rate. Write requests are keyed by which configured token they presented
(one bucket per token, one more for requests when no token is configured): the number of
buckets is bounded by the configuration. Failed web logins are keyed by client address, which
clients choose: with ``max_keys`` the buckets that have refilled are forgotten (a missing bucket
is a full one) and, when as many addresses are still limited, new ones share one bucket.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable
from typing import Final

#: the bucket new keys share while ``max_keys`` others are still being limited
OVERFLOW: Final = ("overflow",)


class RateLimiter:
    """``rate`` requests per second per key, with bursts of up to ``burst`` requests."""

    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int | None = None,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst ≥ 1")
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._buckets: dict[Hashable, tuple[float, float]] = {}

    def _level(self, key: Hashable, now: float) -> float:
        level, updated = self._buckets.get(key, (self._burst, now))
        return min(self._burst, level + (now - updated) * self._rate)

    def _wait(self, level: float) -> int:
        return max(1, math.ceil((1.0 - level) / self._rate))

    def _bucket_of(self, key: Hashable, now: float) -> Hashable:
        """``key``, or :data:`OVERFLOW` when it is new and ``max_keys`` keys are still limited
        (full buckets are dropped first)."""
        if self._max_keys is None or key in self._buckets:
            return key
        if len(self._buckets) >= self._max_keys:
            full = [k for k in self._buckets if self._level(k, now) >= self._burst]
            for known in full:
                del self._buckets[known]
        return key if len(self._buckets) < self._max_keys else OVERFLOW

    def retry_after(self, key: Hashable) -> int | None:
        """Take one request from ``key``'s bucket: None when allowed, else the whole seconds
        to wait before the next request would be."""
        now = self._clock()
        with self._lock:
            key = self._bucket_of(key, now)
            level = self._level(key, now)
            if level >= 1.0:
                self._buckets[key] = (level - 1.0, now)
                return None
            self._buckets[key] = (level, now)
            return self._wait(level)

    def waiting(self, key: Hashable) -> int | None:
        """Like :meth:`retry_after` without taking anything: for limits on failures, checked
        before the attempt and taken only when it fails."""
        now = self._clock()
        with self._lock:
            level = self._level(self._bucket_of(key, now), now)
            return None if level >= 1.0 else self._wait(level)
