"""The API and the scheduler read the current instant from the clock they are given: the
ingestion bounds, the recompute range, the records' ``computed_at`` and the web view's stale
alert all follow a clock held still. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from calmon.api.app import create_app
from calmon.scheduler.runner import WindowScheduler
from calmon.settings import Settings
from tests.integration.scheduler.helpers import SetClock, create_model, iso, windows

NOW = datetime(2025, 3, 1, 0, 2, tzinfo=UTC)
EARLIER = datetime(2025, 2, 28, 23, 55, tzinfo=UTC)
CURRENT = datetime(2025, 3, 1, 0, 0, tzinfo=UTC)
FIVE_MINUTES = timedelta(minutes=5)


@pytest.fixture
def clock() -> SetClock:
    return SetClock(at=NOW)


@pytest.fixture
def settings(migrated_url: str) -> Settings:
    return Settings(database_url=migrated_url, retention_days=0, scheduler_scan_margin=5.0)


@pytest.fixture
def client(settings: Settings, clock: SetClock) -> Iterator[TestClient]:
    app = create_app(settings, lifespan_hooks=[], clock=clock)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def _items(start: datetime, prefix: str) -> list[dict[str, object]]:
    return [
        {
            "id": f"{prefix}-{i}",
            "timestamp": (start + i * timedelta(seconds=10)).isoformat(),
            "score": 0.1 + 0.8 * (i % 2),
            "label": i % 2,
        }
        for i in range(20)
    ]


def test_ingestion_bounds_follow_the_clock(client: TestClient) -> None:
    create_model(client, "fraud", window="5m", grace="0s")
    # more than a day after the clock's instant: in the future, refused
    moment = NOW + timedelta(days=1, minutes=1)
    late = {"id": "late", "timestamp": moment.isoformat(), "score": 0.5}
    response = client.post("/v1/models/fraud/predictions", json={"predictions": [late]})
    assert response.status_code == 422, response.text
    [detail] = response.json()["error"]["details"]
    assert "timestamp" in detail["field"]


def test_recompute_marks_the_windows_ended_by_the_clock(client: TestClient) -> None:
    create_model(client, "fraud", window="5m", grace="0s")
    items = _items(EARLIER, "a") + _items(CURRENT, "b")
    response = client.post("/v1/models/fraud/predictions", json={"predictions": items})
    assert response.status_code == 200, response.text
    # the window open at the clock's instant has not ended: it is not marked
    response = client.post(
        "/v1/models/fraud/recompute",
        params={"start": EARLIER.isoformat(), "end": (CURRENT + 12 * FIVE_MINUTES).isoformat()},
    )
    assert response.status_code == 202, response.text
    assert response.json()["windows"] == [{"start": iso(EARLIER), "end": iso(CURRENT)}]


def test_computed_at_and_the_stale_alert_follow_the_clock(
    client: TestClient, settings: Settings, clock: SetClock
) -> None:
    create_model(client, "fraud", window="5m", grace="0s")
    response = client.post(
        "/v1/models/fraud/predictions", json={"predictions": _items(EARLIER, "a")}
    )
    assert response.status_code == 200, response.text
    scheduler = WindowScheduler(settings, instance="clock-test", clock=clock)
    try:
        assert scheduler.tick().computed == 1
    finally:
        scheduler.shutdown()
    [record] = windows(client, "fraud")
    assert record["start"] == iso(EARLIER)
    assert datetime.fromisoformat(record["computed_at"]) == NOW

    assert "stale" not in client.get("/ui").text
    clock.at = NOW + timedelta(days=1)
    assert "stale: no window computed since" in client.get("/ui").text
