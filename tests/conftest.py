"""Suite-wide fixtures: the PostgreSQL server used by integration and end-to-end tests.

``CALMON_TEST_POSTGRES_URL`` names a maintenance database on a server where the tests may
create and drop databases (``scripts/test`` sets it, starting a throwaway server if needed).
When it is empty or unreachable the PostgreSQL tests are skipped and the run ends with a loud
warning, unless ``CALMON_REQUIRE_POSTGRES=1`` (CI), which turns that into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest

from tests.support import database_url, throwaway_database

_skipped_for_postgres: list[str] = []


def _admin_url() -> str | None:
    url = os.environ.get(
        "CALMON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    return url or None


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """libpq URL of the maintenance database; skips (or fails in CI) when unreachable."""
    url = _admin_url()
    reason = "PostgreSQL not configured (CALMON_TEST_POSTGRES_URL is empty)"
    if url is not None:
        try:
            psycopg.connect(url, connect_timeout=3).close()
            return url
        except psycopg.OperationalError as exc:
            reason = f"PostgreSQL unreachable: {exc}".strip()
    if os.environ.get("CALMON_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason} and CALMON_REQUIRE_POSTGRES=1")
    _skipped_for_postgres.append(reason)
    pytest.skip(reason)


@pytest.fixture
def postgres_database(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; yields its libpq URL, then drops it."""
    with throwaway_database(postgres_admin_url) as name:
        yield database_url(postgres_admin_url, name)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say loudly that PostgreSQL tests did not run, so nobody mistakes a partial pass."""
    if _skipped_for_postgres:
        terminalreporter.write_sep("!", "PostgreSQL tests DID NOT RUN", red=True, bold=True)
        terminalreporter.write_line(_skipped_for_postgres[0], red=True)
