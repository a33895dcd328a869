"""The sender: request bodies the API accepts, retries, and a real upload through the API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from calmon.api.app import create_app
from calmon.db.models import Prediction
from calmon.services.ingest_schemas import PROBABILITY_PREDICTION_BATCH
from calmon.settings import Settings
from calmon.simulation.sender import (
    RetryPolicy,
    SendError,
    SendTotals,
    encode_batches,
    request_json,
    send_windows,
)
from calmon.simulation.stream import PHASES, WindowData, WindowPlan, generate_window
from tests.support.databases import upgraded

START = datetime(2024, 5, 1, 11, 0, tzinfo=UTC)
FAST = RetryPolicy(attempts=4, first_delay=0.01, max_delay=0.05)


def _window(size: int, index: int = 0, phase: str = "stable") -> WindowData:
    start = START + index * timedelta(minutes=5)
    plan = WindowPlan(
        index=index, phase=PHASES[phase], start=start, end=start + timedelta(minutes=5), size=size
    )
    return generate_window(plan, seed=3)


def test_bodies_pass_the_api_schema_and_keep_every_value() -> None:
    data = _window(2_500)
    bodies = encode_batches(data, batch_size=1_000)
    assert len(bodies) == 3
    parsed = [PROBABILITY_PREDICTION_BATCH.validate_json(body)["predictions"] for body in bodies]
    assert [len(batch) for batch in parsed] == [1_000, 1_000, 500]
    items = [item for batch in parsed for item in batch]
    assert [item["id"] for item in items] == data.ids
    micros = [
        (item["timestamp"] - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        for item in items
    ]
    assert micros == data.timestamps.tolist()
    assert all(item["timestamp"].utcoffset() == timedelta(0) for item in items)
    np.testing.assert_array_equal([item["score"] for item in items], data.scores)
    assert [item.get("label") for item in items] == data.labels.tolist()
    assert all("segment" not in item for item in items)


@pytest.mark.parametrize("size", [0, 10_001])
def test_batch_size_is_bounded(size: int) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        encode_batches(_window(10), batch_size=size)


def _client(responses: list[httpx.Response | Exception]) -> tuple[httpx.Client, list[str]]:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path} {request.headers.get('authorization')}")
        answer = responses.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    transport = httpx.MockTransport(handler)
    client = httpx.Client(
        transport=transport, base_url="http://calmon.test", headers={"Authorization": "Bearer t"}
    )
    return client, seen


def test_connection_errors_and_503_are_retried_with_backoff() -> None:
    client, seen = _client(
        [
            httpx.ConnectError("refused"),
            httpx.Response(503, json={"error": {"code": "x", "message": "busy", "details": []}}),
            httpx.Response(503, headers={"Retry-After": "0.03"}),
            httpx.Response(200, json={"new": 3, "duplicates": 0}),
        ]
    )
    sleeps: list[float] = []
    status, body = request_json(
        client, "POST", "/v1/p", body=b"{}", retry=FAST, sleep=sleeps.append
    )
    assert (status, body) == (200, {"new": 3, "duplicates": 0})
    assert seen == ["POST /v1/p Bearer t"] * 4
    assert sleeps == [0.01, 0.02, 0.03]


def test_other_errors_stop_at_once_with_the_server_message() -> None:
    error = {
        "error": {"code": "conflict", "message": "ids exist with other content", "details": []}
    }
    client, seen = _client([httpx.Response(409, json=error)])
    with pytest.raises(SendError, match="409 conflict: ids exist with other content"):
        request_json(client, "POST", "/v1/p", body=b"{}", retry=FAST, sleep=lambda _s: None)
    assert len(seen) == 1


def test_retries_are_bounded() -> None:
    client, seen = _client([httpx.ReadTimeout("slow")] * 4)
    with pytest.raises(SendError, match="gave up after 4 attempts: ReadTimeout"):
        request_json(client, "GET", "/v1/x", retry=FAST, sleep=lambda _s: None)
    assert len(seen) == 4


def test_delays_are_capped() -> None:
    policy = RetryPolicy(attempts=10, first_delay=0.5, max_delay=3.0)
    assert [policy.delay(k, None) for k in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.delay(0, "120") == 3.0
    assert policy.delay(0, "soon") == 0.5


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    """The real API on a migrated SQLite file, retention off (the stream's event times are
    fixed instants long past)."""
    url = upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    settings = Settings(database_url=url, retention_days=0)
    with TestClient(create_app(settings)) as client:
        yield client


def _stored(api: TestClient) -> tuple[int, int]:
    factory = api.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        count = session.scalar(select(func.count()).select_from(Prediction))
        positives = session.scalar(select(func.sum(Prediction.label)))
    return int(count or 0), int(positives or 0)


def test_send_windows_stores_every_prediction_once(api: TestClient) -> None:
    status, _ = request_json(
        api, "PUT", "/v1/models/sim", body=orjson.dumps({"window": "5m"}), retry=FAST
    )
    assert status == 201
    windows = [_window(1_200, 0), _window(700, 1, "prior")]
    batches: list[int] = []
    seen: list[tuple[int, SendTotals]] = []
    totals = send_windows(
        api,
        model="sim",
        windows=windows,
        batch_size=500,
        concurrency=2,
        on_batch=lambda _data, rows: batches.append(rows),
        on_window=lambda data, t: seen.append((data.plan.index, t)),
        retry=FAST,
    )
    assert totals == [SendTotals(new=1_200, duplicates=0), SendTotals(new=700, duplicates=0)]
    assert sorted(batches) == [200, 200, 500, 500, 500]
    assert seen == [(0, totals[0]), (1, totals[1])]
    assert _stored(api) == (1_900, sum(w.n_pos for w in windows))
    again = send_windows(api, model="sim", windows=windows, batch_size=1_000, concurrency=1)
    assert again == [SendTotals(new=0, duplicates=1_200), SendTotals(new=0, duplicates=700)]
    assert _stored(api) == (1_900, sum(w.n_pos for w in windows))


def test_send_windows_stops_on_a_refused_batch(api: TestClient) -> None:
    with pytest.raises(SendError, match="404 model_not_found"):
        send_windows(api, model="absent", windows=[_window(100)], batch_size=50, concurrency=2)
