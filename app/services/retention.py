"""Expiry of old data: predictions whose event time is older than the retention period.

Deletion runs in bounded batches, each its own transaction, so that expiry never holds locks
or a snapshot for long and can be interrupted at any point (the next run goes on). Pending
labels older than the period (their prediction never came) go too. ``docs/storage.md`` says
how this becomes partition drops on a large PostgreSQL installation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import bindparam, select, text
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import Model, UTCDateTime

DEFAULT_BATCH: Final = 50_000

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


def run_retention(
    session_factory: sessionmaker[Session],
    *,
    now: datetime,
    retention_days: int,
    batch_size: int = DEFAULT_BATCH,
) -> RetentionResult:
    """Expire everything older than ``retention_days`` before ``now``, batch by batch."""
    cutoff = retention_cutoff(now=now, retention_days=retention_days)
    if cutoff is None:
        return RetentionResult(cutoff=None, predictions=0, pending_labels=0)
    with session_factory() as session:
        model_ids = list(session.scalars(select(Model.id).order_by(Model.id)))
    predictions = 0
    for model_id in model_ids:
        while True:
            with session_factory() as session:
                deleted = expire_predictions_batch(
                    session, model_id=model_id, before=cutoff, limit=batch_size
                )
                session.commit()
            predictions += deleted
            if deleted < batch_size:
                break
    with session_factory() as session:
        pending = expire_pending_labels(session, before=cutoff)
        session.commit()
    return RetentionResult(cutoff=cutoff, predictions=predictions, pending_labels=pending)
