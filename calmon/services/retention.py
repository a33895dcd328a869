"""Expiry of old data: predictions whose event time is older than the retention period.

PostgreSQL expires whole day partitions (detach and rename, delete their ids from the registry
``prediction_keys`` in bounded batches, drop), making the coming days' partitions first;
SQLite deletes rows in bounded batches. Pending labels and ended windows past the cutoff go too.
This module decides what expires and when; the statements are the storage layer's
(:mod:`calmon.db.partitions` for whole days, :mod:`calmon.db.expiry` for rows).
Nothing holds locks for long (a detach waits for open windows without holding any that
ingestion or readers queue behind, a minute at most), and an interrupted run is continued by
the next.
The steps, batch sizes and budgets are in ``docs/reference/storage.md`` ("Retention").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from calmon.db.backend import partitions_predictions
from calmon.db.expiry import delete_pending_labels, delete_predictions_batch, delete_windows_batch
from calmon.db.models import Model
from calmon.db.partitions import KEY_EXPIRY_SECONDS, ensure_partitions, expire_partitions
from calmon.db.sqlstate import (
    is_lock_timeout,
)
from calmon.services.model_registry import list_models
from calmon.services.retention_bound import retention_cutoff
from calmon.services.web_sessions import expire_web_sessions
from calmon.services.windows.locks import lock_model_for_scan
from calmon.timeline import window_length

logger = logging.getLogger(__name__)

DEFAULT_BATCH: Final = 50_000
_DAY: Final = timedelta(days=1)
#: windows of a model expired by one batch (three DELETEs with this many bound instants)
WINDOW_BATCH: Final = 500
#: SQLite: seconds between two prediction batches, longer than the longest sleep of SQLite's
#: busy handler (0.1 s), so a write waiting for the lock gets it between them
SQLITE_BATCH_PAUSE: Final = 0.1


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one retention run removed (``cutoff`` None: retention is off)."""

    cutoff: datetime | None
    predictions: int
    pending_labels: int
    windows: int = 0


def expire_windows_batch(session: Session, *, model: Model, before: datetime, limit: int) -> int:
    """Delete at most ``limit`` windows of ``model`` that ended at or before ``before``
    (:func:`calmon.db.expiry.delete_windows_batch`); returns how many, fewer than ``limit``
    when none is left.

    The model lock is taken first (PostgreSQL; it waits for the model's windows being
    computed, and none starts until this transaction ends), then the tables are written in the
    order a window's computation writes them (results, scores, state): retention and
    computation never wait for each other's rows in opposite orders.
    """
    lock_model_for_scan(session, model=model)
    return delete_windows_batch(
        session,
        model_id=model.id,
        last_start=before - window_length(model.window),
        limit=limit,
    )


def _expire_windows(
    session_factory: sessionmaker[Session], *, model: Model, before: datetime, window_batch: int
) -> int:
    """Expire the windows of ``model`` that ended by ``before``, batch by batch; returns how
    many. A batch that waits for the model's lock beyond ``lock_timeout`` (a window of the
    model computed for that long) leaves the rest to the next run."""
    expired = 0
    while True:
        with session_factory() as session:
            try:
                deleted = expire_windows_batch(
                    session, model=model, before=before, limit=window_batch
                )
                session.commit()
            except OperationalError as exc:
                if not is_lock_timeout(exc):
                    raise
                logger.info(
                    "window expiry postponed: a window of the model is being computed",
                    extra={"model": model.name},
                )
                return expired
        expired += deleted
        if deleted < window_batch:
            return expired


def run_retention(
    session_factory: sessionmaker[Session],
    *,
    now: datetime,
    retention_days: int,
    batch_size: int = DEFAULT_BATCH,
    window_batch: int = WINDOW_BATCH,
    key_seconds: float = KEY_EXPIRY_SECONDS,
) -> RetentionResult:
    """Make the coming days' partitions (PostgreSQL) and delete expired web sessions, then
    expire everything older than ``retention_days`` before ``now``, batch by batch: predictions
    (whole days on PostgreSQL, ``batch_size`` rows per statement on SQLite), windows
    (``window_batch``), pending labels."""
    with session_factory() as session:
        ensure_partitions(session, now=now)
        sessions = expire_web_sessions(session, now=now)
        session.commit()
        partitioned = partitions_predictions(session)
    if sessions:
        logger.info("expired web sessions deleted", extra={"sessions": sessions})
    cutoff = retention_cutoff(now=now, retention_days=retention_days)
    if cutoff is None:
        return RetentionResult(cutoff=None, predictions=0, pending_labels=0)
    with session_factory() as session:
        models = list_models(session, by_id=True)
    predictions = windows = 0
    if partitioned:
        predictions = expire_partitions(session_factory, before=cutoff, budget=key_seconds)
    for model in models:
        while not partitioned:
            with session_factory() as session:
                deleted = delete_predictions_batch(
                    session, model_id=model.id, before=cutoff, limit=batch_size
                )
                session.commit()
            predictions += deleted
            if deleted < batch_size:
                break
            time.sleep(SQLITE_BATCH_PAUSE)
        windows += _expire_windows(
            session_factory, model=model, before=cutoff, window_batch=window_batch
        )
    with session_factory() as session:
        pending = delete_pending_labels(session, before=cutoff)
        session.commit()
    return RetentionResult(
        cutoff=cutoff, predictions=predictions, pending_labels=pending, windows=windows
    )
