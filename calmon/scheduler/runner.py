"""The scheduler loop: every ``CALMON_SCHEDULER_INTERVAL`` seconds, one *tick*.

A tick takes (or keeps) the leader lock. The leader does the once-only work: it scans every
model for changed windows (:func:`calmon.services.windows.planning.scan_model`) and, once an
hour (the first time ten minutes after start), expires old predictions and their windows (the
retention period stored in the database, :mod:`calmon.services.retention_bound`). Then every
process on PostgreSQL, leader or not, lists the due windows and tries them in a fair order
(:func:`calmon.scheduler.ordering.fair_order`: round-robin across models), each in its own session
and transaction (:func:`calmon.services.windows.compute.compute_window`), which claims the window
first and computes it only if it is still due; a window claimed elsewhere is skipped. The plan
(and, on the leader, the scan) is made again every interval while windows remain, so fresh
windows do not wait behind a back-fill. On SQLite only the leader computes. A failure is logged
with the model and window, counted in ``calmon_window_compute_failures_total{model}`` and
retried after a back-off; other windows and models go on.

Ticks run on a :class:`calmon.clock.RepeatingTimer` thread, never two at once; ``calmon
scheduler`` runs it alone, ``calmon serve`` beside the API.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from calmon.clock import SYSTEM_CLOCK, Clock, RepeatingTimer
from calmon.db.backend import single_writer
from calmon.db.models import Model
from calmon.db.session import create_db_engine, create_session_factory
from calmon.db.sqlstate import aborted_for_concurrency, is_lock_timeout
from calmon.scheduler import instruments
from calmon.scheduler.lock import LeaderLock, leader_lock
from calmon.scheduler.ordering import Outcome, fair_order
from calmon.services.model_registry import list_models
from calmon.services.retention import run_retention
from calmon.services.retention_bound import RetentionBound, StoredRetention, settled
from calmon.services.windows.compute import WindowChangedError, compute_window
from calmon.services.windows.locks import lock_model_for_scan
from calmon.services.windows.planning import (
    MAX_DUE_WINDOWS,
    DueWindow,
    due_windows,
    record_failure,
    refresh_for_fixed_reference,
    request_outdated_records,
    scan_model,
)
from calmon.services.windows.reference_cache import ReferenceCache
from calmon.settings import Settings
from calmon.timeline import iso

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
    """Computes due windows it can claim; scans and expires while holding the leader lock.

    ``before_commit`` (None in production) runs in the transaction of each window computed,
    after everything is written and before the commit: tests hold windows open with it.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        engine: Engine | None = None,
        instance: str | None = None,
        lock: LeaderLock | None = None,
        after_tick: Callable[[TickReport], None] | None = None,
        before_commit: Callable[[], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.after_tick = after_tick
        self.before_commit = before_commit
        self._own_engine = engine is None
        self.engine = engine if engine is not None else create_db_engine(settings)
        self.session_factory: sessionmaker[Session] = create_session_factory(self.engine)
        #: sessions for what only reads (on SQLite they do not take the write lock)
        self.read_session_factory = create_session_factory(self.engine, reads_only=True)
        self.instance = instance or default_instance()
        self.lock = lock or leader_lock(self.engine, instance=self.instance)
        self.cache = ReferenceCache()
        self.margin = timedelta(seconds=settings.scheduler_scan_margin)
        self._stop = threading.Event()
        self._tick_lock = threading.Lock()
        self._timer: RepeatingTimer | None = None
        self._last_retention = self.clock.monotonic() - RETENTION_EVERY + RETENTION_FIRST_AFTER
        #: the retention period of the database (``CALMON_RETENTION_DAYS`` seeds it)
        self.retention = RetentionBound(settings.retention_days)
        #: every process computes (claiming windows) on PostgreSQL; on SQLite the leader alone
        self._claims = not single_writer(self.engine)
        #: models whose records of an older shape this process has requested again
        self._shapes_checked: set[int] = set()

    def tick(self) -> TickReport:
        """One round: lead (scan) or not; compute due windows until none is left to claim;
        the leader's hourly work last."""
        with self._tick_lock:
            leader = self._lead()
            computes = leader or self._claims
            failed = 0
            computed = 0
            queue: deque[tuple[Model, DueWindow]] = deque()
            if computes:
                planned, failed = self._plan(scan=leader)
                queue = deque(planned)
            planned_at = self.clock.monotonic()
            progress = 0
            broken: set[tuple[int, datetime]] = set()
            while computes and not self._stop.is_set():
                stale = self.clock.monotonic() - planned_at >= self.settings.scheduler_interval
                if stale or (not queue and progress):
                    # Plan again: every interval (the leader scans first), and as soon as a
                    # pass over the plan computed something (windows skipped because another
                    # process held them may be free now; a pass that computed nothing ends
                    # the tick, so a process never spins on windows others hold).
                    if stale:
                        leader = self._lead()
                        if not (leader or self._claims):
                            break
                    planned, failures = self._plan(scan=leader and stale)
                    # a window that failed is tried again at a later tick, not in this one
                    queue = deque(
                        (model, window)
                        for model, window in planned
                        if (model.id, window.start) not in broken
                    )
                    failed += failures
                    planned_at = self.clock.monotonic() if stale else planned_at
                    progress = 0
                if not queue:
                    break
                model, window = queue.popleft()
                outcome = self._compute(model, window)
                computed += outcome is Outcome.COMPUTED
                progress += outcome is Outcome.COMPUTED
                if outcome is Outcome.FAILED:
                    failed += 1
                    broken.add((model.id, window.start))
                instruments.WINDOWS_PENDING.set(len(queue))
            if not self._stop.is_set() and leader and self.lock.held():
                self._expire()
            return TickReport(
                leader=leader, due=computed + len(queue), computed=computed, failed=failed
            )

    def _lead(self) -> bool:
        """Take or keep the leader lock; the gauge follows."""
        leader = self.lock.acquire()
        instruments.SCHEDULER_LEADER.set(1 if leader else 0)
        return leader

    def _plan(self, *, scan: bool) -> tuple[list[tuple[Model, DueWindow]], int]:
        """The due windows of every model in the order to try them, and how many models'
        scans or listings failed; ``scan``: the leader scans each model first."""
        with self.read_session_factory() as session:
            models = list(list_models(session, by_id=True))
        retention = self._retention(fresh=False)
        due: dict[int, list[DueWindow]] = {}
        failed = 0
        for model in models:
            try:
                due[model.id] = self._plan_model(model, scan=scan, retention=retention)
            except Exception:
                failed += 1
                instruments.COMPUTE_FAILURES.labels(model.name).inc()
                logger.exception("scan failed", extra={"model": model.name})
        planned = fair_order(models, due)
        instruments.WINDOWS_PENDING.set(len(planned))
        return planned, failed

    def _retention(self, *, fresh: bool) -> StoredRetention:
        """The database's retention period: as cached (``fresh``: read now), seeded from
        ``CALMON_RETENTION_DAYS`` when none is stored."""
        now, monotonic = self.clock.now(), self.clock.monotonic()
        with self.session_factory() as session:
            if fresh:
                stored = self.retention.refresh(session, now=now, monotonic=monotonic)
            else:
                stored = self.retention.read(session, now=now, monotonic=monotonic)
            session.commit()
        return stored

    def _plan_model(
        self, model: Model, *, scan: bool, retention: StoredRetention
    ) -> list[DueWindow]:
        """Scan the model (``scan``), then list its due windows, none that ended before
        ``retention``'s cutoff. A scan that waits for the model's lock beyond ``lock_timeout``
        (one of its windows computed for that long) is left to the next plan; the listing goes
        on."""
        now = self.clock.now()
        expired_before = retention.cutoff(now)
        if scan:
            with self.session_factory() as session:
                try:
                    self._scan(session, model=model, now=now, expired_before=expired_before)
                except Exception as exc:
                    if not is_lock_timeout(exc):
                        raise
                    session.rollback()
                    logger.info(
                        "scan postponed: a window of the model is being computed",
                        extra={"model": model.name},
                    )
        with self.read_session_factory() as session:
            return due_windows(
                session,
                model=model,
                now=now,
                expired_before=expired_before,
                limit=MAX_DUE_WINDOWS,
            )

    def _scan(
        self, session: Session, *, model: Model, now: datetime, expired_before: datetime | None
    ) -> None:
        """The leader's scan of one model and the fixed-reference refresh, committed. On
        SQLite the scan reads in a session of its own, so the write lock is held only while
        it writes."""
        lock_model_for_scan(session, model=model)
        if not single_writer(self.engine):
            scan_model(
                session, model=model, now=now, margin=self.margin, expired_before=expired_before
            )
        else:
            with self.read_session_factory() as reader:
                scan_model(
                    session,
                    model=model,
                    now=now,
                    margin=self.margin,
                    expired_before=expired_before,
                    reader=reader,
                )
        refreshed = refresh_for_fixed_reference(session, model=model, now=now)
        outdated = 0
        if model.id not in self._shapes_checked:
            outdated = request_outdated_records(session, model=model, now=now)
        session.commit()
        self._shapes_checked.add(model.id)
        if outdated:
            logger.info(
                "records of an older shape requested again",
                extra={"model": model.name, "windows": outdated},
            )
        if refreshed:
            logger.info(
                "fixed reference changed: windows computed before it requested",
                extra={"model": model.name, "windows": refreshed},
            )

    def _compute(self, model: Model, window: DueWindow) -> Outcome:
        """Claim and compute one window in its own transaction."""
        started = time.perf_counter()
        now = self.clock.now()
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
                    only_due=True,
                    clock=self.clock,
                )
                if result is not None and self.before_commit is not None:
                    self.before_commit()
                session.commit()
        except Exception as exc:
            if isinstance(exc, WindowChangedError) or aborted_for_concurrency(exc):
                logger.info(
                    "window changed while computed: nothing stored, planned again",
                    extra={"model": model.name, "window_start": iso(window.start)},
                )
                return Outcome.CHANGED
            instruments.COMPUTE_FAILURES.labels(model.name).inc()
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
                        now=self.clock.now(),
                        base=timedelta(seconds=self.settings.scheduler_interval),
                    )
                    session.commit()
            except Exception:
                logger.exception("could not record the failure", extra={"model": model.name})
            return Outcome.FAILED
        seconds = time.perf_counter() - started
        if result is None:
            logger.debug(
                "window skipped: claimed elsewhere, computed already or waiting for an older one",
                extra={"model": model.name, "window_start": iso(window.start)},
            )
            return Outcome.SKIPPED
        instruments.WINDOW_COMPUTE_DURATION.observe(seconds)
        instruments.LAST_COMPUTE_SUCCESS.set(self.clock.now().timestamp())
        instruments.WINDOWS_COMPUTED.inc()
        if result.overflow_added:
            instruments.SEGMENTS_OVERFLOW.labels(model.name).inc(result.overflow_added)
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
        return Outcome.COMPUTED

    def _expire(self) -> None:
        """Once an hour: expire old predictions and the windows they held, by the period
        stored in the database once every process plans with it (a period stored too
        recently waits for the next run; partitions and web sessions are kept up all the
        same)."""
        if self.clock.monotonic() - self._last_retention < RETENTION_EVERY:
            return
        self._last_retention = self.clock.monotonic()
        now = self.clock.now()
        try:
            retention = self._retention(fresh=True)
            days = retention.days
            if not settled(retention, now=now, scheduler_interval=self.settings.scheduler_interval):
                logger.info(
                    "retention period changed recently; expiry waits for the next run",
                    extra={"days": days, "changed_at": iso(retention.changed_at)},
                )
                days = 0
            result = run_retention(self.session_factory, now=now, retention_days=days)
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
        timer = RepeatingTimer(
            self._scheduled_tick, self.settings.scheduler_interval, name="calmon-scheduler"
        )
        timer.start()
        self._timer = timer
        logger.info("scheduler started", extra={"instance": self.instance})

    def shutdown(self) -> None:
        """Stop after the window being computed, give up the lock, close connections."""
        self._stop.set()
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        with self._tick_lock:
            self.lock.release()
        instruments.SCHEDULER_LEADER.set(0)
        if self._own_engine:
            self.engine.dispose()
        logger.info("scheduler stopped", extra={"instance": self.instance})
