"""Per-client token buckets for write requests (answered 429 with ``Retry-After`` when empty).

Each API worker keeps its own buckets, so with ``calmon api --workers N`` a client may reach N
times the configured rate. Clients are keyed by which configured token they presented (one
bucket per token, one more for requests when no token is configured): the number of buckets is
bounded by the configuration, never by what clients send.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class RateLimiter:
    """``rate`` requests per second per key, with bursts of up to ``burst`` requests."""

    def __init__(
        self, *, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst ≥ 1")
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[int, tuple[float, float]] = {}

    def retry_after(self, key: int) -> int | None:
        """Take one request from ``key``'s bucket: None when allowed, else the whole seconds
        to wait before the next request would be."""
        now = self._clock()
        with self._lock:
            level, updated = self._buckets.get(key, (self._burst, now))
            level = min(self._burst, level + (now - updated) * self._rate)
            if level >= 1.0:
                self._buckets[key] = (level - 1.0, now)
                return None
            self._buckets[key] = (level, now)
            return max(1, math.ceil((1.0 - level) / self._rate))
