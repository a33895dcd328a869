"""One sender posting large batches back to back while the scheduler computes large windows
without labels, on SQLite: every batch is acknowledged, none waits past the busy timeout.

SQLite has one write lock per file. The scheduler reads a window's rows in a transaction that
only reads (no write lock) and evaluates them outside any transaction; it takes the write lock
only to store what it computed, so the API's writes never queue behind a window's reads or
evaluation. Before that, reading a 20,000-row window held the lock for seconds, and a batch
waiting for it answered 503 ``database_busy``. PostgreSQL writers never wait for readers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from calmon.api.app import create_app
from calmon.db.models import Prediction
from calmon.db.session import create_db_engine, create_session_factory
from calmon.scheduler.runner import WindowScheduler
from calmon.settings import Settings
from tests.integration.scheduler.helpers import SettledClock, create_model, make_batch
from tests.support.databases import upgraded

BATCH = 10_000
#: batches sent, two per window: windows of 20,000 predictions
BATCHES = 12
#: the API's busy timeout: well above the scheduler's writes (tens of milliseconds), well
#: below what reading a 20,000-row window under the write lock took (seconds)
API_BUSY_TIMEOUT = 1.5
SPACING = timedelta(milliseconds=30)


class _Computed(logging.Handler):
    """Collects the predictions of each window the scheduler logs as computed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.predictions: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "window computed":
            self.predictions.append(int(record.__dict__["predictions"]))


@pytest.fixture
def computed() -> Iterator[_Computed]:
    """The windows the scheduler computes during the test, by their predictions."""
    handler = _Computed()
    logger = logging.getLogger("calmon.scheduler.runner")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def _bodies(clock: SettledClock) -> list[list[dict[str, Any]]]:
    """``BATCHES`` batches of ``BATCH`` predictions without labels, two per window, their
    instants interleaved."""
    bodies = []
    for index in range(BATCHES):
        start = clock.recent(BATCHES) + (index // 2) * timedelta(minutes=5)
        batch = make_batch(
            prefix=f"b{index}",
            start=start + (index % 2) * SPACING / 2,
            count=BATCH,
            spacing=SPACING,
            seed=index,
            unlabelled=1.0,
        )
        bodies.append(batch.items)
    return bodies


def test_a_steady_sender_is_never_answered_busy_while_windows_are_computed(
    tmp_path: Path, clock: SettledClock, computed: _Computed
) -> None:
    url = upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    api_settings = Settings(
        database_url=url, retention_days=0, sqlite_busy_timeout=API_BUSY_TIMEOUT
    )
    scheduler_settings = Settings(database_url=url, retention_days=0, scheduler_interval=0.2)
    bodies = _bodies(clock)
    answers: list[tuple[int, Any]] = []
    with TestClient(create_app(api_settings), raise_server_exceptions=False) as client:
        create_model(client, "fraud", window="5m", grace="0s")

        def send() -> None:
            for items in bodies:
                response = client.post("/v1/models/fraud/predictions", json={"predictions": items})
                answers.append((response.status_code, response.json()))

        scheduler = WindowScheduler(scheduler_settings, instance="steady", clock=clock)
        scheduler.start()
        try:
            sender = threading.Thread(target=send)
            sender.start()
            sender.join()
            during = list(computed.predictions)
        finally:
            scheduler.shutdown()
    refused = [(status, body) for status, body in answers if status != 200]
    assert not refused, refused
    assert sum(body["new"] for _, body in answers) == BATCHES * BATCH
    engine = create_db_engine(Settings(database_url=url))
    try:
        with create_session_factory(engine, reads_only=True)() as session:
            stored = session.scalar(select(func.count()).select_from(Prediction))
    finally:
        engine.dispose()
    assert stored == BATCHES * BATCH
    # the contention happened: windows of 20,000 predictions computed while the sender sent
    assert during.count(2 * BATCH) >= 2, during
