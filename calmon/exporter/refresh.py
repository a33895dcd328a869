"""Keeping the window collector's snapshot fresh, and plugging it into the API's ``/metrics``.

:meth:`WindowExporter.lifespan` is a lifespan hook of the API app: it registers the
collector with the app's scrape collectors and, given ``refresh_every``, reloads the snapshot
on a background thread at that period (``calmon api``, whose processes run no scheduler;
every worker keeps its own snapshot; ``calmon serve`` too). The owner may also call
:meth:`WindowExporter.refresh` itself: ``calmon serve`` does so after every scheduler tick, so
a computed window shows on the next scrape, and its timer keeps the series fresh during a
tick that back-fills many windows.

A refresh is a bounded read (:func:`calmon.exporter.snapshot.load_snapshot`: which windows
exist, then the records of those that fit in ``CALMON_METRICS_MAX_SERIES``) under the same
deadline as a request's database work. When it fails (database down, schema not
migrated yet) the previous snapshot stays: the window timestamps it carries show its age, and
``CalmonMetricsStale`` fires if it lasts. The exporter reads time from the
:class:`~calmon.clock.Clock` it is given (the machine's by default), as the scheduler does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from calmon.clock import SYSTEM_CLOCK, Clock, RepeatingTimer
from calmon.db.session import session_deadline
from calmon.exporter.collector import WindowCollector
from calmon.exporter.snapshot import Snapshot, load_snapshot

if TYPE_CHECKING:
    from calmon.settings import Settings

logger = logging.getLogger(__name__)

#: seconds a refresh's read may run past the statement timeout before its connection is cut
DEADLINE_MARGIN = 2.0


class WindowExporter:
    """The window collector and what refreshes its snapshot from the database."""

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.collector = WindowCollector()
        self._session_factory: sessionmaker[Session] | None = None
        self._deadline = 0.0
        self._max_series = 0
        self._lock = threading.Lock()
        self._failing = False

    def bind(self, session_factory: sessionmaker[Session], *, settings: Settings) -> None:
        """Read from ``session_factory`` (one of sessions that only read) from now on."""
        self._deadline = settings.db_statement_timeout + DEADLINE_MARGIN
        self._max_series = settings.metrics_max_series
        self._session_factory = session_factory

    def unbind(self) -> None:
        """Stop reading (refreshes become no-ops); the last snapshot stays."""
        self._session_factory = None

    def refresh(self) -> Snapshot | None:
        """Reload the snapshot now; None (and the old snapshot kept) when unbound or when the
        read failed. Refreshes run one at a time, so the last one to finish read last."""
        with self._lock:
            factory = self._session_factory
            if factory is None:
                return None
            try:
                with factory() as session, session_deadline(session, self._deadline):
                    snapshot = load_snapshot(session, max_series=self._max_series, clock=self.clock)
            except SQLAlchemyError:
                if not self._failing:
                    logger.warning("window series not refreshed: database error", exc_info=True)
                self._failing = True
                return None
            if self._failing:
                logger.info("window series refreshed again")
            self._failing = False
            self.collector.update(snapshot)
            return snapshot

    def after_tick(self, _report: Any = None) -> None:
        """A scheduler tick ended: its windows (or a leader elsewhere's) may have changed."""
        self.refresh()

    def lifespan(
        self, *, refresh_every: float | None
    ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
        """A lifespan hook that serves the collector on the app's ``/metrics`` and, with
        ``refresh_every`` (seconds), refreshes it on a background thread, the first time at
        once."""

        @asynccontextmanager
        async def hook(app: FastAPI) -> AsyncIterator[None]:
            self.bind(app.state.read_session_factory, settings=app.state.settings)
            app.state.scrape_collectors.append(self.collector)
            app.state.window_exporter = self
            timer = (
                None
                if refresh_every is None
                else RepeatingTimer(self.refresh, refresh_every, name="calmon-exporter")
            )
            if timer is not None:
                timer.start()
            try:
                yield
            finally:
                if timer is not None:
                    await asyncio.to_thread(timer.stop, self._deadline + 1.0)
                self.unbind()

        return hook
