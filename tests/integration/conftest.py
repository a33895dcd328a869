"""Fixtures for integration tests: a migrated database of each backend, API clients, the
test's clock, the scheduler tests' environment (``env``, also the exporter's and the scrape's)
and promtool (the deployment checks' and the exporter's).

The helpers they use live in :mod:`tests.support` and
:mod:`tests.integration.scheduler.helpers`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from calmon.api.app import create_app
from calmon.db.session import create_db_engine, create_session_factory
from calmon.settings import Settings
from tests.integration.deploy.tools import tool
from tests.integration.scheduler.helpers import MARGIN, Env, SettledClock, settle
from tests.support.clients import ClientFactory
from tests.support.databases import database_url, empty_postgres, throwaway_database, upgraded


@pytest.fixture(scope="session")
def shared_postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """One migrated PostgreSQL database for the session (tests empty it before use)."""
    with throwaway_database(postgres_admin_url) as name:
        url = database_url(postgres_admin_url, name)
        yield upgraded(url.replace("postgresql://", "postgresql+psycopg://", 1))


@pytest.fixture(params=["sqlite", "postgresql"])
def migrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database at the latest schema, of each backend: a new SQLite file (a copy of
    the migrated template), then the session's PostgreSQL database emptied of all rows."""
    if request.param == "sqlite":
        return upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    shared: str = request.getfixturevalue("shared_postgres_url")
    empty_postgres(shared)
    return shared


@pytest.fixture
def make_client(migrated_url: str) -> Iterator[ClientFactory]:
    """Build API clients on the migrated database with extra settings.

    Retention is off unless asked for: the tests' event times are fixed instants long past,
    which a retention period would refuse."""
    clients: list[TestClient] = []

    def factory(**overrides: Any) -> TestClient:
        settings = Settings(**{"database_url": migrated_url, "retention_days": 0, **overrides})
        client = TestClient(create_app(settings), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    """An open API (no tokens) on a migrated database."""
    return make_client()


@pytest.fixture
def sqlite_client(tmp_path: Path) -> Iterator[TestClient]:
    """An open API on a migrated SQLite file, for checks that never reach the database
    (retention off, as for :func:`make_client`)."""
    url = upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    with TestClient(create_app(Settings(database_url=url, retention_days=0))) as client:
        yield client


@pytest.fixture
def clock() -> SettledClock:
    """The test's clock, for the schedulers it runs and the windows it places data in
    (``clock.recent(k)``): "now" fixed at the test's start, set back near a window boundary
    (:func:`~tests.integration.scheduler.helpers.settle`). A fixture, so that no two tests
    share it."""
    return settle()


@pytest.fixture
def env(migrated_url: str, make_client: ClientFactory, clock: SettledClock) -> Iterator[Env]:
    """A migrated database of each backend, an open API on it, and a scheduler factory (its
    schedulers on the test's ``clock``)."""
    settings = Settings(
        database_url=migrated_url,
        scheduler_scan_margin=MARGIN,
        scheduler_interval=0.2,
        retention_days=0,
    )
    engine = create_db_engine(settings)
    environment = Env(
        url=migrated_url,
        client=make_client(retention_days=0),
        settings=settings,
        session_factory=create_session_factory(engine),
        clock=clock,
    )
    yield environment
    for scheduler in environment.schedulers:
        scheduler.shutdown()
    engine.dispose()


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool; skips (or fails in CI) when it is missing."""
    return tool("promtool")
