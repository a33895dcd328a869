"""PostgreSQL error codes (SQLSTATE) that calmon tells apart, and how to read them.

A transaction aborted for a concurrent one (a serialisation failure or a deadlock) stored
nothing and succeeds when run again; a lock wait beyond ``lock_timeout`` is contention, not an
outage. Neither says the database is down.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy.exc import DBAPIError

#: a repeatable-read transaction wrote or locked a row that changed after its snapshot
SERIALIZATION_FAILURE: Final = "40001"
#: PostgreSQL aborted this transaction to break a lock cycle
DEADLOCK_DETECTED: Final = "40P01"
#: a lock wait outlasted ``lock_timeout``
LOCK_NOT_AVAILABLE: Final = "55P03"
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
