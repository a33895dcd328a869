"""The scheduler's leader lease on PostgreSQL (``calmon.scheduler.lock.LeaseLeaderLock``): one
holder at a time, handed over at once on release and after the lease when the holder is cut
off from the database, renewed on its own timer, and no session state left behind (what a
transaction-pooling PgBouncer needs)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg
import pytest
from sqlalchemy import Engine

from calmon.db.session import create_db_engine
from calmon.scheduler.lock import LeaseLeaderLock
from calmon.settings import Settings
from harness.processes import wait_for
from tests.integration.tcp_proxy import TcpProxy
from tests.support.databases import upgraded

#: a short lease for the tests (seconds); the default is ``LEASE_SECONDS``
LEASE = 2.0


@pytest.fixture
def database_url(postgres_database: str) -> str:
    """A fresh migrated PostgreSQL database (SQLAlchemy URL)."""
    return upgraded(postgres_database.replace("postgresql://", "postgresql+psycopg://", 1))


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    """Engines the test makes, disposed after it."""
    made: list[Engine] = []
    yield made
    for engine in made:
        engine.dispose()


def _engine(url: str, engines: list[Engine]) -> Engine:
    engine = create_db_engine(Settings(database_url=url, db_connect_timeout=2))
    engines.append(engine)
    return engine


def _row(url: str) -> tuple[str, bool] | None:
    """The leader row's instance and whether its lease is still running (server clock)."""
    libpq = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq) as conn:
        row = conn.execute("SELECT instance, expires_at > now() FROM scheduler_leader").fetchone()
    return None if row is None else (str(row[0]), bool(row[1]))


def test_one_holder_at_a_time_and_release_hands_over_at_once(
    database_url: str, engines: list[Engine]
) -> None:
    engine = _engine(database_url, engines)
    first = LeaseLeaderLock(engine, instance="first", lease=LEASE)
    second = LeaseLeaderLock(engine, instance="second", lease=LEASE)
    try:
        assert first.acquire()
        assert first.held()
        assert not second.acquire()
        assert not second.held()
        assert _row(database_url) == ("first", True)
        # Renewed on its own timer (no acquire() in between): held throughout three leases.
        until = time.monotonic() + 3 * LEASE
        while time.monotonic() < until:
            assert first.held()
            assert _row(database_url) == ("first", True)
            assert not second.acquire()
            time.sleep(0.1)
        first.release()
        assert not first.held()
        assert _row(database_url) is None
        assert second.acquire()
        assert _row(database_url) == ("second", True)
        assert not first.acquire()
    finally:
        first.release()
        second.release()


def test_a_holder_cut_off_gives_up_before_another_takes_over(
    database_url: str, engines: list[Engine]
) -> None:
    parts = urlsplit(database_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        proxied = f"postgresql+psycopg://{parts.username}@127.0.0.1:{proxy.port}{parts.path}"
        cut_off = LeaseLeaderLock(_engine(proxied, engines), instance="cut-off", lease=LEASE)
        rival = LeaseLeaderLock(_engine(database_url, engines), instance="rival", lease=LEASE)
        assert cut_off.acquire()
        proxy.set_mode("refuse")
        # The holder stops believing it leads before the server lets another take over.
        wait_for("the rival to lead", rival.acquire, timeout=3 * LEASE, interval=0.02)
        assert not cut_off.held()
        assert _row(database_url) == ("rival", True)
        # Back in touch, the former holder finds the lease taken and does not lead.
        proxy.set_mode("up")
        assert wait_for(
            "the former holder to reach the database again",
            lambda: not cut_off.acquire() and _row(database_url) == ("rival", True),
            timeout=10,
        )
        assert not cut_off.held()
        cut_off.release()
        assert _row(database_url) == ("rival", True)
        rival.release()
    finally:
        proxy.close()


def test_the_lease_leaves_no_session_state(database_url: str, engines: list[Engine]) -> None:
    engine = _engine(database_url, engines)
    lock = LeaseLeaderLock(engine, instance="only", lease=LEASE)
    try:
        assert lock.acquire()
        libpq = database_url.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(libpq) as conn:
            states = conn.execute(
                "SELECT count(*) FILTER (WHERE state LIKE 'idle in transaction%'),"
                " (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database ="
                "  (SELECT oid FROM pg_database WHERE datname = current_database()))"
                " FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchone()
        assert states == (0, 0)
    finally:
        lock.release()
