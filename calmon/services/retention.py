"""Expiry of old data: predictions whose event time is older than the retention period.

PostgreSQL expires whole day partitions (detach and rename, delete their ids from the registry
``prediction_keys`` in bounded batches, drop), making the coming days' partitions first;
SQLite deletes rows in bounded batches. Pending labels and ended windows past the cutoff go too.
Nothing holds locks for long (a detach waits for open windows without holding any that
ingestion or readers queue behind, a minute at most), and an interrupted run is continued by
the next.
The steps, batch sizes and budgets are in ``docs/storage.md`` ("Retention").
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Final

from psycopg import sql as pg_sql
from sqlalchemy import bindparam, delete, select, text, union
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from calmon.db.backend import partitions_predictions
from calmon.db.models import (
    Model,
    UTCDateTime,
    WindowChange,
    WindowResult,
    WindowScores,
    WindowState,
)
from calmon.db.partitions import (
    DayState,
    day_start,
    day_tables,
    ensure_partitions,
    partition_name,
)
from calmon.db.session import transaction_pooled
from calmon.db.sqlstate import (
    aborted_for_concurrency,
    is_lock_timeout,
    is_statement_timeout,
    sqlstate,
)
from calmon.services.web_sessions import expire_web_sessions
from calmon.services.window_locks import lock_model_for_scan
from calmon.timeline import window_length

logger = logging.getLogger(__name__)

DEFAULT_BATCH: Final = 50_000
#: heap pages of an expired day partition whose ids one registry batch deletes (some 50,000)
KEY_BATCH_PAGES: Final = 800
#: seconds of registry deletes one retention run spends at most (then the next run goes on)
KEY_EXPIRY_SECONDS: Final = 300.0
_PROGRESS_TEXT: Final = "calmon: registry ids deleted below heap page "
_PROGRESS = re.compile(r"^calmon: registry ids deleted below heap page (\d+)$")
#: how long one detach statement waits for a lock, or for a transaction to end, per attempt
DETACH_LOCK_TIMEOUT: Final = "100ms"
#: how long one detach statement runs at most
DETACH_STATEMENT_TIMEOUT: Final = "300ms"
#: seconds of detach attempts one retention run spends at most (then the next run goes on)
DETACH_WAIT_SECONDS: Final = 60.0
#: pauses between two detach attempts: the first, doubled each time up to the last
DETACH_FIRST_PAUSE: Final = 0.05
DETACH_MAX_PAUSE: Final = 1.0
EXPIRED_PREFIX: Final = "expired_"
_EXPIRED = re.compile(r"^expired_predictions_\d{8}$")
_DAY: Final = timedelta(days=1)
#: windows of a model expired by one batch (three DELETEs with this many bound instants)
WINDOW_BATCH: Final = 500
#: the tables of a window's results, in the one order every writer of them takes their rows
#: (a window's computation replaces results, then scores, then updates its state)
WINDOW_TABLES: Final = (WindowResult, WindowScores, WindowState)
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


def expire_windows_batch(session: Session, *, model: Model, before: datetime, limit: int) -> int:
    """Delete at most ``limit`` windows of ``model`` that ended at or before ``before``: their
    results, scores and state, and the change records of every such window (so that no scan
    finds them again). Returns how many windows (distinct starts) were deleted; fewer than
    ``limit`` means none is left.

    The model lock is taken first (PostgreSQL; it waits for the model's windows being
    computed, and none starts until this transaction ends), then the tables are written in the
    order a window's computation writes them (results, scores, state): retention and
    computation never wait for each other's rows in opposite orders.
    """
    model_id = model.id
    last_start = before - window_length(model.window)
    lock_model_for_scan(session, model=model)
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


def _driver_execute(session: Session, statement: pg_sql.Composable, params: Any = None) -> int:
    """Run a composed statement (identifiers quoted by psycopg) on the session's connection;
    returns its row count."""
    connection = session.connection()
    driver: Any = connection.connection.driver_connection
    result = connection.exec_driver_sql(statement.as_string(driver), params)
    return int(result.rowcount)


def _attempts(deadline: float) -> Iterator[None]:
    """Yield at once, then again after pauses that double from ``DETACH_FIRST_PAUSE`` to
    ``DETACH_MAX_PAUSE``, as long as the pause ends before ``deadline`` (``time.monotonic``)."""
    pause = DETACH_FIRST_PAUSE
    yield
    while time.monotonic() + pause < deadline:
        time.sleep(pause)
        yield
        pause = min(2 * pause, DETACH_MAX_PAUSE)


def _detach_contended(exc: OperationalError, *, day: date, step: str) -> None:
    """Return when ``exc`` is contention a later attempt may get past (a lock or statement
    timeout, a concurrency abort), logged at debug; log any other operational error (the
    server went away, ran out of something) as a warning and raise it: retention stops and
    the scheduler reports the run as failed."""
    if is_lock_timeout(exc) or is_statement_timeout(exc) or aborted_for_concurrency(exc):
        logger.debug(
            "partition detach contended; tried again",
            extra={"partition": partition_name(day), "step": step, "sqlstate": sqlstate(exc)},
        )
        return
    logger.warning(
        "partition detach failed",
        extra={"partition": partition_name(day), "step": step, "sqlstate": sqlstate(exc)},
    )
    raise exc


def _set_detach_timeouts(session: Session, *, local: bool) -> None:
    session.execute(
        text(
            "SELECT set_config('lock_timeout', :lock, :local),"
            " set_config('statement_timeout', :statement, :local)"
        ),
        {"lock": DETACH_LOCK_TIMEOUT, "statement": DETACH_STATEMENT_TIMEOUT, "local": local},
    )


def _detach_concurrently(session_factory: sessionmaker[Session], *, day: date) -> DayState:
    """One ``DETACH PARTITION … CONCURRENTLY`` of ``day`` (it runs outside any transaction);
    returns where the day stands after it: detached, still attached (its first step did not
    get its locks in time) or detach pending (it did not see the transactions that might read
    the partition end in time)."""
    with session_factory() as session:
        connection = session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        # Behind a transaction pooler each statement may run on another server session: a
        # session-level timeout would stay on one that another client gets next. The detach
        # then runs under the server's own timeouts.
        bounded = not transaction_pooled(connection.engine)
        if bounded:
            _set_detach_timeouts(session, local=False)
        try:
            _driver_execute(
                session,
                pg_sql.SQL("ALTER TABLE predictions DETACH PARTITION {} CONCURRENTLY").format(
                    pg_sql.Identifier(partition_name(day))
                ),
            )
        except OperationalError as exc:
            _detach_contended(exc, day=day, step="concurrently")
        finally:
            if bounded:
                session.execute(text("RESET lock_timeout"))
                session.execute(text("RESET statement_timeout"))
        return day_tables(session.connection()).get(day, DayState.DETACHED)


def _pass_snapshot(session_factory: sessionmaker[Session]) -> None:
    """Take and end a transaction id in a transaction of its own. A ``FINALIZE`` attempt takes
    one (its ``ACCESS EXCLUSIVE`` lock is logged) and keeps it until its transaction ends;
    were it the next id after the snapshot, every transaction starting while it is held
    would count as no newer than the snapshot, and the attempts would wait for them too."""
    with session_factory() as session:
        session.execute(text("SELECT pg_current_xact_id()"))
        session.commit()


def _finish_detach(session_factory: sessionmaker[Session], *, day: date, deadline: float) -> bool:
    """Complete the detach of ``day`` (``DETACH … FINALIZE`` when it is pending) and rename it
    ``expired_predictions_yyyymmdd``, in one transaction; returns False when that could not be
    done before ``deadline``.

    ``FINALIZE`` waits for every transaction whose snapshot is not newer than its own. The
    transaction is ``REPEATABLE READ``, so every attempt has the snapshot taken at its start:
    the windows that start while it waits are newer, and windows computed back to back cannot
    put it off for ever (a new snapshot at each attempt would wait for them too). Each attempt
    runs in a savepoint under the short timeouts: what it locks (``SHARE UPDATE EXCLUSIVE`` on
    ``predictions``, ``ACCESS EXCLUSIVE`` on the partition) it gives back as soon as it fails.
    """
    name = partition_name(day)
    with session_factory() as session:
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        state = day_tables(session.connection()).get(day)
        if state is None or state is DayState.ATTACHED:
            return False
        if state is DayState.DETACH_PENDING:
            _pass_snapshot(session_factory)
        _set_detach_timeouts(session, local=True)
        for _ in _attempts(deadline):
            try:
                with session.begin_nested():
                    if state is DayState.DETACH_PENDING:
                        _driver_execute(
                            session,
                            pg_sql.SQL(
                                "ALTER TABLE predictions DETACH PARTITION {} FINALIZE"
                            ).format(pg_sql.Identifier(name)),
                        )
                    _driver_execute(
                        session,
                        pg_sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                            pg_sql.Identifier(name), pg_sql.Identifier(EXPIRED_PREFIX + name)
                        ),
                    )
            except OperationalError as exc:
                _detach_contended(exc, day=day, step="finalize")
                continue
            session.commit()
            return True
    return False


def _detach_day(
    session_factory: sessionmaker[Session], *, day: date, state: DayState, deadline: float
) -> bool:
    """Detach ``day`` (in ``state``) and rename it; False when that could not be done before
    ``deadline``."""
    for _ in _attempts(deadline):
        if state is DayState.ATTACHED:
            state = _detach_concurrently(session_factory, day=day)
        if state is not DayState.ATTACHED:
            return _finish_detach(session_factory, day=day, deadline=deadline)
    return False


def detach_expired_days(
    session_factory: sessionmaker[Session],
    *,
    before: datetime,
    wait: float = DETACH_WAIT_SECONDS,
) -> list[str]:
    """PostgreSQL: detach the day partitions that ended at or before ``before`` and rename
    them ``expired_predictions_yyyymmdd``; returns the new names, oldest day first.

    A detach never holds a lock that ingestion or readers queue behind: ``DETACH PARTITION …
    CONCURRENTLY`` takes ``SHARE UPDATE EXCLUSIVE`` on ``predictions``, then waits, holding
    nothing, for the transactions that might read the partition (a long window computation);
    every lock wait gives up after ``DETACH_LOCK_TIMEOUT`` and is tried again after a pause.
    The run waits ``wait`` seconds at most in all; a day it could not finish is left (attached,
    or detach pending) to the next run, which also completes a pending detach, and renames a
    day detached but not renamed, first.
    """
    deadline = time.monotonic() + wait
    with session_factory() as session:
        tables = day_tables(session.connection())
    order = {DayState.DETACH_PENDING: 0, DayState.DETACHED: 1, DayState.ATTACHED: 2}
    due = sorted(
        (
            (order[state], day, state)
            for day, state in tables.items()
            if state is DayState.DETACH_PENDING or day_start(day) + _DAY <= before
        ),
    )
    names = []
    for _, day, state in due:
        if not _detach_day(session_factory, day=day, state=state, deadline=deadline):
            with session_factory() as session:
                left = day_tables(session.connection()).get(day)
            logger.warning(
                "day partition not detached in time; the next retention run goes on",
                extra={
                    "partition": partition_name(day),
                    "state": left.value if left else None,
                    "seconds": wait,
                },
            )
            break
        names.append(EXPIRED_PREFIX + partition_name(day))
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
    detach_wait: float = DETACH_WAIT_SECONDS,
) -> int:
    """PostgreSQL: expire every day partition that ended by ``before`` (and go on with those
    an earlier run detached); returns how many registry ids were deleted (the predictions of
    the days dropped, when every day is finished).

    Detaching waits ``detach_wait`` seconds at most (:func:`detach_expired_days`); a day not
    detached by then is left to the next run. Registry batches stop once ``budget`` seconds
    have passed (at least one batch runs), so a run stays short whatever the size of a day;
    each batch records how far it got in the table's comment, in its own transaction, and the
    next run goes on from there.
    """
    began = time.monotonic()
    detach_expired_days(session_factory, before=before, wait=detach_wait)
    with session_factory() as session:
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
        models = list(session.scalars(select(Model).order_by(Model.id)))
    predictions = windows = 0
    if partitioned:
        predictions = expire_partitions(session_factory, before=cutoff, budget=key_seconds)
    for model in models:
        while not partitioned:
            with session_factory() as session:
                deleted = expire_predictions_batch(
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
        pending = expire_pending_labels(session, before=cutoff)
        session.commit()
    return RetentionResult(
        cutoff=cutoff, predictions=predictions, pending_labels=pending, windows=windows
    )
