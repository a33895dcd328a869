"""The change record: which windows of a model changed when (``window_changes``).

Every batch that inserts predictions or changes labels records, in its own transaction and
stamped with the ``changed_at`` it gives the rows, one row per window it touched. The
scheduler's change scan reads these records instead of ``predictions`` (one index of a small
table, not one per day partition) and deletes those it can never read again. Why no change
is missed: ``docs/scheduler.md`` ("Finding changed windows").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Connection, bindparam, delete, func, select, text
from sqlalchemy.orm import Session

from app.db.models import Model, UTCDateTime, WindowChange
from app.timeline import window_starts

_RECORD = text(
    "INSERT INTO window_changes (model_id, changed_at, starts_at)"
    " VALUES (:model_id, :changed_at, :starts_at) ON CONFLICT DO NOTHING"
).bindparams(
    bindparam("changed_at", type_=UTCDateTime()), bindparam("starts_at", type_=UTCDateTime())
)
#: event times of the staged predictions stored by this batch (stamped ``now``), bounded to
#: the batch's range so that PostgreSQL reads only its day partitions
_STORED_NOW = (
    text(
        "SELECT DISTINCT s.ts FROM calmon_prediction_stage s JOIN predictions p"
        " ON p.model_id = :model_id AND p.client_id = s.client_id AND p.ts = s.ts"
        " WHERE p.changed_at = :now AND p.ts >= :lo AND p.ts <= :hi"
    )
    .bindparams(
        bindparam("now", type_=UTCDateTime()),
        bindparam("lo", type_=UTCDateTime()),
        bindparam("hi", type_=UTCDateTime()),
    )
    .columns(ts=UTCDateTime())
)


def record_changes(
    connection: Connection, *, model: Model, stamps: Iterable[datetime], now: datetime
) -> None:
    """Record the windows of ``model`` holding the event times ``stamps`` as changed at
    ``now`` (the ``changed_at`` of the rows)."""
    starts = sorted(window_starts(stamps, model.window))
    if starts:
        connection.execute(
            _RECORD,
            [{"model_id": model.id, "changed_at": now, "starts_at": start} for start in starts],
        )


def record_stored_predictions(
    connection: Connection,
    *,
    model: Model,
    stamps: Sequence[datetime],
    stored: int,
    now: datetime,
) -> None:
    """Record the windows of a prediction batch (event times ``stamps``, staged) of which
    ``stored`` rows were new: all of the batch's windows when every row was, else those of the
    rows stored now (pending labels applied to them are in the same windows)."""
    if not stored:
        return
    if stored < len(stamps):
        bounds = {"model_id": model.id, "now": now, "lo": min(stamps), "hi": max(stamps)}
        stamps = connection.execute(_STORED_NOW, bounds).scalars().all()
    record_changes(connection, model=model, stamps=stamps, now=now)


def changed_windows(
    session: Session, *, model_id: int, since: datetime | None
) -> dict[datetime, datetime]:
    """The windows of a model changed at or after ``since`` (ever, when ``None``): start ->
    latest change."""
    query = select(WindowChange.starts_at, func.max(WindowChange.changed_at)).where(
        WindowChange.model_id == model_id
    )
    if since is not None:
        query = query.where(WindowChange.changed_at >= since)
    return dict(session.execute(query.group_by(WindowChange.starts_at)).all())


def forget_changes(session: Session, *, model_id: int, before: datetime) -> None:
    """Delete the records of a model's changes before ``before``."""
    session.execute(
        delete(WindowChange).where(
            WindowChange.model_id == model_id, WindowChange.changed_at < before
        )
    )
