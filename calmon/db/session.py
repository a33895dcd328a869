"""Engines and sessions for PostgreSQL (psycopg 3) and SQLite, with failure bounds.

PostgreSQL connections time out after ``db_connect_timeout`` seconds, statements after
``db_statement_timeout`` (a wait for a row lock after 90% of it, so that contention is told
apart from a slow database: SQLSTATE 55P03), waiting for a pooled connection after
``db_pool_timeout``, and pooled connections are pinged before use with a client-side deadline
of ``PING_TIMEOUT`` (a frozen server still acknowledges TCP, so only the client can notice it
does not answer: the watchdog shuts the socket down; behind a transaction pooler the statement
timeout, :func:`ping_deadline`). Once a connection attempt fails or a
ping goes unanswered, an :class:`OutageGate` fails every further connection at once, without
waiting for the connect timeout, while one background probe reconnects; its first success
reopens the gate. A database outage thus costs the first request that meets it at most one
ping deadline or one connect timeout, the next ones nothing, and everything recovers by itself
when the database returns.
SQLite files get WAL journaling, foreign keys and a busy timeout. A writing transaction begins
``BEGIN IMMEDIATE`` (it takes the write lock up front, waiting up to the busy timeout, instead
of failing when upgrading a read snapshot), after waiting for its turn among the process's
writers of the file (:class:`WriterQueue`: first come, first served); a read-only one
(:func:`read_only`) begins deferred and never takes it, so in WAL mode it reads its snapshot
beside a writer instead of queueing behind it. PostgreSQL transactions are the same for both kinds.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import logging
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

import psycopg
from psycopg.pq import Format
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql import Executable

from calmon.clock import RepeatingTimer
from calmon.settings import Settings

#: seconds a pooled PostgreSQL connection has to answer ``SELECT 1`` before it is dropped
PING_TIMEOUT: Final = 1.0
#: seconds between two connection attempts of the probe while the database is down
PROBE_INTERVAL: Final = 0.5
#: connection attempts of the probe under way at once
MAX_PROBES: Final = 4
#: execution option of connections whose transactions only read (:func:`read_only`)
READ_ONLY: Final = "calmon_read_only"
#: execution option of statements whose rows PostgreSQL sends in binary (:func:`binary_rows`)
BINARY_ROWS: Final = "calmon_binary_rows"

Statement = TypeVar("Statement", bound=Executable)

_LAG_QUERY: Final = text(
    "SELECT CASE WHEN pg_is_in_recovery()"
    " THEN EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) END"
)
_TRANSACTION_CONFIG: Final = text(
    "SELECT set_config('statement_timeout', :value, true),"
    " set_config('application_name', :name, true)"
)

logger = logging.getLogger(__name__)


def create_db_engine(settings: Settings) -> Engine:
    """Build the engine for ``settings.database_url`` (no connection is opened yet).

    Statement parameters never appear in errors (``hide_parameters``): they hold model data,
    and a failed batch insert would put thousands of them in one log line.
    """
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_engine(
            url,
            hide_parameters=True,
            connect_args={"timeout": settings.sqlite_busy_timeout, "check_same_thread": False},
        )
        _configure_sqlite(engine, busy_timeout=settings.sqlite_busy_timeout)
        return engine
    if url.get_backend_name() == "postgresql" and url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    statement_ms = int(settings.db_statement_timeout * 1000)
    lock_ms = max(1, statement_ms * 9 // 10)
    connect_args: dict[str, Any] = {
        "connect_timeout": settings.db_connect_timeout,
        "application_name": "calmon",
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 2,
        "tcp_user_timeout": settings.db_connect_timeout * 1000,
    }
    if settings.db_transaction_pooler:
        connect_args["prepare_threshold"] = None
    else:
        connect_args["options"] = f"-c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"
    engine = create_engine(
        url,
        hide_parameters=True,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_pool_size,
        pool_timeout=settings.db_pool_timeout,
        pool_recycle=1800,
        connect_args=connect_args,
    )
    if settings.db_transaction_pooler:
        _set_timeouts_per_transaction(engine, statement_ms=statement_ms, lock_ms=lock_ms)
    engine.pool.transaction_pooler = settings.db_transaction_pooler  # type: ignore[attr-defined]
    gate = OutageGate(ping_deadline=ping_deadline(settings))

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        return gate.connect(lambda: dialect.connect(*cargs, **cparams))

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if gate.down:
            raise DisconnectionError("the database is down")
        if not _ping_with_deadline(dbapi_connection, gate.ping_deadline):
            gate.close("a pooled connection did not answer its ping in time")
            raise DisconnectionError("the database did not answer in time")

    engine.pool.outage_gate = gate  # type: ignore[attr-defined]
    _send_binary_rows_on_request(engine)
    return engine


def binary_rows(statement: Statement) -> Statement:
    """``statement`` with its rows sent in PostgreSQL's binary format (no change on SQLite):
    a ``bytea`` value then arrives as its bytes instead of hex text twice as long, which the
    server spends about three times the CPU encoding and the client decoding (0.4 s against
    0.12 s for the 32 MB of a window's 4·10^6 stored negatives). For the statements that read
    megabytes of bytes: stored sorted scores, and a window's rows as ``array_send`` arrays."""
    return statement.execution_options(**{BINARY_ROWS: True})


def _send_binary_rows_on_request(engine: Engine) -> None:
    """Ask psycopg for binary rows for the statements marked by :func:`binary_rows` (each
    execution has a cursor of its own, so nothing else is affected)."""

    @event.listens_for(engine, "before_cursor_execute")
    def _before(
        _conn: Connection, cursor: Any, _sql: str, _params: Any, context: Any, _many: bool
    ) -> None:
        if context is not None and context.execution_options.get(BINARY_ROWS):
            cursor.format = Format.BINARY


def _set_timeouts_per_transaction(engine: Engine, *, statement_ms: int, lock_ms: int) -> None:
    """Behind a transaction-pooling PgBouncer (``db_transaction_pooler``): each transaction
    begins by setting the statement and lock timeouts for itself (``set_config(…, true)``),
    since consecutive transactions may run on different server sessions, and PgBouncer refuses
    the ``options`` startup parameter that sets them once per connection elsewhere. Nothing
    is left on the server session for the next client."""

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql(
            "SELECT set_config('statement_timeout', %(statement)s, true),"
            " set_config('lock_timeout', %(lock)s, true)",
            {"statement": str(statement_ms), "lock": str(lock_ms)},
        )


def transaction_pooled(engine: Engine) -> bool:
    """Whether ``engine`` reaches PostgreSQL through a transaction-pooling PgBouncer
    (``db_transaction_pooler``): session-level settings would stay on a server session that
    another client gets next, so nothing may set them."""
    return bool(getattr(engine.pool, "transaction_pooler", False))


def outage_gate(engine: Engine) -> OutageGate | None:
    """The outage gate of a PostgreSQL engine made by :func:`create_db_engine` (else None)."""
    gate: OutageGate | None = getattr(engine.pool, "outage_gate", None)
    return gate


class OutageGate:
    """Fails new database connections at once while the database is known to be down.

    Closed by a failed connection attempt or an unanswered ping; reopened by a background probe
    that tries to connect every ``PROBE_INTERVAL`` seconds with the same arguments. Without it,
    each request during an outage would wait for the connect timeout (libpq's minimum is 2 s)
    before its 503. Errors raised while closed are ``psycopg.OperationalError``, like a failed
    connection, so callers need no new case.
    """

    def __init__(self, *, ping_deadline: float = PING_TIMEOUT) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._opener: Callable[[], Any] | None = None
        #: outages seen so far (each one closes the gate once)
        self.outages = 0
        #: seconds a ping may wait for its answer before the database counts as down
        self.ping_deadline = ping_deadline

    @property
    def down(self) -> bool:
        """True while the database is known to be down (the probe has not reconnected yet)."""
        return self._reason is not None

    def connect(self, opener: Callable[[], Any]) -> Any:
        """Open a connection with ``opener``, unless the database is down (then fail at once)."""
        reason = self._reason
        if reason is not None:
            raise psycopg.OperationalError(f"the database is down ({reason}); reconnecting")
        try:
            connection = opener()
        except psycopg.OperationalError as exc:
            self.close(f"connection failed: {type(exc).__name__}", opener)
            raise
        self._opener = opener
        return connection

    def close(self, reason: str, opener: Callable[[], Any] | None = None) -> None:
        """Mark the database down and start the probe (once per outage)."""
        opener = opener or self._opener
        if opener is None:
            return
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            self.outages += 1
        logger.warning("database down: %s", reason)
        _probe(weakref.ref(self), opener)

    def _reopen(self) -> None:
        with self._lock:
            if self._reason is None:
                return
            self._reason = None
        logger.warning("database reachable again")


def _probe(gate_ref: weakref.ref[OutageGate], opener: Callable[[], Any]) -> None:
    """Start a timer that starts a connection attempt every ``PROBE_INTERVAL`` (up to
    ``MAX_PROBES`` at once, so one silent attempt does not delay the next) until one reopens
    the gate; it stops when the gate (and its engine) is gone."""
    in_flight = threading.BoundedSemaphore(MAX_PROBES)

    def attempt() -> None:
        gate = gate_ref()
        if gate is None or not gate.down:
            timer.stop()
            return
        del gate
        if in_flight.acquire(blocking=False):
            thread = threading.Thread(
                target=_probe_once, args=(gate_ref, opener, in_flight), name="calmon-db-probe"
            )
            thread.daemon = True
            thread.start()

    timer = RepeatingTimer(attempt, PROBE_INTERVAL, name="calmon-db-probe", first_in=PROBE_INTERVAL)
    timer.start()


def _probe_once(
    gate_ref: weakref.ref[OutageGate],
    opener: Callable[[], Any],
    in_flight: threading.BoundedSemaphore,
) -> None:
    try:
        connection = opener()
        gate = gate_ref()
        deadline = PING_TIMEOUT if gate is None else gate.ping_deadline
        del gate
        try:
            answered = _ping_with_deadline(connection, deadline)
        finally:
            with contextlib.suppress(Exception):
                connection.close()
        gate = gate_ref()
        if answered and gate is not None:
            gate._reopen()
    except (psycopg.Error, DisconnectionError, OSError) as exc:
        # the database is still down: the next attempt follows in PROBE_INTERVAL
        logger.debug("database probe failed", extra={"error": type(exc).__name__})
    except Exception:
        logger.exception("database probe failed unexpectedly")
    finally:
        in_flight.release()


class Watchdog:
    """One daemon thread that runs callbacks at deadlines unless they are cancelled first.

    Cheaper than a thread per deadline: arming and cancelling are a heap push and a flag.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Alarm]] = []
        self._condition = threading.Condition()
        self._counter = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, callback: Callable[[], None], *, name: str = "") -> _Alarm:
        """Run ``callback`` in ``seconds`` unless the returned alarm is cancelled; ``name``
        (default: the callback's) names it in the log when it raises."""
        alarm = _Alarm(callback, name or getattr(callback, "__qualname__", repr(callback)))
        with self._condition:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._counter), alarm))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="calmon-watchdog")
                self._thread.daemon = True
                self._thread.start()
            self._condition.notify()
        return alarm

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._condition.wait(wait)
                _, _, alarm = heapq.heappop(self._heap)
            if not alarm.cancelled:
                try:
                    alarm.callback()
                except Exception:
                    # logged by the alarm's name, not its callback's arguments (connections);
                    # the thread goes on with the next alarm
                    logger.exception("watchdog callback failed", extra={"job": alarm.name})


class _Alarm:
    __slots__ = ("callback", "cancelled", "name")

    def __init__(self, callback: Callable[[], None], name: str) -> None:
        self.callback = callback
        self.name = name
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


WATCHDOG: Final = Watchdog()


def cut_connection(dbapi_connection: Any) -> None:
    """Shut the connection's socket down, which makes a blocked call on it fail at once."""
    with contextlib.suppress(OSError, ValueError):
        fd = dbapi_connection.pgconn.socket
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.shutdown(socket.SHUT_RDWR)


def ping_deadline(settings: Settings) -> float:
    """Seconds a ping may wait: :data:`PING_TIMEOUT` straight to PostgreSQL, where a server
    that does not answer within it is frozen; behind a transaction pooler
    (``db_transaction_pooler``) the statement timeout, since a ping waits in the pooler's
    queue for a server connection like any statement, for seconds under load, and counting
    that wait as an outage answered 503 to everything."""
    return settings.db_statement_timeout if settings.db_transaction_pooler else PING_TIMEOUT


def _ping_with_deadline(dbapi_connection: Any, deadline: float) -> bool:
    """``SELECT 1`` on a connection: True if it answered, False if it stayed silent past
    ``deadline`` seconds (its socket is then shut down). A connection that fails at once
    (closed by the server, say) raises ``DisconnectionError``, and the pool replaces it."""
    fired = threading.Event()

    def cut() -> None:
        fired.set()
        cut_connection(dbapi_connection)

    alarm = WATCHDOG.arm(deadline, cut, name="ping deadline")
    autocommit = dbapi_connection.autocommit
    try:
        dbapi_connection.autocommit = True
        dbapi_connection.execute("SELECT 1")
        dbapi_connection.autocommit = autocommit
    except psycopg.Error as exc:
        if fired.is_set():
            return False
        raise DisconnectionError(str(exc)) from exc
    finally:
        alarm.cancel()
    return True


def _configure_sqlite(engine: Engine, *, busy_timeout: float) -> None:
    """WAL, foreign keys; transactions that write begin ``IMMEDIATE`` in their turn of the
    process's :class:`WriterQueue` of the file, both waits within ``busy_timeout`` seconds
    together; those that only read (:func:`read_only`) begin deferred."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    queue = writer_queue(engine.url.database)
    full_ms = int(busy_timeout * 1000)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        if connection.get_execution_options().get(READ_ONLY):
            connection.exec_driver_sql("BEGIN DEFERRED")
            return
        if queue is None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            return
        deadline = time.monotonic() + busy_timeout
        if not queue.acquire(busy_timeout):
            raise _busy()
        connection.info[_WRITER_TURN] = queue
        try:
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            connection.exec_driver_sql(f"PRAGMA busy_timeout = {left_ms}")
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            _end_turn(connection.info)
            raise
        finally:
            # the connection's later transactions (reads among them) wait the whole timeout
            connection.exec_driver_sql(f"PRAGMA busy_timeout = {full_ms}")

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def _on_end(connection: Connection) -> None:
        _end_turn(connection.info)

    @event.listens_for(engine, "checkin")
    @event.listens_for(engine, "invalidate")
    def _on_return(_dbapi_connection: Any, record: Any, *_: Any) -> None:
        _end_turn(record.info)


#: ``Connection.info`` key: the :class:`WriterQueue` whose turn the connection holds
_WRITER_TURN: Final = "calmon_writer_turn"
_QUEUES: dict[str, WriterQueue] = {}
_QUEUES_LOCK = threading.Lock()


class WriterQueue:
    """Turns at one SQLite file's write lock for this process's connections, first come,
    first served.

    SQLite's own wait for its write lock is a busy handler that sleeps and tries again (up to
    0.1 s between tries), so a writer that ends one transaction and begins the next within
    that sleep takes the lock again, and a waiting writer may lose every round until its busy
    timeout. ``calmon serve`` has its scheduler and the API write in one process: they queue
    here instead, each writing transaction in the order it asked, and a writer waits only for
    those before it. Writers of other processes still meet SQLite's busy handler.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._waiting: collections.deque[object] = collections.deque()
        self._held = False

    def acquire(self, timeout: float) -> bool:
        """Wait for this caller's turn, at most ``timeout`` seconds (False: not granted)."""
        me = object()
        deadline = time.monotonic() + timeout
        with self._condition:
            self._waiting.append(me)
            while self._held or self._waiting[0] is not me:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._waiting.remove(me)
                    self._condition.notify_all()
                    return False
                self._condition.wait(left)
            self._waiting.popleft()
            self._held = True
            return True

    @property
    def waiting(self) -> int:
        """Writers waiting for their turn now."""
        with self._condition:
            return len(self._waiting)

    def release(self) -> None:
        """End the current turn; the next writer in line takes it."""
        with self._condition:
            self._held = False
            self._condition.notify_all()


def writer_queue(database: str | None) -> WriterQueue | None:
    """The process's :class:`WriterQueue` of the SQLite file ``database`` (None in memory)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    key = os.path.realpath(database)
    with _QUEUES_LOCK:
        return _QUEUES.setdefault(key, WriterQueue())


def _end_turn(info: dict[Any, Any]) -> None:
    """Release the writer turn the connection holds, if any (once)."""
    queue = info.pop(_WRITER_TURN, None)
    if queue is not None:
        queue.release()


def _busy() -> OperationalError:
    """SQLite's "database is locked" (as the busy timeout raises it), for a writer that did
    not get its turn in this process within the busy timeout."""
    origin = sqlite3.OperationalError("database is locked")
    origin.sqlite_errorcode = sqlite3.SQLITE_BUSY
    origin.sqlite_errorname = "SQLITE_BUSY"
    return OperationalError("BEGIN IMMEDIATE", None, origin)


def read_only(engine: Engine) -> Engine:
    """``engine`` (same pool) for work that only reads: on SQLite its transactions begin
    deferred, so they never wait for the write lock (WAL: they read the last commit beside the
    writer). A write in them would have to upgrade the snapshot, which fails at once when
    another connection wrote since: do not write through it. Unchanged on PostgreSQL."""
    return engine.execution_options(**{READ_ONLY: True})


def begin_read_only(session: Session) -> None:
    """Begin ``session``'s transaction (it must not have begun) as one that only reads
    (:func:`read_only`): on SQLite it never takes the write lock; its commit ends it, and the
    session's next transaction begins as its factory's do."""
    session.connection(execution_options={READ_ONLY: True})


def set_transaction_config(
    session: Session, *, statement_timeout_ms: int, application_name: str
) -> None:
    """Set, until ``session``'s PostgreSQL transaction ends, its statement timeout (a long
    transaction's own, instead of the engine's) and the ``application_name`` that
    ``pg_stat_activity`` shows (at most 63 characters: longer names are cut)."""
    session.execute(
        _TRANSACTION_CONFIG,
        {"value": str(statement_timeout_ms), "name": application_name[:63]},
    )


def create_session_factory(engine: Engine, *, reads_only: bool = False) -> sessionmaker[Session]:
    """Sessions that keep loaded objects usable after commit (routes serialise them);
    ``reads_only``: sessions for work that only reads (:func:`read_only`)."""
    return sessionmaker(read_only(engine) if reads_only else engine, expire_on_commit=False)


def replica_lag(engine: Engine) -> float | None:
    """Seconds the replica behind ``engine`` is behind its primary (None: not a standby, or
    nothing replayed yet)."""
    with engine.connect() as connection:
        lag = connection.execute(_LAG_QUERY).scalar()
    return None if lag is None else max(0.0, float(lag))


class ReplicaSessions(sessionmaker[Session]):
    """Sessions that only read, from a read replica (``database_read_url``), or from the
    primary while the replica is known to be down (its outage gate closed: the request that
    found it down answered 503, the next ones read the primary until the gate's probe
    reaches the replica again)."""

    def __init__(self, replica: Engine, *, primary: Engine) -> None:
        super().__init__(read_only(replica), expire_on_commit=False)
        self._gate = outage_gate(replica)
        self._primary = read_only(primary)

    def __call__(self, **local_kw: Any) -> Session:
        """A session on the replica, or on the primary while the replica is down."""
        if self._gate is not None and self._gate.down:
            local_kw.setdefault("bind", self._primary)
        return super().__call__(**local_kw)


@contextlib.contextmanager
def session_deadline(session: Session, seconds: float) -> Iterator[None]:
    """Cut the session's PostgreSQL connections if the block still runs after ``seconds``.

    A server that freezes mid-statement never enforces its own ``statement_timeout``; this
    turns such a hang into a connection error. SQLite connections are left alone.
    """
    connections: list[Any] = []

    def remember(_session: Session, _transaction: Any, connection: Connection) -> None:
        dbapi_connection = connection.connection.dbapi_connection
        if hasattr(dbapi_connection, "pgconn"):
            connections.append(dbapi_connection)

    def expire() -> None:
        for dbapi_connection in list(connections):
            cut_connection(dbapi_connection)

    event.listen(session, "after_begin", remember)
    alarm = WATCHDOG.arm(seconds, expire, name="session deadline")
    try:
        yield
    finally:
        alarm.cancel()
        event.remove(session, "after_begin", remember)
