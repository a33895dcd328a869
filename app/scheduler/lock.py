"""The leader lock: of all scheduler processes sharing a database, only its holder computes.

PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a dedicated autocommit
connection, released by the server when the holder's connection dies; the holder checks that
connection before each window and stops as soon as it fails. SQLite: an exclusive ``flock`` on
``<database>.scheduler.lock``; an in-memory database always leads. See ``docs/scheduler.md``
("The leader lock").
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from typing import IO, Final, Protocol

import psycopg
from sqlalchemy.engine import make_url

logger = logging.getLogger(__name__)

#: single-key advisory lock of the leader ("calmSC")
LEADER_LOCK_KEY: Final = 0x63616C6D5343


class LeaderLock(Protocol):
    """Try to lead; tell whether leadership still holds; give it up."""

    def acquire(self) -> bool:
        """Take the lock if free (True when this process holds it afterwards)."""

    def held(self) -> bool:
        """Whether this process still holds the lock (checks the connection)."""

    def release(self) -> None:
        """Give the lock up (no-op when not held)."""


class PostgresLeaderLock:
    """The advisory lock on a dedicated connection to ``database_url`` (a SQLAlchemy URL)."""

    def __init__(self, database_url: str, *, connect_timeout: int = 2) -> None:
        url = make_url(database_url).set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)
        self._connect_timeout = connect_timeout
        self._connection: psycopg.Connection[tuple[object, ...]] | None = None
        self._held = False

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=self._connect_timeout,
            application_name="calmon-scheduler-lock",
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=2,
            options="-c statement_timeout=5000",
        )

    def acquire(self) -> bool:
        """Take the lock if free; reconnects when the previous connection broke."""
        if self._held and self.held():
            return True
        try:
            if self._connection is None or self._connection.closed:
                self._connection = self._connect()
            row = self._connection.execute(
                "SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK_KEY,)
            ).fetchone()
        except psycopg.Error as exc:
            logger.warning("leader lock: database unreachable: %s", type(exc).__name__)
            self._drop()
            return False
        self._held = bool(row and row[0])
        return self._held

    def held(self) -> bool:
        """True while the lock's connection answers."""
        if not self._held or self._connection is None:
            return False
        try:
            self._connection.execute("SELECT 1")
        except psycopg.Error:
            logger.warning("leader lock: connection lost; leadership given up")
            self._drop()
            return False
        return True

    def release(self) -> None:
        """Unlock and close the connection."""
        if self._connection is not None and self._held:
            with contextlib.suppress(psycopg.Error):
                self._connection.execute("SELECT pg_advisory_unlock(%s)", (LEADER_LOCK_KEY,))
        self._drop()

    def _drop(self) -> None:
        self._held = False
        if self._connection is not None:
            with contextlib.suppress(psycopg.Error):
                self._connection.close()
        self._connection = None


class FileLeaderLock:
    """An exclusive ``flock`` on ``path`` (SQLite databases)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._file: IO[bytes] | None = None

    def acquire(self) -> bool:
        """Take the lock if free."""
        if self._file is not None:
            return True
        handle = open(self._path, "ab")  # noqa: SIM115 (held open while leading)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._file = handle
        return True

    def held(self) -> bool:
        """True while the file is held."""
        return self._file is not None

    def release(self) -> None:
        """Unlock and close the file."""
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class SoleLeader:
    """Leadership of a process that cannot have rivals (in-memory SQLite)."""

    def acquire(self) -> bool:
        """Always leads."""
        return True

    def held(self) -> bool:
        """Always leads."""
        return True

    def release(self) -> None:
        """Nothing to give up."""


def leader_lock(database_url: str, *, connect_timeout: int = 2) -> LeaderLock:
    """The lock that fits the database of ``database_url``."""
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        return PostgresLeaderLock(database_url, connect_timeout=connect_timeout)
    database = url.database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return SoleLeader()
    return FileLeaderLock(os.path.abspath(database) + ".scheduler.lock")
