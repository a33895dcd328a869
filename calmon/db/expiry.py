"""The statements that delete expired rows: predictions of the one ``predictions`` table
(SQLite; PostgreSQL drops whole day partitions, :func:`calmon.db.partitions.expire_partitions`),
pending labels, and a model's ended windows. Each deletes a bounded batch in the caller's
transaction; the retention service decides what expires and when, and takes the locks first
(``docs/reference/storage.md``, "Retention").
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlalchemy import bindparam, delete, select, text, union
from sqlalchemy.orm import Session

from calmon.db.models import UTCDateTime, WindowChange, WindowResult, WindowScores, WindowState

#: the tables of a window's results, in the one order every writer of them takes their rows
#: (a window's computation replaces results, then scores, then updates its state)
WINDOW_TABLES: Final = (WindowResult, WindowScores, WindowState)

_BEFORE = bindparam("before", type_=UTCDateTime())
_DELETE_PREDICTIONS = text(
    "DELETE FROM predictions WHERE model_id = :model_id AND client_id IN"
    " (SELECT client_id FROM predictions WHERE model_id = :model_id AND ts < :before"
    " LIMIT :limit)"
).bindparams(_BEFORE)
_DELETE_PENDING = text("DELETE FROM pending_labels WHERE received_at < :before").bindparams(_BEFORE)


def delete_predictions_batch(
    session: Session, *, model_id: int, before: datetime, limit: int
) -> int:
    """Delete at most ``limit`` predictions of a model with ``ts < before``; returns how many."""
    result = session.execute(
        _DELETE_PREDICTIONS, {"model_id": model_id, "before": before, "limit": limit}
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def delete_pending_labels(session: Session, *, before: datetime) -> int:
    """Delete pending labels received before ``before``; returns how many."""
    result = session.execute(_DELETE_PENDING, {"before": before})
    return int(result.rowcount)  # type: ignore[attr-defined]


def delete_windows_batch(
    session: Session, *, model_id: int, last_start: datetime, limit: int
) -> int:
    """Delete at most ``limit`` windows of a model that start at or before ``last_start``: their
    results, scores and state, written in :data:`WINDOW_TABLES` order, and the change records
    of every such window (so that no scan finds them again). Returns how many windows
    (distinct starts) were deleted; fewer than ``limit`` means none is left."""
    starts = list(
        session.scalars(
            union(
                *(
                    select(table.starts_at).where(
                        table.model_id == model_id, table.starts_at <= last_start
                    )
                    for table in WINDOW_TABLES
                )
            )
            .order_by("starts_at")
            .limit(limit)
        )
    )
    session.execute(
        delete(WindowChange).where(
            WindowChange.model_id == model_id, WindowChange.starts_at <= last_start
        )
    )
    if not starts:
        return 0
    for table in WINDOW_TABLES:
        session.execute(
            delete(table).where(table.model_id == model_id, table.starts_at.in_(starts))
        )
    return len(starts)
