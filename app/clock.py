"""Time as the scheduler and the exporter see it, and the one background timer they run on.

Whatever decides *when* (which windows have closed, when a plan is stale, when retention is
due) reads a :class:`Clock` passed in by keyword, :data:`SYSTEM_CLOCK` by default, so tests
can hold or advance time instead of sleeping. :class:`RepeatingTimer` is the only background
loop of the service: the scheduler's ticks, the exporter's refreshes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, Protocol

logger = logging.getLogger(__name__)


class Clock(Protocol):
    """A source of wall-clock instants and monotonic seconds."""

    def now(self) -> datetime:
        """The current instant, timezone-aware (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Final[Clock] = SystemClock()


class RepeatingTimer:
    """Calls ``action`` after ``first_in`` seconds (0: at once), then every ``every`` seconds,
    on one daemon thread.

    Calls run on a fixed grid (``every`` seconds after the previous one *began*) and never
    overlap: after a call longer than the period the next starts at once (the grid moves
    there) and the missed ones are not made up. An exception is logged and the loop goes on.
    :meth:`stop` starts no further call; the action may call it itself to end the loop.
    """

    def __init__(
        self, action: Callable[[], object], every: float, *, name: str, first_in: float = 0.0
    ) -> None:
        self._action = action
        self._every = every
        self._first_in = first_in
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the loop."""
        self._thread.start()

    def _run(self) -> None:
        due = time.monotonic() + self._first_in
        if self._first_in > 0:
            self._stop.wait(self._first_in)
        while not self._stop.is_set():
            try:
                self._action()
            except Exception:
                logger.exception("background call failed", extra={"timer": self._thread.name})
            due = max(due + self._every, time.monotonic())
            self._stop.wait(due - time.monotonic())

    def stop(self, timeout: float | None = None) -> None:
        """Start no further call and wait (at most ``timeout`` seconds; None: as long as it
        takes) for the one under way."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
