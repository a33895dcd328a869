"""Expiry of old data: predictions whose event time is older than the retention period.

Deletion runs in bounded batches, each its own transaction, so that expiry never holds locks
or a snapshot for long and can be interrupted at any point (the next run goes on). Pending
labels older than the period (their prediction never came) go too, and so do the windows that
ended by the cutoff (their state, results and stored scores), at most ``WINDOW_BATCH`` windows
of a model per statement so that no statement grows with the backlog. ``docs/storage.md`` says
how this becomes partition drops on a large PostgreSQL installation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import bindparam, delete, select, text, union
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import Model, UTCDateTime, WindowResult, WindowScores, WindowState
from app.windows import window_length

DEFAULT_BATCH: Final = 50_000
#: windows of a model expired by one batch (three DELETEs with this many bound instants)
WINDOW_BATCH: Final = 500

_BEFORE = bindparam("before", type_=UTCDateTime())
_DELETE_PREDICTIONS = text(
    "DELETE FROM predictions WHERE model_id = :model_id AND client_id IN"
    " (SELECT client_id FROM predictions WHERE model_id = :model_id AND ts < :before"
    " LIMIT :limit)"
).bindparams(_BEFORE)
_DELETE_PENDING = text("DELETE FROM pending_labels WHERE received_at < :before").bindparams(_BEFORE)


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one retention run removed (``cutoff`` None: retention is off)."""

    cutoff: datetime | None
    predictions: int
    pending_labels: int
    windows: int = 0


def retention_cutoff(*, now: datetime, retention_days: int) -> datetime | None:
    """Event times before this instant are expired; None when retention is off (0 days)."""
    return now - timedelta(days=retention_days) if retention_days > 0 else None


def expire_predictions_batch(
    session: Session, *, model_id: int, before: datetime, limit: int
) -> int:
    """Delete at most ``limit`` predictions of a model with ``ts < before``; returns how many."""
    result = session.execute(
        _DELETE_PREDICTIONS, {"model_id": model_id, "before": before, "limit": limit}
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def expire_pending_labels(session: Session, *, before: datetime) -> int:
    """Delete pending labels received before ``before``; returns how many."""
    result = session.execute(_DELETE_PENDING, {"before": before})
    return int(result.rowcount)  # type: ignore[attr-defined]


def expire_windows_batch(
    session: Session, *, model_id: int, length: timedelta, before: datetime, limit: int
) -> int:
    """Delete at most ``limit`` windows of a model (windows of ``length``) that ended at or
    before ``before``: their state, results and scores. Returns how many windows (distinct
    starts) were deleted; fewer than ``limit`` means none is left."""
    last_start = before - length
    starts = list(
        session.scalars(
            union(
                *(
                    select(table.starts_at).where(
                        table.model_id == model_id, table.starts_at <= last_start
                    )
                    for table in (WindowState, WindowResult, WindowScores)
                )
            )
            .order_by("starts_at")
            .limit(limit)
        )
    )
    if not starts:
        return 0
    for table in (WindowScores, WindowResult, WindowState):
        session.execute(
            delete(table).where(table.model_id == model_id, table.starts_at.in_(starts))
        )
    return len(starts)


def run_retention(
    session_factory: sessionmaker[Session],
    *,
    now: datetime,
    retention_days: int,
    batch_size: int = DEFAULT_BATCH,
    window_batch: int = WINDOW_BATCH,
) -> RetentionResult:
    """Expire everything older than ``retention_days`` before ``now``, batch by batch:
    predictions (``batch_size`` per statement), windows (``window_batch``), pending labels."""
    cutoff = retention_cutoff(now=now, retention_days=retention_days)
    if cutoff is None:
        return RetentionResult(cutoff=None, predictions=0, pending_labels=0)
    with session_factory() as session:
        models = list(session.execute(select(Model.id, Model.window).order_by(Model.id)))
    predictions = windows = 0
    for model_id, window in models:
        while True:
            with session_factory() as session:
                deleted = expire_predictions_batch(
                    session, model_id=model_id, before=cutoff, limit=batch_size
                )
                session.commit()
            predictions += deleted
            if deleted < batch_size:
                break
        while True:
            with session_factory() as session:
                deleted = expire_windows_batch(
                    session,
                    model_id=model_id,
                    length=window_length(window),
                    before=cutoff,
                    limit=window_batch,
                )
                session.commit()
            windows += deleted
            if deleted < window_batch:
                break
    with session_factory() as session:
        pending = expire_pending_labels(session, before=cutoff)
        session.commit()
    return RetentionResult(
        cutoff=cutoff, predictions=predictions, pending_labels=pending, windows=windows
    )
