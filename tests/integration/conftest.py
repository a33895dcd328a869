"""Fixtures for integration tests: a migrated database of each backend and API clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.db import migrate
from app.db.session import create_db_engine
from app.settings import Settings

ClientFactory = Callable[..., TestClient]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each backend: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'calmon.db'}"
    url: str = request.getfixturevalue("postgres_database")
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def migrated_url(database_url: str) -> str:
    """``database_url`` upgraded to the latest schema."""
    engine = create_db_engine(Settings(database_url=database_url))
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    return database_url


@pytest.fixture
def make_client(migrated_url: str) -> Iterator[ClientFactory]:
    """Build API clients on the migrated database with extra settings."""
    clients: list[TestClient] = []

    def factory(**overrides: Any) -> TestClient:
        settings = Settings(**{"database_url": migrated_url, **overrides})
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
    """An open API on a migrated SQLite file, for checks that never reach the database."""
    url = f"sqlite:///{tmp_path / 'calmon.db'}"
    engine = create_db_engine(Settings(database_url=url))
    migrate.upgrade(engine)
    engine.dispose()
    with TestClient(create_app(Settings(database_url=url))) as client:
        yield client
