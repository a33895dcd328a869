"""The window API: record shape and values, order, filters, pages, errors, scopes, and the
recompute endpoint. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from calmon.catalogue import ESTIMATED_CALIBRATED, ESTIMATED_REGULAR, SPLIT_METRICS
from calmon.metrics import REGULAR_METRICS, evaluate
from calmon.scheduler.runner import WindowScheduler
from calmon.services.model_registry import get_model
from calmon.services.windows.results import request_recompute
from tests.integration.api.helpers import error_of
from tests.integration.scheduler.helpers import (
    Batch,
    SettledClock,
    by_window,
    create_model,
    iso,
    make_batch,
    send,
    windows,
)
from tests.support.clients import ClientFactory

FIVE_MINUTES = timedelta(minutes=5)
READ = "read-token-0123456789"
ADMIN = "admin-token-0123456789"
RECORD_KEYS = {
    "advice",
    "estimated",
    "start",
    "end",
    "segment",
    "computed_at",
    "n",
    "n_pos",
    "unlabelled",
    "prior",
    "prior_interval",
    "regular",
    "calibrated",
    "intervals",
    "split",
    "reference",
    "reliability",
    "segments_overflow",
    "decision",
}
PROBABILITY_ONLY = {"brier", "brier_skill", "brier_pos", "brier_neg", "log_loss", "ece", "mce"}


def _start(clock: SettledClock, index: int) -> datetime:
    """Start of the index-th of three closed 5-minute windows (0 = oldest)."""
    return clock.recent(4 - index)


def _three_windows(clock: SettledClock, client: TestClient, model: str, **config: Any) -> Batch:
    create_model(client, model, window="5m", grace="0s", **config)
    batch = make_batch(
        prefix=model,
        start=_start(clock, 0),
        count=3 * 100,
        spacing=timedelta(seconds=3),
        seed=21,
        segments=["b", "a", None],
        unlabelled=0.1,
    )
    send(client, model, batch)
    return batch


def test_records_have_the_documented_shape_and_values(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    batch = _three_windows(clock, client, "fraud", pi0=[0.1, 0.5], threshold=0.4)
    assert scheduler.tick().computed == 3
    records = windows(client, "fraud")
    assert len(records) == 9
    for record in records:
        assert set(record) == RECORD_KEYS
        start = datetime.fromisoformat(record["start"])
        assert datetime.fromisoformat(record["end"]) - start == FIVE_MINUTES
        segment = None if record["segment"] == "*" else record["segment"]
        part = batch.where(start, start + FIVE_MINUTES, segment)
        scores, labels = part.labelled()
        expected = evaluate(scores, labels, threshold=0.4, pi0=[0.1, 0.5], score_kind="probability")
        assert (record["n"], record["n_pos"]) == (labels.size, int(labels.sum()))
        assert record["unlabelled"] == len(part.items) - labels.size
        assert record["prior"] == pytest.approx(labels.mean(), abs=1e-15)
        low, high = record["prior_interval"]
        assert 0.0 <= low < record["prior"] < high <= 1.0
        assert list(record["regular"]) == list(REGULAR_METRICS)
        for name, value in expected["regular"].items():
            assert record["regular"][name] == pytest.approx(value, abs=1e-12), name
        assert set(record["calibrated"]) == {"reference", "0.1", "0.5"}
        for key in ("0.1", "0.5"):
            assert record["calibrated"][key] == pytest.approx(
                expected["calibrated"][key], abs=1e-12
            )
        assert set(record["intervals"]) == {"regular", "calibrated", "absent"}
        assert set(record["intervals"]["calibrated"]) == {"reference", "0.1", "0.5"}
        absent = record["intervals"]["absent"]
        assert set(absent["calibrated"]) == {"reference", "0.1", "0.5"}
        for name, bounds in record["intervals"]["regular"].items():
            assert bounds is None or bounds[0] <= bounds[1], name
            assert (bounds is None) == (name in absent["regular"]), name
        assert absent["regular"]["ks"] == "no_method"
        assert record["intervals"]["regular"]["roc_auc"] is not None
        assert len(record["reliability"]) == 10
        assert sum(row["count"] for row in record["reliability"]) == record["n"]
        assert record["segments_overflow"] == (
            {"segments": 0, "predictions": 0} if segment is None else None
        )
        decision = record["decision"]
        assert decision["n_pos"] >= record["n_pos"]
        assert decision["verdict"] in {
            "model_got_worse",
            "class_ratio_moved",
            "both",
            "stable",
            "not_enough_data",
        }
        if start == _start(clock, 0):
            assert record["split"] is None
            assert record["reference"] is None
            assert record["estimated"] is None
            assert decision["windows"] == 1
            assert decision["verdict"] == "not_enough_data"
        else:
            estimated = record["estimated"]
            assert estimated["method"] == "saerens_em_isotonic"
            # every scored prediction, labelled or not
            assert estimated["n"] == len(part.items)
            low, high = estimated["positive_class_ratio_interval"]
            assert 0.0 <= low <= estimated["positive_class_ratio"] <= high <= 1.0
            assert list(estimated["regular"]) == list(ESTIMATED_REGULAR)
            assert set(estimated["calibrated"]) == {"0.1", "0.5"}
            for values in estimated["calibrated"].values():
                assert list(values) == list(ESTIMATED_CALIBRATED)
            assert set(record["split"]) == set(SPLIT_METRICS)
            for parts in record["split"].values():
                assert set(parts) == {
                    "total",
                    "prior",
                    "likelihood",
                    "prior_interval",
                    "likelihood_interval",
                }
            assert set(record["reference"]) == {
                "kind",
                "start",
                "end",
                "windows",
                "n",
                "n_pos",
                "prior",
                "regular",
            }


def test_score_models_have_no_probability_metrics(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    create_model(client, "ranker", window="5m", grace="0s", score_kind="score", threshold=0.0)
    items = [
        {"id": f"s{i}", "timestamp": (_start(clock, 0) + timedelta(seconds=i)).isoformat(),
         "score": float(v), "label": i % 2}
        for i, v in enumerate(np.linspace(-3.0, 5.0, 40))
    ]  # fmt: skip
    assert client.post("/v1/models/ranker/predictions", json={"predictions": items}).is_success
    scheduler.tick()
    [record] = windows(client, "ranker")
    assert set(record) == RECORD_KEYS - {"reliability"}
    assert not PROBABILITY_ONLY & set(record["regular"])
    assert record["regular"]["roc_auc"] is not None


def test_order_filters_and_pages(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    _three_windows(clock, client, "fraud")
    scheduler.tick()
    everything = windows(client, "fraud")
    order = [(r["start"], r["segment"]) for r in everything]
    starts = [iso(_start(clock, i)) for i in range(3)]
    assert order == [(s, name) for s in starts for name in ("*", "a", "b")]

    only = windows(client, "fraud", segment="a")
    assert [(r["start"], r["segment"]) for r in only] == [(s, "a") for s in starts]
    assert [r["segment"] for r in windows(client, "fraud", segment="*")] == ["*"] * 3
    assert windows(client, "fraud", segment="zz") == []

    # Windows overlapping [start, end): a start inside window 1 keeps it.
    inside = (_start(clock, 1) + timedelta(minutes=2)).isoformat()
    assert list(by_window(windows(client, "fraud", start=inside))) == starts[1:]
    assert list(by_window(windows(client, "fraud", end=_start(clock, 1).isoformat()))) == starts[:1]
    ranged = windows(
        client, "fraud", start=_start(clock, 1).isoformat(), end=_start(clock, 2).isoformat()
    )
    assert list(by_window(ranged)) == starts[1:2]

    pages: list[list[tuple[str, str]]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        body = client.get("/v1/models/fraud/windows", params=params).json()
        pages.append([(r["start"], r["segment"]) for r in body["windows"]])
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert [len(page) for page in pages] == [2, 2, 2, 2, 1]
    assert [item for page in pages for item in page] == order


FIRST = "0001-01-01T00:00:00+01:00"
LAST = "9999-12-31T23:59:59-01:00"


def test_window_query_bounds_beyond_utc_cut_nothing(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    _three_windows(clock, client, "fraud")
    scheduler.tick()
    everything = windows(client, "fraud")
    assert len(everything) == 9
    assert windows(client, "fraud", start=FIRST, end=LAST) == everything
    assert windows(client, "fraud", start=FIRST) == everything
    assert windows(client, "fraud", end=LAST, segment="a") == windows(client, "fraud", segment="a")
    assert windows(client, "fraud", start=LAST) == []
    assert windows(client, "fraud", end=FIRST) == []
    assert windows(client, "fraud", start="1969-12-31T23:00:00-05:00") == everything
    reversed_range = client.get("/v1/models/fraud/windows", params={"start": LAST, "end": FIRST})
    assert reversed_range.status_code == 422
    assert [d["field"] for d in error_of(reversed_range)["details"]] == ["end"]


def test_recompute_range_is_cut_to_the_epoch_and_now(client: TestClient) -> None:
    create_model(client, "weekly", window="7d")
    old = datetime.now(UTC) - timedelta(days=8)
    week = datetime.fromtimestamp(old.timestamp() // 604_800 * 604_800, tz=UTC)
    item = {"id": "a", "timestamp": old.isoformat(), "score": 0.5, "label": 1}
    assert client.post("/v1/models/weekly/predictions", json={"predictions": [item]}).is_success
    for start, end in ((FIRST, LAST), ("1900-01-01T00:00:00Z", "2200-01-01T00:00:00Z")):
        response = client.post("/v1/models/weekly/recompute", params={"start": start, "end": end})
        assert response.status_code == 202, response.text
        assert response.json()["windows"] == [
            {"start": iso(week), "end": iso(week + timedelta(days=7))}
        ]
    future = {"start": (datetime.now(UTC) + timedelta(days=1)).isoformat(), "end": LAST}
    response = client.post("/v1/models/weekly/recompute", params=future)
    assert (response.status_code, response.json()["windows"]) == (202, [])


def test_recompute_of_too_many_windows_is_422_however_far_the_range(client: TestClient) -> None:
    create_model(client, "fraud", window="5m")
    for start, end in ((FIRST, LAST), ("1970-01-01T00:00:00Z", "2200-01-01T00:00:00Z")):
        response = client.post("/v1/models/fraud/recompute", params={"start": start, "end": end})
        assert response.status_code == 422
        [detail] = error_of(response)["details"]
        assert detail["field"] == "end"
        assert "more than 10000 windows" in detail["message"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "end"),
        ({"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "end"),
        ({"start": "2026-01-01T00:00:00"}, "start"),
        ({"end": "yesterday"}, "end"),
        ({"segment": "no spaces"}, "segment"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"cursor": "garbage"}, "cursor"),
        ({"cursor": "253402300800:*"}, "cursor"),
        ({"cursor": "-62135596801:*"}, "cursor"),
        ({"cursor": "99999999999999999999:*"}, "cursor"),
        ({"cursor": "0:\x00"}, "cursor"),
        ({"cursor": ""}, "cursor"),
        ({"start": "0"}, "start"),
        ({"end": "1714550400"}, "end"),
    ],
)
def test_bad_window_queries_are_422(client: TestClient, params: dict[str, Any], field: str) -> None:
    create_model(client, "fraud")
    response = client.get("/v1/models/fraud/windows", params=params)
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "validation_error"
    assert [detail["field"] for detail in error["details"]] == [field]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"start": "0", "end": "2026-01-02T00:00:00Z"}, "start"),
        ({"start": "2026-01-01T00:00:00Z", "end": "1.5e9"}, "end"),
    ],
)
def test_numbers_are_not_instants(
    sqlite_client: TestClient, params: dict[str, str], field: str
) -> None:
    create_model(sqlite_client, "fraud")
    response = sqlite_client.post("/v1/models/fraud/recompute", params=params)
    assert response.status_code == 422
    assert [detail["field"] for detail in error_of(response)["details"]] == [field]


def test_unknown_model_is_404(client: TestClient) -> None:
    for response in (
        client.get("/v1/models/nope/windows"),
        client.post(
            "/v1/models/nope/recompute",
            params={"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"},
        ),
    ):
        assert response.status_code == 404
        assert error_of(response)["code"] == "model_not_found"


def test_recompute_marks_windows_and_the_scheduler_computes_them(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    create_model(client, "fraud", window="5m", grace="1h")
    batch = make_batch(
        prefix="p", start=_start(clock, 1), count=100, spacing=timedelta(seconds=5), seed=8
    )
    send(client, "fraud", batch)
    assert scheduler.tick().computed == 0  # within grace
    now = datetime.now(UTC)
    response = client.post(
        "/v1/models/fraud/recompute",
        params={"start": _start(clock, 0).isoformat(), "end": (now + FIVE_MINUTES).isoformat()},
    )
    assert response.status_code == 202
    body = response.json()
    # Only ended windows holding predictions; the open window and empty ones are not listed.
    assert body == {
        "status": "pending",
        "windows": [
            {"start": iso(_start(clock, 1)), "end": iso(_start(clock, 2))},
            {"start": iso(_start(clock, 2)), "end": iso(_start(clock, 3))},
        ],
    }
    assert scheduler.tick().computed == 2
    first = by_window(windows(client, "fraud"))
    assert list(first) == [iso(_start(clock, 1)), iso(_start(clock, 2))]
    assert scheduler.tick().computed == 0

    response = client.post(
        "/v1/models/fraud/recompute",
        params={"start": _start(clock, 1).isoformat(), "end": _start(clock, 2).isoformat()},
    )
    assert response.json()["windows"] == [
        {"start": iso(_start(clock, 1)), "end": iso(_start(clock, 2))}
    ]
    assert scheduler.tick().computed == 1
    second = by_window(windows(client, "fraud"))
    assert (
        second[iso(_start(clock, 1))]["computed_at"] > first[iso(_start(clock, 1))]["computed_at"]
    )
    assert second[iso(_start(clock, 1))]["regular"] == first[iso(_start(clock, 1))]["regular"]
    assert (
        second[iso(_start(clock, 2))]["computed_at"] == first[iso(_start(clock, 2))]["computed_at"]
    )

    empty = client.post(
        "/v1/models/fraud/recompute",
        params={"start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"},
    )
    assert (empty.status_code, empty.json()["windows"]) == (202, [])


def test_recompute_of_thousands_of_windows_takes_a_few_statements(client: TestClient) -> None:
    create_model(client, "fraud", window="5m")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    items = [
        {"id": f"p-{i}", "timestamp": (start + i * timedelta(hours=7)).isoformat(), "score": 0.5}
        for i in range(100)
    ]
    stored = client.post("/v1/models/fraud/predictions", json={"predictions": items})
    assert stored.status_code == 200, stored.text
    statements: list[str] = []
    engine = client.app.state.engine  # type: ignore[attr-defined]

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        response = client.post(
            "/v1/models/fraud/recompute",
            params={
                "start": start.isoformat(),
                "end": (start + 9792 * FIVE_MINUTES).isoformat(),
            },
        )
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert response.status_code == 202, response.text
    expected = [start + i * timedelta(hours=7) for i in range(100)]
    assert [w["start"] for w in response.json()["windows"]] == [iso(s) for s in expected]
    assert len(statements) <= 10, statements


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"start": "2026-01-01T00:00:00Z"}, "end"),
        ({"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "end"),
        ({"start": "2000-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "end"),
        ({"start": "2026-01-01", "end": "2026-01-02T00:00:00Z"}, "start"),
    ],
)
def test_bad_recompute_ranges_are_422(
    client: TestClient, params: dict[str, Any], field: str
) -> None:
    create_model(client, "fraud", window="5m")
    response = client.post("/v1/models/fraud/recompute", params=params)
    assert response.status_code == 422
    assert [d["field"] for d in error_of(response)["details"]] == [field]


def test_windows_need_read_and_recompute_needs_admin(make_client: ClientFactory) -> None:
    secured = make_client(api_tokens=f"{READ}:read,{ADMIN}:admin")
    admin = {"authorization": f"Bearer {ADMIN}"}
    read = {"authorization": f"Bearer {READ}"}
    assert secured.put("/v1/models/fraud", json={}, headers=admin).status_code == 201
    params = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}
    assert secured.get("/v1/models/fraud/windows").status_code == 401
    assert secured.get("/v1/models/fraud/windows", headers=read).status_code == 200
    assert secured.get("/v1/models/fraud/windows", headers=admin).status_code == 200
    denied = secured.post("/v1/models/fraud/recompute", params=params, headers=read)
    assert denied.status_code == 403
    assert error_of(denied)["code"] == "forbidden"
    allowed = secured.post("/v1/models/fraud/recompute", params=params, headers=admin)
    assert allowed.status_code == 202


def test_the_recompute_service_bounds_every_caller(client: TestClient) -> None:
    """The cap holds for any caller of the service, not only the route: nothing is marked."""
    create_model(client, "fraud", window="5m")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    item = {"id": "a", "timestamp": start.isoformat(), "score": 0.5}
    assert client.post("/v1/models/fraud/predictions", json={"predictions": [item]}).is_success
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    now = start + 20_000 * FIVE_MINUTES
    with factory() as session:
        model = get_model(session, name="fraud")
        assert model is not None
        with pytest.raises(ValueError, match="more than 10000 windows; split it"):
            request_recompute(
                session, model=model, start=start, end=start + 10_001 * FIVE_MINUTES, now=now
            )
        end = start + 10_000 * FIVE_MINUTES
        assert request_recompute(session, model=model, start=start, end=end, now=now) == [start]
