"""Fixtures for fault tests: a fresh migrated PostgreSQL database and `calmon api` processes
stopped after the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.faults.helpers import ApiFactory as ApiFactory
from tests.e2e.faults.helpers import ApiProcess
from tests.support.databases import upgraded


@pytest.fixture
def database_url(postgres_database: str) -> str:
    """A fresh migrated PostgreSQL database (SQLAlchemy URL)."""
    return upgraded(postgres_database.replace("postgresql://", "postgresql+psycopg://", 1))


@pytest.fixture
def api_factory(tmp_path: Path) -> Iterator[ApiFactory]:
    """Build :class:`ApiProcess` objects (``database_url``, ``workers=2``), stopped after the
    test."""
    built: list[ApiProcess] = []

    def factory(database_url: str, *, workers: int = 2) -> ApiProcess:
        api = ApiProcess(database_url, tmp_path / f"api-{len(built)}.log", workers=workers)
        built.append(api)
        return api

    yield factory
    for api in built:
        api.stop()
