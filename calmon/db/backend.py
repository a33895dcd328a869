"""What differs between the two databases calmon runs on, each difference behind one name.

PostgreSQL is the production store: any number of API and scheduler processes share it,
predictions live in daily partitions, windows are claimed with advisory locks and rows are
read as binary arrays. SQLite is the zero-set-up default: one file, one writer at a time,
instants kept as text. Services and the scheduler ask these functions what the database can
do; none of them reads the dialect's name.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from sqlalchemy import BigInteger, Connection, Engine, Integer, Table, cast, extract, func, literal
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Insert

Backend = Literal["postgresql", "sqlite"]
Bind = Session | Connection | Engine

#: per backend, SQL text: the start of the window of ``:length`` seconds holding ``ts`` (at or
#: after the epoch), as the table stores instants (``date_bin`` works in integer
#: microseconds: a third of the CPU of ``extract(epoch …)``, which is ``numeric``)
WINDOW_START_SQL: Final[dict[Backend, str]] = {
    "postgresql": "date_bin(make_interval(secs => :length), ts, TIMESTAMPTZ 'epoch')",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%S.000000',"
    " CAST(strftime('%s', substr(ts, 1, 19)) AS INTEGER) / :length * :length, 'unixepoch')",
}


def backend(bind: Bind) -> Backend:
    """Which of the two databases ``bind`` (a session, connection or engine) talks to."""
    dialect = (bind.get_bind() if isinstance(bind, Session) else bind).dialect.name
    if dialect == "postgresql":
        return "postgresql"
    if dialect == "sqlite":
        return "sqlite"
    raise ValueError(f"unsupported database: {dialect}")


def single_writer(bind: Bind) -> bool:
    """Whether one transaction at a time may write (SQLite): long work must not hold the
    write lock, and one process alone computes windows."""
    return backend(bind) == "sqlite"


def has_advisory_locks(bind: Bind) -> bool:
    """Whether transactions can take advisory locks (PostgreSQL), which claim windows and
    order model creations; SQLite serialises writing transactions whole instead."""
    return backend(bind) == "postgresql"


def has_lateral_joins(bind: Bind) -> bool:
    """Whether a subquery in ``FROM`` may refer to the tables before it (PostgreSQL's
    ``LATERAL``): the latest row of each of many keys is then one descending index probe
    each (``ORDER BY … DESC LIMIT 1``). SQLite plans the correlated ``max()`` that way
    itself; PostgreSQL evaluates such a ``max()`` inside a join condition once per candidate
    row, on both sides of a hash join."""
    return backend(bind) == "postgresql"


def partitions_predictions(bind: Bind) -> bool:
    """Whether predictions are stored in daily partitions (PostgreSQL): ingestion reads
    only the partitions of a batch's days and retention drops whole days."""
    return backend(bind) == "postgresql"


def sends_binary_arrays(bind: Bind) -> bool:
    """Whether a column can be read as one binary array (PostgreSQL's ``array_send``)
    instead of a Python tuple per row."""
    return backend(bind) == "postgresql"


def insert_ignoring_duplicates(bind: Bind, table: type[Any] | Table) -> Insert:
    """``INSERT … ON CONFLICT DO NOTHING`` into ``table`` (a mapped class or a table)."""
    dialect_insert = pg_insert if backend(bind) == "postgresql" else sqlite_insert
    return dialect_insert(table).on_conflict_do_nothing()


def bytewise(bind: Bind, column: Any) -> Any:
    """``column`` compared byte by byte (PostgreSQL's ``C`` collation; SQLite's default), so
    text sorts alike on both."""
    return column.collate("C") if backend(bind) == "postgresql" else column


def _whole_seconds(column: Any) -> Any:
    """SQLite: the instant's text cut to whole seconds ('YYYY-MM-DD HH:MM:SS'), because
    ``strftime('%s')`` rounds fractions to the millisecond and would carry 23:59:59.9996 into
    the next second (and window)."""
    return func.substr(column, 1, 19)


def window_start_seconds(bind: Bind, column: Any, length: int) -> Any:
    """SQL: the epoch second at which the window of ``length`` seconds holding the instant
    ``column`` starts."""
    if backend(bind) == "postgresql":
        return cast(func.floor(extract("epoch", column) / length) * length, BigInteger)
    seconds = cast(func.strftime("%s", _whole_seconds(column)), Integer)
    return seconds - ((seconds % length) + length) % length


def epoch_microseconds(bind: Bind, column: Any) -> Any:
    """SQL: the instant ``column`` in exact microseconds since the epoch."""
    if backend(bind) == "postgresql":
        return cast(extract("epoch", column) * 1_000_000, BigInteger)
    # SQLite keeps the instant as text 'YYYY-MM-DD HH:MM:SS.ffffff'.
    whole = cast(func.strftime("%s", _whole_seconds(column)), Integer) * 1_000_000
    return whole + cast(func.substr(column, 21, 6), Integer)


def lengths_before(bind: Bind, start: Any, end: Any, count: int) -> Any:
    """SQL: the instant ``count`` lengths of ``end - start`` before ``start`` (after it for a
    negative ``count``), exact to the microsecond and comparable with stored instants
    (PostgreSQL: interval arithmetic; SQLite: the same 'YYYY-MM-DD HH:MM:SS.ffffff' text,
    for instants after 1970)."""
    if backend(bind) == "postgresql":
        return start - literal(count, Integer) * (end - start)
    first = epoch_microseconds(bind, start)
    micros = first - count * (epoch_microseconds(bind, end) - first)
    seconds = func.strftime("%Y-%m-%d %H:%M:%S", micros / 1_000_000, "unixepoch")
    return seconds.concat(func.printf(".%06d", micros % 1_000_000))
