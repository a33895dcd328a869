"""``calmon_database_replica_lag_seconds`` on the API's ``/metrics`` when a read replica is
configured (``CALMON_DATABASE_READ_URL``): how far the replica's data is behind its primary.

The lag is ``now() - pg_last_xact_replay_timestamp()`` on the replica: the age of the last
transaction it replayed, which also grows while the primary commits nothing (calmon's
scheduler and ingestion commit every few seconds on a live deployment). It is read on a
background thread every ``refresh_every`` seconds, never during a scrape; while the replica
does not answer (or is not a standby) the series is absent.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final

from fastapi import FastAPI
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from calmon.clock import RepeatingTimer
from calmon.db.session import replica_lag

logger = logging.getLogger(__name__)

LAG: Final = "calmon_database_replica_lag_seconds"


class ReplicaLagCollector(Collector):
    """Serves the last lag read from the replica (nothing while it does not answer)."""

    def __init__(self, replica: Engine) -> None:
        self._replica = replica
        self._lag: float | None = None
        self._lock = threading.Lock()

    def refresh(self) -> float | None:
        """Read the lag now (None, and the series absent, when the replica fails)."""
        try:
            lag = replica_lag(self._replica)
        except SQLAlchemyError:
            lag = None
        with self._lock:
            self._lag = lag
        return lag

    def collect(self) -> Iterator[Metric]:
        """The lag gauge, when known."""
        with self._lock:
            lag = self._lag
        if lag is not None:
            yield GaugeMetricFamily(
                LAG, "seconds the read replica's last replayed transaction is old", value=lag
            )

    def lifespan(
        self, *, refresh_every: float
    ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
        """A lifespan hook: serve the gauge on the app's ``/metrics``, read it every
        ``refresh_every`` seconds."""

        @asynccontextmanager
        async def hook(app: FastAPI) -> AsyncIterator[None]:
            app.state.scrape_collectors.append(self)
            timer = RepeatingTimer(self.refresh, refresh_every, name="calmon-replica-lag")
            timer.start()
            try:
                yield
            finally:
                await asyncio.to_thread(timer.stop, refresh_every + 5.0)

        return hook
