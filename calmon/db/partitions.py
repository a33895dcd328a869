"""Daily partitions of ``predictions`` on PostgreSQL (SQLite keeps one table).

``predictions`` is range-partitioned by ``ts``, one partition per UTC day named
``predictions_yyyymmdd`` (``docs/storage.md``). Partitions are made by the application, not by
an extension: the scheduler's leader makes today's and the next ``AHEAD_DAYS`` days' in its
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
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

from psycopg import sql as pg_sql
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from calmon.db import locks

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
    return datetime.combine(day, time(), tzinfo=UTC)


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
