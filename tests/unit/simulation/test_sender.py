"""The sender: request bodies the API accepts, and a real upload through the API (the retries
are the client's: tests/unit/client/test_api.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import orjson
import pytest
from calmon_client import Api, ApiError
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from calmon.api.app import create_app
from calmon.db.models import Prediction
from calmon.services.ingest_schemas import PROBABILITY_PREDICTION_BATCH
from calmon.settings import Settings
from calmon.simulation.sender import SendTotals, encode_batches, send_windows
from calmon.simulation.stream import PHASES, WindowData, WindowPlan, generate_window
from tests.support.databases import upgraded

START = datetime(2024, 5, 1, 11, 0, tzinfo=UTC)


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


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    """The real API on a migrated SQLite file, retention off (the stream's event times are
    fixed instants long past), through the client's :class:`Api`."""
    url = upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    settings = Settings(database_url=url, retention_days=0)
    with TestClient(create_app(settings)) as client:
        yield Api(client=client, max_retry_delay=0.05)


def _stored(api: Api) -> tuple[int, int]:
    factory = api.http.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        count = session.scalar(select(func.count()).select_from(Prediction))
        positives = session.scalar(select(func.sum(Prediction.label)))
    return int(count or 0), int(positives or 0)


def test_send_windows_stores_every_prediction_once(api: Api) -> None:
    status, _ = api.request("PUT", "/v1/models/sim", content=orjson.dumps({"window": "5m"}))
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
    )
    assert totals == [SendTotals(new=1_200, duplicates=0), SendTotals(new=700, duplicates=0)]
    assert sorted(batches) == [200, 200, 500, 500, 500]
    assert seen == [(0, totals[0]), (1, totals[1])]
    assert _stored(api) == (1_900, sum(w.n_pos for w in windows))
    again = send_windows(api, model="sim", windows=windows, batch_size=1_000, concurrency=1)
    assert again == [SendTotals(new=0, duplicates=1_200), SendTotals(new=0, duplicates=700)]
    assert _stored(api) == (1_900, sum(w.n_pos for w in windows))


def test_send_windows_stops_on_a_refused_batch(api: Api) -> None:
    with pytest.raises(ApiError, match="404 model_not_found"):
        send_windows(api, model="absent", windows=[_window(100)], batch_size=50, concurrency=2)
