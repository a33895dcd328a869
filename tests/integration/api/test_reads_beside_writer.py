"""Reads beside a writer, and a write that waits too long for SQLite's write lock.

SQLite has one write lock per file; in WAL mode a reader reads the last commit beside the
writer. The API's reads (GET routes, the web view, ``/readyz``, the exporter's refresh) must
not queue for that lock, and a write not granted it within ``CALMON_SQLITE_BUSY_TIMEOUT`` is
503 ``database_busy`` (contention, retried), not ``database_unavailable`` (an outage).
PostgreSQL reads never wait for writers (MVCC): the same check runs there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import delete, update

from calmon.api.app import create_app
from calmon.db.models import Model, WindowResult
from calmon.db.session import create_db_engine, create_session_factory
from calmon.exporter.refresh import WindowExporter
from calmon.scheduler.runner import WindowScheduler
from calmon.settings import Settings
from tests.integration.api.helpers import error_of, post_predictions, prediction
from tests.integration.scheduler.helpers import (
    SettledClock,
    create_model,
    make_batch,
    send,
    windows,
)
from tests.support.clients import ClientFactory
from tests.support.databases import upgraded

BUSY_TIMEOUT = 2.0
#: a read answered within this many seconds did not wait for the busy timeout
QUICK = 1.0
READ_PATHS = (
    "/v1/models",
    "/v1/models/fraud",
    "/v1/models/fraud/windows",
    "/ui",
    "/ui/models/fraud",
    "/readyz",
)


@contextmanager
def writing(url: str) -> Iterator[None]:
    """Another connection in the middle of a write until the block ends: every model's
    threshold set to 0.9 and every window result deleted, uncommitted, then rolled back
    (on SQLite it holds the write lock meanwhile)."""
    engine = create_db_engine(Settings(database_url=url))
    try:
        with create_session_factory(engine)() as session:
            session.execute(update(Model).values(threshold=0.9))
            session.execute(delete(WindowResult))
            yield
            session.rollback()
    finally:
        engine.dispose()


def test_reads_answer_at_once_while_another_connection_writes(
    migrated_url: str, make_client: ClientFactory, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    client = make_client(sqlite_busy_timeout=BUSY_TIMEOUT)
    create_model(client, "fraud", window="5m", grace="0s")
    batch = make_batch(
        prefix="fraud", start=clock.recent(3), count=200, spacing=timedelta(seconds=3), seed=5
    )
    send(client, "fraud", batch)
    assert scheduler.tick().computed == 2
    exporter: WindowExporter = client.app.state.window_exporter  # type: ignore[attr-defined]
    with writing(migrated_url):
        for path in READ_PATHS:
            started = time.monotonic()
            response = client.get(path)
            elapsed = time.monotonic() - started
            assert response.status_code == 200, (path, response.text)
            assert elapsed < QUICK, (path, elapsed)
        # the last commit, not the writer's uncommitted changes
        assert client.get("/v1/models/fraud").json()["threshold"] == 0.5
        assert len(windows(client, "fraud", segment="*")) == 2
        started = time.monotonic()
        snapshot = exporter.refresh()
        assert time.monotonic() - started < QUICK
        assert snapshot is not None
        assert snapshot.windows == 1


def test_a_write_lock_wait_past_the_busy_timeout_is_503_database_busy(tmp_path: Path) -> None:
    url = upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    settings = Settings(database_url=url, retention_days=0, sqlite_busy_timeout=0.5)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        create_model(client, "fraud")
        with writing(url):
            started = time.monotonic()
            response = post_predictions(client, [prediction("a")])
            elapsed = time.monotonic() - started
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "1"
        error = error_of(response)
        assert error["code"] == "database_busy"
        assert "busy with another write" in error["message"]
        assert 0.5 <= elapsed < 3.0
        # nothing of it was stored: the same batch is new once the lock is free
        assert post_predictions(client, [prediction("a")]).json()["new"] == 1
