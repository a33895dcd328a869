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
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

from apscheduler.schedulers.background import BackgroundScheduler

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
    on an APScheduler background scheduler of its own (one interval job).

    Calls never overlap: the periods that fall due during a longer call are skipped (not made
    up), and the next call starts on the first period after it. An exception is logged and the
    loop goes on. :meth:`stop` starts no further call; the action may call it itself to end
    the loop.
    """

    def __init__(
        self, action: Callable[[], object], every: float, *, name: str, first_in: float = 0.0
    ) -> None:
        # APScheduler logs every run (INFO) and every period skipped during a long call
        # (WARNING); the actions log what they do themselves.
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        self._action = action
        self._name = name
        self._calling: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._scheduler = BackgroundScheduler(timezone=UTC)
        self._scheduler.add_job(
            self._call,
            "interval",
            seconds=every,
            next_run_time=datetime.now(UTC) + timedelta(seconds=first_in),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            id=name,
        )

    def start(self) -> None:
        """Start the loop."""
        self._scheduler.start()

    def _call(self) -> None:
        self._idle.clear()
        self._calling = threading.current_thread()
        try:
            self._action()
        except Exception:
            logger.exception("background call failed", extra={"timer": self._name})
        finally:
            self._calling = None
            self._idle.set()

    def stop(self, timeout: float | None = None) -> None:
        """Start no further call and wait (at most ``timeout`` seconds; None: as long as it
        takes) for the one under way, unless called by it."""
        own = self._calling is threading.current_thread()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=not own and timeout is None)
        if not own:
            self._idle.wait(timeout)
