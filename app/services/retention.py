"""Expiry of old data: predictions whose event time is older than the retention period.

PostgreSQL expires whole day partitions (detach and rename, delete their ids from the registry
``prediction_keys`` in bounded batches, drop), making the coming days' partitions first;
SQLite deletes rows in bounded batches. Pending labels and ended windows past the cutoff go too.
Nothing holds locks or a snapshot for long, and an interrupted run is continued by the next.
The steps, batch sizes and budgets are in ``docs/storage.md`` ("Retention").
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from psycopg import sql as pg_sql
from sqlalchemy import bindparam, delete, select, text, union
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import Model, UTCDateTime, WindowResult, WindowScores, WindowState
from app.db.partitions import (
    attached_days,
    day_start,
    ensure_partitions,
    partition_name,
)
from app.timeline import window_length

DEFAULT_BATCH: Final = 50_000
#: heap pages of an expired day partition whose ids one registry batch deletes (some 50,000)
KEY_BATCH_PAGES: Final = 800
#: seconds of registry deletes one retention run spends at most (then the next run goes on)
KEY_EXPIRY_SECONDS: Final = 300.0
_PROGRESS_TEXT: Final = "calmon: registry ids deleted below heap page "
_PROGRESS = re.compile(r"^calmon: registry ids deleted below heap page (\d+)$")
#: how long detaching a partition waits for its lock before giving up until the next run
DETACH_LOCK_TIMEOUT: Final = "5s"
EXPIRED_PREFIX: Final = "expired_"
_EXPIRED = re.compile(r"^expired_predictions_\d{8}$")
_DAY: Final = timedelta(days=1)
#: windows of a model expired by one batch (three DELETEs with this many bound instants)
WINDOW_BATCH: Final = 500
#: SQLite: seconds between two prediction batches, longer than the longest sleep of SQLite's
#: busy handler (0.1 s), so a write waiting for the lock gets it between them
SQLITE_BATCH_PAUSE: Final = 0.1

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


def _driver_execute(session: Session, statement: pg_sql.Composable, params: Any = None) -> int:
    """Run a composed statement (identifiers quoted by psycopg) on the session's connection;
    returns its row count."""
    connection = session.connection()
    driver: Any = connection.connection.driver_connection
    result = connection.exec_driver_sql(statement.as_string(driver), params)
    return int(result.rowcount)


def detach_expired_days(session: Session, *, before: datetime) -> list[str]:
    """PostgreSQL: detach the day partitions that ended at or before ``before`` and rename
    them ``expired_predictions_yyyymmdd``; returns the new names. The caller commits soon:
    detaching holds ``ACCESS EXCLUSIVE`` on ``predictions`` until then (``DETACH_LOCK_TIMEOUT``
    bounds the wait for it)."""
    connection = session.connection()
    days = sorted(day for day in attached_days(connection) if day_start(day) + _DAY <= before)
    if not days:
        return []
    session.execute(
        text("SELECT set_config('lock_timeout', :timeout, true)"), {"timeout": DETACH_LOCK_TIMEOUT}
    )
    names = []
    for day in days:
        name = partition_name(day)
        _driver_execute(
            session,
            pg_sql.SQL("ALTER TABLE predictions DETACH PARTITION {}").format(
                pg_sql.Identifier(name)
            ),
        )
        _driver_execute(
            session,
            pg_sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                pg_sql.Identifier(name), pg_sql.Identifier(EXPIRED_PREFIX + name)
            ),
        )
        names.append(EXPIRED_PREFIX + name)
    return names


def expired_tables(session: Session) -> list[str]:
    """PostgreSQL: detached day partitions still to drop (``expired_predictions_yyyymmdd``)."""
    names = session.scalars(
        text(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'expired_%'"
            " AND relnamespace = current_schema()::regnamespace ORDER BY relname"
        )
    )
    return [name for name in names if _EXPIRED.match(name)]


def table_pages(session: Session, name: str) -> int:
    """Heap pages of table ``name``."""
    return int(
        session.execute(
            text(
                "SELECT pg_relation_size(to_regclass(:name)) / current_setting('block_size')::int"
            ),
            {"name": name},
        ).scalar_one()
    )


def expire_keys_batch(session: Session, *, table: str, first_page: int, pages: int) -> int:
    """Delete from the registry the ids of the rows of ``table`` (an expired day) that lie in
    heap pages ``[first_page, first_page + pages)``; returns how many."""
    return _driver_execute(
        session,
        pg_sql.SQL(
            "DELETE FROM prediction_keys k USING {} p"
            " WHERE p.ctid >= %(lo)s::tid AND p.ctid < %(hi)s::tid"
            " AND k.model_id = p.model_id AND k.client_id = p.client_id AND k.ts = p.ts"
        ).format(pg_sql.Identifier(table)),
        {"lo": f"({first_page},0)", "hi": f"({first_page + pages},0)"},
    )


def drop_expired_table(session: Session, *, table: str) -> None:
    """Drop an expired day (one statement, whatever its size)."""
    _driver_execute(session, pg_sql.SQL("DROP TABLE {}").format(pg_sql.Identifier(table)))


def _progress(session: Session, table: str) -> int:
    """Heap pages of an expired day whose ids are already out of the registry (kept in the
    table's comment, written with each batch)."""
    comment = session.execute(
        text("SELECT obj_description(to_regclass(:name), 'pg_class')"), {"name": table}
    ).scalar_one()
    match = _PROGRESS.match(comment or "")
    return int(match.group(1)) if match else 0


def _set_progress(session: Session, table: str, page: int) -> None:
    _driver_execute(
        session,
        pg_sql.SQL("COMMENT ON TABLE {} IS {}").format(
            pg_sql.Identifier(table), pg_sql.Literal(f"{_PROGRESS_TEXT}{page}")
        ),
    )


def expire_partitions(
    session_factory: sessionmaker[Session],
    *,
    before: datetime,
    pages: int = KEY_BATCH_PAGES,
    budget: float = KEY_EXPIRY_SECONDS,
) -> int:
    """PostgreSQL: expire every day partition that ended by ``before`` (and go on with those
    an earlier run detached); returns how many registry ids were deleted (the predictions of
    the days dropped, when every day is finished).

    Registry batches stop once ``budget`` seconds have passed (at least one batch runs), so a
    run stays short whatever the size of a day; each batch records how far it got in the
    table's comment, in its own transaction, and the next run goes on from there. A detach
    that cannot get its lock within ``DETACH_LOCK_TIMEOUT`` is left to the next run.
    """
    began = time.monotonic()
    with session_factory() as session:
        try:
            detach_expired_days(session, before=before)
            session.commit()
        except OperationalError:
            session.rollback()
        tables = expired_tables(session)
        session.commit()
    removed = 0
    for table in tables:
        with session_factory() as session:
            total = table_pages(session, table)
            first = _progress(session, table)
        while first < total:
            with session_factory() as session:
                removed += expire_keys_batch(session, table=table, first_page=first, pages=pages)
                first += pages
                _set_progress(session, table, first)
                session.commit()
            if time.monotonic() - began >= budget:
                return removed
        with session_factory() as session:
            drop_expired_table(session, table=table)
            session.commit()
    return removed


def run_retention(
    session_factory: sessionmaker[Session],
    *,
    now: datetime,
    retention_days: int,
    batch_size: int = DEFAULT_BATCH,
    window_batch: int = WINDOW_BATCH,
    key_seconds: float = KEY_EXPIRY_SECONDS,
) -> RetentionResult:
    """Make the coming days' partitions (PostgreSQL), then expire everything older than
    ``retention_days`` before ``now``, batch by batch: predictions (whole days on PostgreSQL,
    ``batch_size`` rows per statement on SQLite), windows (``window_batch``), pending labels."""
    with session_factory() as session:
        ensure_partitions(session, now=now)
        session.commit()
        partitioned = session.get_bind().dialect.name == "postgresql"
    cutoff = retention_cutoff(now=now, retention_days=retention_days)
    if cutoff is None:
        return RetentionResult(cutoff=None, predictions=0, pending_labels=0)
    with session_factory() as session:
        models = list(session.execute(select(Model.id, Model.window).order_by(Model.id)))
    predictions = windows = 0
    if partitioned:
        predictions = expire_partitions(session_factory, before=cutoff, budget=key_seconds)
    for model_id, window in models:
        while not partitioned:
            with session_factory() as session:
                deleted = expire_predictions_batch(
                    session, model_id=model_id, before=cutoff, limit=batch_size
                )
                session.commit()
            predictions += deleted
            if deleted < batch_size:
                break
            time.sleep(SQLITE_BATCH_PAUSE)
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
