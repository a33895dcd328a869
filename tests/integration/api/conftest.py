"""Fixtures of the API tests that read computed windows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from calmon.scheduler.runner import WindowScheduler
from calmon.settings import Settings
from tests.integration.scheduler.helpers import SettledClock


@pytest.fixture
def scheduler(migrated_url: str, clock: SettledClock) -> Iterator[WindowScheduler]:
    """A scheduler on the test's database (ticks run in the test), on the test's clock."""
    settings = Settings(database_url=migrated_url, scheduler_scan_margin=5.0, retention_days=0)
    running = WindowScheduler(settings, instance="api-test", clock=clock)
    yield running
    running.shutdown()
