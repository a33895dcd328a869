"""A statement on a PostgreSQL server that freezes mid-request ends with an error at the
session deadline instead of hanging."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from calmon.db.session import (
    WATCHDOG,
    Watchdog,
    create_db_engine,
    create_session_factory,
    session_deadline,
)
from calmon.settings import Settings
from harness.processes import wait_for
from tests.integration.tcp_proxy import TcpProxy


@pytest.fixture
def proxied_engine(postgres_database: str) -> Iterator[tuple[Engine, TcpProxy]]:
    parts = urlsplit(postgres_database)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    url = f"postgresql+psycopg://{parts.username}@127.0.0.1:{proxy.port}{parts.path}"
    engine = create_db_engine(Settings(database_url=url))
    try:
        yield engine, proxy
    finally:
        proxy.close()
        engine.dispose()


def test_frozen_server_mid_session_is_cut_at_the_deadline(
    proxied_engine: tuple[Engine, TcpProxy],
) -> None:
    engine, proxy = proxied_engine
    sessions = create_session_factory(engine)
    armed = time.monotonic()
    with sessions() as session, session_deadline(session, 1.5):
        assert session.execute(text("SELECT 1")).scalar() == 1
        proxy.set_mode("freeze")
        with pytest.raises(OperationalError):
            session.execute(text("SELECT 2"))
        elapsed = time.monotonic() - armed
    assert 1.5 <= elapsed < 4.5
    proxy.set_mode("up")
    with sessions() as session:
        assert session.execute(text("SELECT 3")).scalar() == 3


def test_deadline_leaves_quick_sessions_alone(proxied_engine: tuple[Engine, TcpProxy]) -> None:
    engine, _ = proxied_engine
    sessions = create_session_factory(engine)
    with sessions() as session, session_deadline(session, 0.5):
        due = time.monotonic() + 0.5  # no earlier than the alarm the deadline armed
        backend = session.execute(text("SELECT pg_backend_pid()")).scalar()
        session.commit()
    # past the deadline: the watchdog has reached the (cancelled) alarm and dropped it
    wait_for(
        "the watchdog past the session's deadline",
        lambda: all(at > due for at, _, _ in WATCHDOG._heap),
        timeout=10,
        interval=0.05,
    )
    with sessions() as session:
        assert session.execute(text("SELECT pg_backend_pid()")).scalar() == backend


def test_watchdog_fires_in_deadline_order_and_skips_cancelled() -> None:
    watchdog = Watchdog()
    fired: list[str] = []
    done = threading.Event()

    def last() -> None:
        fired.append("late")
        done.set()

    watchdog.arm(0.3, last)
    cancelled = watchdog.arm(0.1, lambda: fired.append("cancelled"))
    watchdog.arm(0.2, lambda: fired.append("early"))
    cancelled.cancel()
    assert done.wait(5)
    assert fired == ["early", "late"]
