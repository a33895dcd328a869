"""The outage gate of a PostgreSQL engine: once the database is found down, connections fail at
once instead of each waiting for the connect timeout, and a background probe reopens the gate
when the database answers again. Real PostgreSQL behind a TCP proxy that a test can cut."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from calmon.db.session import PING_TIMEOUT, OutageGate, create_db_engine, outage_gate
from calmon.settings import Settings
from harness.processes import wait_for
from tests.integration.tcp_proxy import Mode, TcpProxy

pytestmark = pytest.mark.postgres

CONNECT_TIMEOUT = 2
#: what a call may take once the gate is closed: no network wait at all
CLOSED_BOUND = 0.25
#: the probe's period plus one connection
RECOVERY_BOUND = 5.0


@pytest.fixture
def proxied(shared_postgres_url: str) -> Iterator[tuple[Engine, TcpProxy]]:
    parts = urlsplit(shared_postgres_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    url = f"postgresql+psycopg://{parts.username}@127.0.0.1:{proxy.port}{parts.path}"
    engine = create_db_engine(Settings(database_url=url, db_connect_timeout=CONNECT_TIMEOUT))
    try:
        yield engine, proxy
    finally:
        engine.dispose()
        proxy.close()


def _select_one(engine: Engine) -> float:
    started = time.monotonic()
    try:
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT 1")) == 1
    finally:
        elapsed = time.monotonic() - started
    return elapsed


def _failing(engine: Engine) -> float:
    started = time.monotonic()
    with pytest.raises(OperationalError):
        _select_one(engine)
    return time.monotonic() - started


def _gate(engine: Engine) -> OutageGate:
    gate = outage_gate(engine)
    assert gate is not None
    return gate


@pytest.mark.parametrize(
    ("outage", "first_bound"),
    [
        ("refuse", 0.5),  # refused at once
        ("blackhole", CONNECT_TIMEOUT + 0.7),  # the pooled connection is gone: one connect
        ("freeze", PING_TIMEOUT + 0.7),  # the pooled connection stays silent: one ping
    ],
)
def test_outage_fails_fast_after_the_first_call_and_recovers(
    proxied: tuple[Engine, TcpProxy], outage: Mode, first_bound: float
) -> None:
    engine, proxy = proxied
    gate = _gate(engine)
    _select_one(engine)
    assert not gate.down

    proxy.set_mode(outage)
    assert _failing(engine) < first_bound
    assert gate.down
    assert gate.outages == 1
    for _ in range(5):
        assert _failing(engine) < CLOSED_BOUND
    assert gate.outages == 1

    proxy.set_mode("up")
    wait_for(
        "the probe to reopen the gate", lambda: not gate.down, timeout=RECOVERY_BOUND, interval=0.05
    )
    assert _select_one(engine) < 1.0
    assert not gate.down


def test_a_connection_closed_by_the_server_is_replaced_without_closing_the_gate(
    proxied: tuple[Engine, TcpProxy],
) -> None:
    engine, proxy = proxied
    gate = _gate(engine)
    _select_one(engine)
    proxy.set_mode("refuse")
    proxy.set_mode("up")  # every pooled connection was cut; the server is back
    assert _select_one(engine) < 1.0
    assert not gate.down
    assert gate.outages == 0


def test_sqlite_engines_have_no_gate() -> None:
    engine = create_db_engine(Settings(database_url="sqlite://"))
    assert outage_gate(engine) is None
    engine.dispose()
