"""Daily partitions of ``predictions`` on PostgreSQL (SQLite keeps one table).

``predictions`` is range-partitioned by ``ts``, one partition per UTC day named
``predictions_yyyymmdd`` (``docs/reference/storage.md``). Partitions are made by the application,
not by an extension: the scheduler's leader makes today's and the next ``AHEAD_DAYS`` days' in its
hourly upkeep (and ``calmon migrate`` once), and ingestion makes, before inserting a batch, those
of the batch's days that this process has not seen yet (late or back-filled event times), so an
insert never fails for a missing partition.

A partition is made by ``CREATE TABLE … (LIKE predictions …)`` then
``ALTER TABLE predictions ATTACH PARTITION``: attaching takes ``SHARE UPDATE EXCLUSIVE`` on
the parent, which does not conflict with the row locks of concurrent inserts, updates and
reads (``CREATE TABLE … PARTITION OF`` would take ``ACCESS EXCLUSIVE`` and, inside an ingestion
transaction, wait on or block every reader). Makers serialise on a transaction advisory lock
and look again under it, so two processes making the same day do not collide. Everything runs
in the caller's transaction: the partition exists for the batch that needed it, and goes away
with it if the batch rolls back (the insert that then misses it makes it again: see
:func:`forget`).

Expiry is the reverse, also here (:func:`expire_partitions`, called by retention): a day that
ended before the cutoff is detached without holding a lock that ingestion or readers queue
behind, renamed ``expired_predictions_yyyymmdd``, its ids deleted from the registry
``prediction_keys`` in bounded batches whose progress is kept in the table's comment, then
dropped; an interrupted run is continued by the next (``docs/reference/storage.md``, "Retention").
"""

from __future__ import annotations

import enum
import logging
import re
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime, timedelta
from datetime import time as time_of_day
from typing import Any, Final

from psycopg import sql as pg_sql
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from calmon.db import locks
from calmon.db.session import transaction_pooled
from calmon.db.sqlstate import (
    aborted_for_concurrency,
    is_lock_timeout,
    is_statement_timeout,
    sqlstate,
)

#: days after today whose partitions the scheduler makes in advance
AHEAD_DAYS: Final = 7
PREFIX: Final = "predictions_"
_NAME = re.compile(r"^predictions_(\d{8})$")
_DAY: Final = timedelta(days=1)

_ATTACHED = text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
    " WHERE i.inhparent = 'predictions'::regclass"
)
_DAY_TABLES = text(
    "SELECT c.relname, i.inhdetachpending FROM pg_class c"
    " LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = 'predictions'::regclass"
    " WHERE c.relkind = 'r' AND c.relname LIKE 'predictions\\_%'"
    " AND c.relnamespace = current_schema()::regnamespace"
)

logger = logging.getLogger(__name__)

#: days whose partition this process knows to exist, per database (URL without password)
_known: dict[str, set[date]] = {}


def partition_name(day: date) -> str:
    """The name of the partition of ``day``: ``predictions_yyyymmdd``."""
    return f"{PREFIX}{day:%Y%m%d}"


def day_start(day: date) -> datetime:
    """Midnight UTC that starts ``day``."""
    return datetime.combine(day, time_of_day(), tzinfo=UTC)


def utc_day(moment: datetime) -> date:
    """The UTC day of an aware instant."""
    return moment.astimezone(UTC).date()


def _database_key(connection: Connection) -> str:
    return connection.engine.url.render_as_string(hide_password=True)


def attached_days(connection: Connection) -> set[date]:
    """Days that have a partition of ``predictions`` now (names not of the daily form are
    left out)."""
    days = set()
    for (name,) in connection.execute(_ATTACHED):
        match = _NAME.match(name)
        if match:
            days.add(datetime.strptime(match.group(1), "%Y%m%d").date())
    return days


class DayState(enum.Enum):
    """Where the table of a day stands with ``predictions``."""

    #: a partition: queries see its rows
    ATTACHED = "attached"
    #: a ``DETACH … CONCURRENTLY`` that did not finish: new queries no longer see it, and
    #: ``DETACH … FINALIZE`` completes it (one such partition at most)
    DETACH_PENDING = "detach pending"
    #: a table of its own, no longer a partition
    DETACHED = "detached"


def day_tables(connection: Connection) -> dict[date, DayState]:
    """Every table of the daily form ``predictions_yyyymmdd``, by day, and its state."""
    tables = {}
    for name, pending in connection.execute(_DAY_TABLES):
        match = _NAME.match(name)
        if match:
            day = datetime.strptime(match.group(1), "%Y%m%d").date()
            tables[day] = (
                DayState.DETACHED
                if pending is None
                else DayState.DETACH_PENDING
                if pending
                else DayState.ATTACHED
            )
    return tables


def _create(connection: Connection, day: date) -> None:
    """Make and attach the partition of ``day`` (the caller holds the maker's lock and has
    seen that it is missing)."""
    name = pg_sql.Identifier(partition_name(day))
    statements = [
        pg_sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (LIKE predictions INCLUDING DEFAULTS"
            " INCLUDING CONSTRAINTS)"
        ).format(name),
        pg_sql.SQL(
            "ALTER TABLE predictions ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})"
        ).format(
            name,
            pg_sql.Literal(day_start(day).isoformat()),
            pg_sql.Literal(day_start(day + _DAY).isoformat()),
        ),
    ]
    driver: Any = connection.connection.driver_connection
    for statement in statements:
        connection.exec_driver_sql(statement.as_string(driver))


def ensure_days(connection: Connection, days: Iterable[date]) -> list[date]:
    """Make the partitions of ``days`` that do not exist yet; returns the days made.

    Days this process already knows cost no statement; otherwise one advisory lock, one look at
    the catalogue and one ``CREATE`` + ``ATTACH`` per missing day. A no-op off PostgreSQL.
    """
    if connection.dialect.name != "postgresql":
        return []
    key = _database_key(connection)
    known = _known.setdefault(key, set())
    wanted = set(days) - known
    if not wanted:
        return []
    locks.wait_for(connection, locks.PARTITION)
    attached = attached_days(connection)
    made = sorted(wanted - attached)
    for day in made:
        _create(connection, day)
    known.update(wanted)
    return made


def forget(connection: Connection) -> None:
    """Forget what this process knows of the partitions of ``connection``'s database: an
    insert found a day missing (the batch that made it rolled back, or the schema was rebuilt
    or the day dropped), so the next :func:`ensure_days` looks again."""
    _known.pop(_database_key(connection), None)


def ensure_partitions(
    session: Session, *, now: datetime, ahead_days: int = AHEAD_DAYS
) -> list[date]:
    """Make the partitions of today (UTC, at ``now``) and the next ``ahead_days`` days that
    are missing; returns the days made. The caller commits. A no-op off PostgreSQL."""
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        return []
    today = utc_day(now)
    return ensure_days(connection, [today + k * _DAY for k in range(ahead_days + 1)])


def prepare_partitions(engine: Engine, *, now: datetime | None = None) -> list[date]:
    """:func:`ensure_partitions` in a transaction of its own, for commands that start
    (``calmon migrate``, ``calmon serve``, ``calmon scheduler``), so that a new database takes
    the coming days' predictions before the first hourly upkeep. A database error is logged
    and ignored: ingestion makes missing days itself. A no-op off PostgreSQL."""
    if engine.dialect.name != "postgresql":
        return []
    try:
        with Session(engine) as session:
            made = ensure_partitions(session, now=now or datetime.now(UTC))
            session.commit()
    except SQLAlchemyError:
        logger.warning("day partitions not prepared", exc_info=True)
        return []
    return made


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
