"""Database errors that calmon tells apart, and how to read them: PostgreSQL's SQLSTATEs and
SQLite's busy code.

A transaction aborted for a concurrent one (a serialisation failure or a deadlock) stored
nothing and succeeds when run again; a lock wait beyond ``lock_timeout`` (PostgreSQL) or the
busy timeout (SQLite) is contention, not an outage. None of them says the database is down.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from sqlalchemy.exc import DBAPIError

#: a repeatable-read transaction wrote or locked a row that changed after its snapshot
SERIALIZATION_FAILURE: Final = "40001"
#: PostgreSQL aborted this transaction to break a lock cycle
DEADLOCK_DETECTED: Final = "40P01"
#: a lock wait outlasted ``lock_timeout``
LOCK_NOT_AVAILABLE: Final = "55P03"
#: a statement ran past ``statement_timeout`` (or was cancelled)
QUERY_CANCELED: Final = "57014"
#: a row would break a unique index
UNIQUE_VIOLATION: Final = "23505"
#: a row would break a check constraint (a partition's bounds among them)
CHECK_VIOLATION: Final = "23514"
#: SQLite's primary result code of a lock wait beyond the busy timeout (the low byte of its
#: extended codes: ``SQLITE_BUSY_SNAPSHOT``, ``SQLITE_BUSY_TIMEOUT`` …)
SQLITE_BUSY: Final = 5
#: the transaction was aborted for a concurrent one: run it again
RETRYABLE: Final = frozenset({SERIALIZATION_FAILURE, DEADLOCK_DETECTED})


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error raised through SQLAlchemy (or psycopg), else None."""
    origin = exc.orig if isinstance(exc, DBAPIError) else exc
    state = getattr(origin, "sqlstate", None)
    return state if isinstance(state, str) else None


def aborted_for_concurrency(exc: BaseException) -> bool:
    """Whether ``exc`` aborted its transaction for a concurrent one (serialisation failure
    or deadlock): nothing of it was stored, and running it again is safe."""
    return sqlstate(exc) in RETRYABLE


def is_lock_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a lock wait that outlasted ``lock_timeout``."""
    return sqlstate(exc) == LOCK_NOT_AVAILABLE


def is_statement_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement cancelled by ``statement_timeout`` (or a cancel request)."""
    return sqlstate(exc) == QUERY_CANCELED


def is_sqlite_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked": another connection held the write lock
    for longer than the busy timeout (contention, not an outage)."""
    origin = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(origin, "sqlite_errorcode", None)
    return isinstance(origin, sqlite3.Error) and code is not None and code & 0xFF == SQLITE_BUSY
