"""Fixtures of the scheduler tests: each backend's database, an API client and schedulers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from calmon.db.session import create_db_engine, create_session_factory
from calmon.settings import Settings
from tests.integration.scheduler.helpers import MARGIN as MARGIN
from tests.integration.scheduler.helpers import Env, SettledClock
from tests.support.clients import ClientFactory


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
