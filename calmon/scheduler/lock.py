"""The leader lock: of all scheduler processes sharing a database, its holder alone scans
models for changes (refreshing the windows of a changed fixed reference) and expires old data;
on SQLite it is also the only process that computes windows (on PostgreSQL every process
computes, claiming each window it tries in the order of :mod:`calmon.scheduler.ordering`).

PostgreSQL: a lease in the one-row table ``scheduler_leader``, taken and renewed in short
transactions through the engine's pool, the renewals on a timer of the holder's own
(:class:`LeaseLeaderLock`), so that it needs no session of its own: it survives a
transaction-pooling PgBouncer, and a failover of the database is followed through the engine
like every other query. SQLite: an exclusive ``flock`` on ``<database>.scheduler.lock``
(:class:`FileLeaderLock`); an in-memory database always leads (:class:`SoleLeader`).
:func:`leader_lock` picks the one that fits the engine. See ``docs/reference/scheduler.md`` ("The
leader lock").
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from typing import IO, Final, Protocol

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from calmon.clock import RepeatingTimer
from calmon.db import locks
from calmon.db.backend import single_writer

logger = logging.getLogger(__name__)

#: seconds a leader's lease lasts without renewal: how long a dead leader's work waits
LEASE_SECONDS: Final = 10.0
#: the key of the leader's row in ``scheduler_leader``
LEADER_ROLE: Final = "scheduler"
#: longest instance name stored
INSTANCE_LENGTH: Final = 200


class LeaderLock(Protocol):
    """Try to lead; tell whether leadership still holds; give it up."""

    def acquire(self) -> bool:
        """Take the lock if free (True when this process holds it afterwards)."""

    def held(self) -> bool:
        """Whether this process still holds the lock (checks the connection)."""

    def release(self) -> None:
        """Give the lock up (no-op when not held)."""


class LeaseLeaderLock:
    """A lease in the ``scheduler_leader`` row, taken and renewed through ``engine``'s pool.

    The row names its holder and when the lease ends, in the server's clock. A process takes it
    when it is free, expired or its own (one ``INSERT … ON CONFLICT DO UPDATE … WHERE``, a
    transaction of one statement); the holder renews it every ``lease / 4`` seconds on a timer
    of its own, so a window computed for longer than the lease does not lose it. The holder
    believes it leads only until ``lease`` seconds after it sent its last successful renewal
    (its own monotonic clock, which starts before the server's ``now()``), so it stops before
    another process can take the row over. Nothing ties the lease to a connection: it works
    through a transaction-pooling PgBouncer and finds a promoted primary through the engine,
    and a leader that dies (or whose database fails over) is replaced ``lease`` seconds later.
    """

    def __init__(self, engine: Engine, *, instance: str, lease: float = LEASE_SECONDS) -> None:
        self._engine = engine
        self._instance = instance[:INSTANCE_LENGTH]
        self._lease = lease
        self._valid_until = 0.0
        self._mutex = threading.Lock()
        self._renewer: RepeatingTimer | None = None

    def _claim(self) -> bool:
        """Take or renew the lease (True when this process holds it afterwards)."""
        sent = time.monotonic()
        try:
            with self._engine.begin() as connection:
                held = locks.claim_lease(
                    connection, role=LEADER_ROLE, instance=self._instance, seconds=self._lease
                )
        except SQLAlchemyError as exc:
            logger.warning("leader lease: database unreachable: %s", type(exc).__name__)
            return self.held()
        with self._mutex:
            if held:
                self._valid_until = max(self._valid_until, sent + self._lease)
            elif self._valid_until:
                logger.warning("leader lease: taken over by another process; leadership given up")
                self._valid_until = 0.0
        return held

    def acquire(self) -> bool:
        """Take the lease if free (or keep it); the renewal timer starts with the first one."""
        held = self.held() or self._claim()
        if held and self._renewer is None:
            renewer = RepeatingTimer(
                self._renew,
                self._lease / 4,
                name="calmon-leader-lease",
                first_in=self._lease / 4,
            )
            renewer.start()
            self._renewer = renewer
        return held

    def _renew(self) -> None:
        if self.held():
            self._claim()

    def held(self) -> bool:
        """True until ``lease`` seconds after the last renewal this process sent and won."""
        with self._mutex:
            return time.monotonic() < self._valid_until

    def release(self) -> None:
        """Stop renewing and end the lease now, so that another process leads at its next
        tick (without waiting for the lease to run out)."""
        if self._renewer is not None:
            self._renewer.stop()
            self._renewer = None
        with self._mutex:
            was_held = time.monotonic() < self._valid_until
            self._valid_until = 0.0
        if not was_held:
            return
        with contextlib.suppress(SQLAlchemyError), self._engine.begin() as connection:
            locks.end_lease(connection, role=LEADER_ROLE, instance=self._instance)


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


def leader_lock(engine: Engine, *, instance: str) -> LeaderLock:
    """The lock that fits ``engine``'s database (``instance`` names the holder)."""
    if not single_writer(engine):
        return LeaseLeaderLock(engine, instance=instance)
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return SoleLeader()
    return FileLeaderLock(os.path.abspath(database) + ".scheduler.lock")
