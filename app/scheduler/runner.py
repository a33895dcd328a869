"""The scheduler loop: every ``CALMON_SCHEDULER_INTERVAL`` seconds, one *tick*.

A tick takes (or keeps) the leader lock; standbys stop there. The leader scans every model
for changed windows (:func:`app.scheduler.planning.scan_model`), lists the due windows, and
computes them round-robin across models (each model's oldest first, so that a window's
trailing reference is computed before it), each in its own session and transaction
(:func:`app.services.windows.compute_window`). Before each window it checks that it still
holds the lock. A failure is logged with the model and window, counted in
``calmon_window_compute_failures_total{model}`` and retried after a back-off; other windows
and models go on. Once an hour (the first time ten minutes after start) the leader also
expires old predictions and their windows (``CALMON_RETENTION_DAYS``).

Ticks run on an APScheduler ``BackgroundScheduler`` thread, never two at once; ``calmon
scheduler`` runs it alone, ``calmon serve`` beside the API.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from apscheduler.schedulers.background import BackgroundScheduler
from fastapi import FastAPI
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import Model
from app.db.session import create_db_engine, create_session_factory
from app.scheduler import metrics
from app.scheduler.lock import LeaderLock, leader_lock
from app.scheduler.planning import (
    DueWindow,
    due_windows,
    record_failure,
    refresh_for_fixed_reference,
    scan_model,
)
from app.services.references import ReferenceCache
from app.services.retention import run_retention
from app.services.windows import compute_window
from app.settings import Settings
from app.windows import iso

logger = logging.getLogger(__name__)

RETENTION_EVERY: Final = 3600.0
#: the first expiry runs this long after start, so short-lived processes (tests, one-off
#: backfills) never delete data they were started for
RETENTION_FIRST_AFTER: Final = 600.0


def default_instance() -> str:
    """An id of this scheduler process: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did."""

    leader: bool
    due: int = 0
    computed: int = 0
    failed: int = 0


class WindowScheduler:
    """Scans, plans and computes windows while holding the leader lock."""

    def __init__(
        self,
        settings: Settings,
        *,
        engine: Engine | None = None,
        instance: str | None = None,
        lock: LeaderLock | None = None,
        after_tick: Callable[[TickReport], None] | None = None,
    ) -> None:
        self.settings = settings
        self.after_tick = after_tick
        self._own_engine = engine is None
        self.engine = engine if engine is not None else create_db_engine(settings)
        self.session_factory: sessionmaker[Session] = create_session_factory(self.engine)
        self.instance = instance or default_instance()
        self.lock = lock or leader_lock(
            settings.database_url, connect_timeout=settings.db_connect_timeout
        )
        self.cache = ReferenceCache()
        self.margin = timedelta(seconds=settings.scheduler_scan_margin)
        self._stop = threading.Event()
        self._tick_lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        self._last_retention = time.monotonic() - RETENTION_EVERY + RETENTION_FIRST_AFTER

    def tick(self) -> TickReport:
        """One round: lead or stand by; scan; compute every due window."""
        with self._tick_lock:
            if not self.lock.acquire():
                metrics.SCHEDULER_LEADER.set(0)
                return TickReport(leader=False)
            metrics.SCHEDULER_LEADER.set(1)
            with self.session_factory() as session:
                models = list(session.scalars(select(Model).order_by(Model.id)))
            due: dict[int, list[DueWindow]] = {}
            failed = 0
            for model in models:
                try:
                    due[model.id] = self._plan(model)
                except Exception:
                    failed += 1
                    metrics.COMPUTE_FAILURES.labels(model.name).inc()
                    logger.exception("scan failed", extra={"model": model.name})
            remaining = sum(len(windows) for windows in due.values())
            metrics.WINDOWS_PENDING.set(remaining)
            computed = 0
            for model, window in _round_robin(models, due):
                if self._stop.is_set() or not self.lock.held():
                    metrics.SCHEDULER_LEADER.set(0 if not self.lock.held() else 1)
                    break
                if self._compute(model, window):
                    computed += 1
                else:
                    failed += 1
                remaining -= 1
                metrics.WINDOWS_PENDING.set(remaining)
            if not self._stop.is_set() and self.lock.held():
                self._expire()
            return TickReport(
                leader=True, due=computed + remaining, computed=computed, failed=failed
            )

    def _plan(self, model: Model) -> list[DueWindow]:
        now = datetime.now(UTC)
        with self.session_factory() as session:
            scan_model(session, model=model, now=now, margin=self.margin)
            refreshed = refresh_for_fixed_reference(session, model=model, now=now)
            session.commit()
            if refreshed:
                logger.info(
                    "fixed reference changed: windows computed before it requested",
                    extra={"model": model.name, "windows": refreshed},
                )
            return due_windows(session, model=model, now=now)

    def _compute(self, model: Model, window: DueWindow) -> bool:
        """Compute one window in its own transaction; False when it failed."""
        started = time.perf_counter()
        now = datetime.now(UTC)
        try:
            with self.session_factory() as session:
                result = compute_window(
                    session,
                    model=model,
                    start=window.start,
                    now=now,
                    instance=self.instance,
                    cache=self.cache,
                    margin=self.margin,
                    pause_before_commit=self.settings.scheduler_pause_before_commit,
                )
                session.commit()
        except Exception:
            metrics.COMPUTE_FAILURES.labels(model.name).inc()
            logger.exception(
                "window computation failed",
                extra={"model": model.name, "window_start": iso(window.start)},
            )
            try:
                with self.session_factory() as session:
                    record_failure(
                        session,
                        model_id=model.id,
                        start=window.start,
                        now=datetime.now(UTC),
                        base=timedelta(seconds=self.settings.scheduler_interval),
                    )
                    session.commit()
            except Exception:
                logger.exception("could not record the failure", extra={"model": model.name})
            return False
        seconds = time.perf_counter() - started
        if result is None:
            logger.info(
                "window skipped: computed elsewhere or gone",
                extra={"model": model.name, "window_start": iso(window.start)},
            )
            return True
        metrics.WINDOW_COMPUTE_DURATION.observe(seconds)
        metrics.LAST_COMPUTE_SUCCESS.set(time.time())
        if result.overflow_added:
            metrics.SEGMENTS_OVERFLOW.labels(model.name).inc(result.overflow_added)
        logger.info(
            "window computed",
            extra={
                "model": model.name,
                "window_start": iso(window.start),
                "version": result.version,
                "predictions": result.predictions,
                "segments": len(result.segments),
                "seconds": round(seconds, 3),
                "instance": self.instance,
            },
        )
        return True

    def _expire(self) -> None:
        """Once an hour: expire old predictions and the windows they held."""
        if time.monotonic() - self._last_retention < RETENTION_EVERY:
            return
        self._last_retention = time.monotonic()
        try:
            result = run_retention(
                self.session_factory,
                now=datetime.now(UTC),
                retention_days=self.settings.retention_days,
            )
        except Exception:
            logger.exception("retention failed")
            return
        if result.cutoff is None:
            return
        logger.info(
            "retention done",
            extra={
                "cutoff": iso(result.cutoff),
                "predictions": result.predictions,
                "windows": result.windows,
                "pending_labels": result.pending_labels,
            },
        )

    def _scheduled_tick(self) -> None:
        """A background tick, then ``after_tick`` (``calmon serve`` refreshes the exporter's
        snapshot there, leader or not: a standby's windows are computed elsewhere)."""
        report = self.tick()
        if self.after_tick is not None:
            try:
                self.after_tick(report)
            except Exception:
                logger.exception("after-tick hook failed")

    def start(self) -> None:
        """Run ticks in the background, the first one now."""
        # APScheduler logs every run (INFO) and every run skipped while a long tick goes on
        # (WARNING); ticks log what they do themselves, and catch their own errors.
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        scheduler = BackgroundScheduler(timezone=UTC)
        scheduler.add_job(
            self._scheduled_tick,
            "interval",
            seconds=self.settings.scheduler_interval,
            next_run_time=datetime.now(UTC),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            id="windows",
        )
        scheduler.start()
        self._scheduler = scheduler
        logger.info("scheduler started", extra={"instance": self.instance})

    def shutdown(self) -> None:
        """Stop after the window being computed, give up the lock, close connections."""
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
            self._scheduler = None
        with self._tick_lock:
            self.lock.release()
        metrics.SCHEDULER_LEADER.set(0)
        if self._own_engine:
            self.engine.dispose()
        logger.info("scheduler stopped", extra={"instance": self.instance})


def _round_robin(
    models: list[Model], due: dict[int, list[DueWindow]]
) -> list[tuple[Model, DueWindow]]:
    """Each model's due windows in order, interleaved across models."""
    order: list[tuple[Model, DueWindow]] = []
    depth = max((len(windows) for windows in due.values()), default=0)
    for i in range(depth):
        for model in models:
            windows = due.get(model.id, [])
            if i < len(windows):
                order.append((model, windows[i]))
    return order


def scheduler_lifespan(
    settings: Settings, *, after_tick: Callable[[TickReport], None] | None = None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A lifespan hook of the API app that runs a :class:`WindowScheduler` beside it
    (``calmon serve``) and adds the scheduler's metrics to the API's ``/metrics``;
    ``after_tick`` is called after each background tick."""

    @asynccontextmanager
    async def hook(app: FastAPI) -> AsyncIterator[None]:
        scheduler = WindowScheduler(settings, after_tick=after_tick)
        app.state.scrape_collectors.append(metrics.SCHEDULER_REGISTRY)
        app.state.scheduler = scheduler
        scheduler.start()
        try:
            yield
        finally:
            await asyncio.to_thread(scheduler.shutdown)

    return hook
