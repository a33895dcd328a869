"""The change record: which windows of a model changed when (``window_changes``).

Every batch that inserts predictions or changes labels records, in its own transaction and
stamped with the ``changed_at`` it gives the rows, one row per window it touched. The
scheduler's change scan reads these records instead of ``predictions`` (one index of a small
table, not one per day partition) and deletes those it can never read again. Why no change
is missed: ``docs/reference/scheduler.md`` ("Finding changed windows").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection, bindparam, delete, func, select, text
from sqlalchemy.orm import Session

from calmon.db.backend import WINDOW_START_SQL, backend
from calmon.db.models import Model, UTCDateTime, WindowChange
from calmon.timeline import WINDOW_SECONDS, window_starts

_RECORD = text(
    "INSERT INTO window_changes (model_id, changed_at, starts_at)"
    " VALUES (:model_id, :changed_at, :starts_at) ON CONFLICT DO NOTHING"
).bindparams(
    bindparam("changed_at", type_=UTCDateTime()), bindparam("starts_at", type_=UTCDateTime())
)
#: the staged predictions' windows, all of them, or (``{stored}``) those of the rows stored
#: now, bounded to the batch's range so that PostgreSQL reads only its day partitions (``WHERE
#: true``: SQLite reads ``ON`` after a bare ``FROM`` as a join)
_RECORD_STAGED: Final = (
    "INSERT INTO window_changes (model_id, changed_at, starts_at)"
    " SELECT DISTINCT :model_id, :now, {start} FROM (SELECT s.ts FROM calmon_prediction_stage s"
    "{stored}) staged WHERE true ON CONFLICT DO NOTHING"
)
_STORED: Final = (
    " JOIN predictions p"
    " ON p.model_id = :model_id AND p.client_id = s.client_id AND p.ts = s.ts"
    " WHERE p.changed_at = :now AND p.ts >= :lo AND p.ts <= :hi"
)
_TIMES = [bindparam(name, type_=UTCDateTime()) for name in ("now", "lo", "hi")]
_RECORD_STAGED_SQL: Final = {
    (dialect, every): text(
        _RECORD_STAGED.format(start=start, stored="" if every else _STORED)
    ).bindparams(*(_TIMES if not every else _TIMES[:1]))
    for dialect, start in WINDOW_START_SQL.items()
    for every in (True, False)
}


#: the statement that records every window of the staged predictions (parameters
#: ``model_id``, ``now``, ``length``), on PostgreSQL: the all-new insert of a batch runs it in
#: its own statement (:func:`calmon.db.ingest_statements.pg_insert_all_or_fail`)
PG_RECORD_STAGED: Final = _RECORD_STAGED.format(start=WINDOW_START_SQL["postgresql"], stored="")


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
    staged: int,
    stored: int,
    lo: datetime,
    hi: datetime,
    now: datetime,
) -> None:
    """Record the windows of a staged prediction batch of ``staged`` rows (event times from
    ``lo`` to ``hi``) of which ``stored`` were new: all of the batch's windows when every row
    was, else those of the rows stored now (pending labels applied to them are in the same
    windows). The windows are found in the database, from the stage: one statement, no
    per-row work here."""
    if not stored:
        return
    every = stored == staged
    params: dict[str, Any] = {
        "model_id": model.id,
        "now": now,
        "length": WINDOW_SECONDS[model.window],
    }
    if not every:
        params.update(lo=lo, hi=hi)
    connection.execute(_RECORD_STAGED_SQL[backend(connection), every], params)


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


def changes_between(
    session: Session, *, model_id: int, after: datetime, before: datetime
) -> list[tuple[datetime, datetime]]:
    """The (start, changed_at) of a model's change records of the windows starting after
    ``after`` and before ``before``, in that order."""
    rows = session.execute(
        select(WindowChange.starts_at, WindowChange.changed_at)
        .where(
            WindowChange.model_id == model_id,
            WindowChange.starts_at > after,
            WindowChange.starts_at < before,
        )
        .order_by(WindowChange.starts_at, WindowChange.changed_at)
    ).all()
    return [(start, changed_at) for start, changed_at in rows]
