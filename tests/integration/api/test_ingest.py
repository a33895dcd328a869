"""Prediction and label ingestion on both backends: all or nothing, duplicates, conflicts,
validation with field positions, pending labels and relabels."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.integration.api.helpers import (
    TS,
    create_model,
    error_of,
    post_labels,
    post_predictions,
    prediction,
    stored_predictions,
)
from tests.support.clients import ClientFactory


@pytest.fixture
def fraud(client: TestClient) -> TestClient:
    create_model(client, "fraud")
    return client


def test_new_then_exact_repeat_is_duplicate(fraud: TestClient) -> None:
    items = [
        prediction("a", 0.1, label=1, segment="country=FR"),
        prediction("b", 0.9),
        prediction("c", 0.0, label=0),
    ]
    first = post_predictions(fraud, items)
    assert first.status_code == 200
    assert first.json() == {"new": 3, "duplicates": 0, "pending_labels_applied": 0}
    before = stored_predictions(fraud)
    again = post_predictions(fraud, [*items, prediction("d", 0.4)])
    assert again.json() == {"new": 1, "duplicates": 3, "pending_labels_applied": 0}
    after = stored_predictions(fraud)
    assert {k: after[k] for k in before} == before
    assert after["a"]["ts"] == datetime(2024, 5, 1, 8, tzinfo=UTC)
    assert after["a"]["segment"] == "country=FR"
    assert after["a"]["label"] == 1
    assert after["a"]["labelled_at"] == after["a"]["received_at"]
    assert after["b"]["label"] is None
    assert after["b"]["labelled_at"] is None


def test_repeat_with_same_instant_in_other_offset_is_duplicate(fraud: TestClient) -> None:
    post_predictions(fraud, [prediction("a", 0.25)])
    repeat = {"id": "a", "timestamp": "2024-05-01T08:00:00Z", "score": 0.25}
    assert post_predictions(fraud, [repeat]).json()["duplicates"] == 1


def test_repeat_without_label_of_labelled_prediction_is_duplicate(fraud: TestClient) -> None:
    post_predictions(fraud, [prediction("a", 0.5, label=1)])
    assert post_predictions(fraud, [prediction("a", 0.5)]).json()["duplicates"] == 1


@pytest.mark.parametrize(
    "changed",
    [
        {"score": 0.51},
        {"timestamp": "2024-05-01T10:00:01+02:00"},
        {"segment": "country=DE"},
        {"label": 0},
    ],
)
def test_same_id_other_content_is_409_and_nothing_stored(
    fraud: TestClient, changed: dict[str, Any]
) -> None:
    post_predictions(fraud, [prediction("a", 0.5, label=1, segment="country=FR")])
    before = stored_predictions(fraud)
    batch = [
        prediction("new-1"),
        {**prediction("a", 0.5, label=1, segment="country=FR"), **changed},
        prediction("new-2"),
    ]
    response = post_predictions(fraud, batch)
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "prediction_conflict"
    assert error["details"] == [{"id": "a"}]
    assert stored_predictions(fraud) == before


def test_409_names_every_conflicting_id_sorted(fraud: TestClient) -> None:
    post_predictions(fraud, [prediction(i, 0.5) for i in ("x", "b", "m")])
    response = post_predictions(fraud, [prediction(i, 0.6) for i in ("m", "x", "b", "q")])
    assert response.status_code == 409
    assert error_of(response)["details"] == [{"id": "b"}, {"id": "m"}, {"id": "x"}]
    assert set(stored_predictions(fraud)) == {"x", "b", "m"}


def test_conflict_with_stored_prediction_says_the_id_exists(fraud: TestClient) -> None:
    post_predictions(fraud, [prediction("a", 0.1)])
    response = post_predictions(fraud, [prediction("a", 0.2), prediction("a", 0.2)])
    assert response.status_code == 409
    error = error_of(response)
    assert error["message"] == "1 prediction id(s) already exist with other content"
    assert error["details"] == [{"id": "a"}]


@pytest.mark.parametrize(
    "copies",
    [
        [prediction("a", 0.1), prediction("a", 0.2)],
        [prediction("a", label=0), prediction("a"), prediction("a", label=1)],
        [prediction("a"), {**prediction("a"), "timestamp": "2024-05-01T10:00:00.000001+02:00"}],
        [prediction("a", segment="s1"), prediction("a")],
    ],
)
def test_conflict_inside_one_batch(fraud: TestClient, copies: list[dict[str, Any]]) -> None:
    response = post_predictions(fraud, [prediction("b"), *copies])
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "prediction_conflict"
    assert error["message"] == "1 prediction id(s) conflict within the batch (copies differ)"
    assert error["details"] == [{"id": "a"}]
    assert stored_predictions(fraud) == {}


def test_conflicts_within_the_batch_and_with_stored_ones_are_both_told(
    fraud: TestClient,
) -> None:
    post_predictions(fraud, [prediction("s", 0.1), prediction("w", 0.1)])
    batch = [
        prediction("s", 0.2),
        prediction("w", 0.1),
        prediction("w", 0.3),
        prediction("x", 0.1),
        prediction("x", 0.3),
        prediction("ok"),
    ]
    response = post_predictions(fraud, batch)
    assert response.status_code == 409
    error = error_of(response)
    assert error["message"] == (
        "2 prediction id(s) conflict within the batch (copies differ);"
        " 1 prediction id(s) already exist with other content"
    )
    assert error["details"] == [{"id": "s"}, {"id": "w"}, {"id": "x"}]
    assert set(stored_predictions(fraud)) == {"s", "w"}


def test_repeat_inside_one_batch_prefers_labelled_copy(fraud: TestClient) -> None:
    batch = [prediction("a", 0.1), prediction("a", 0.1, label=1), prediction("a", 0.1)]
    assert post_predictions(fraud, batch).json() == {
        "new": 1,
        "duplicates": 2,
        "pending_labels_applied": 0,
    }
    assert stored_predictions(fraud)["a"]["label"] == 1


def test_one_invalid_item_rejects_the_whole_batch(fraud: TestClient) -> None:
    batch = [prediction(f"p{i}", 0.5) for i in range(20)]
    batch[17]["score"] = 1.5
    response = post_predictions(fraud, batch)
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "validation_error"
    assert [d["field"] for d in error["details"]] == ["predictions[17].score"]
    assert stored_predictions(fraud) == {}


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"timestamp": "2024-05-01T10:00:00"}, "timestamp"),
        ({"timestamp": "yesterday"}, "timestamp"),
        ({"timestamp": 1714550400}, "timestamp"),
        ({"timestamp": "1714550400"}, "timestamp"),
        ({"timestamp": "1714550400.5"}, "timestamp"),
        ({"timestamp": "2024-05-01"}, "timestamp"),
        ({"timestamp": None}, "timestamp"),
        ({"score": -0.01}, "score"),
        ({"score": "0.5"}, "score"),
        ({"label": 2}, "label"),
        ({"label": True}, "label"),
        ({"label": "1"}, "label"),
        ({"segment": "*"}, "segment"),
        ({"segment": "a" * 65}, "segment"),
        ({"segment": "has space"}, "segment"),
        ({"id": "x" * 129}, "id"),
        ({"id": ""}, "id"),
        ({"id": "tab\there"}, "id"),
        ({"id": 12}, "id"),
        ({"lable": 1}, "lable"),
    ],
)
def test_invalid_prediction_field(
    sqlite_client: TestClient, item: dict[str, Any], field: str
) -> None:
    create_model(sqlite_client, "fraud")
    batch = [prediction("ok"), {**prediction("bad"), **item}]
    response = post_predictions(sqlite_client, batch)
    assert response.status_code == 422, response.text
    assert f"predictions[1].{field}" in [d["field"] for d in error_of(response)["details"]]
    assert stored_predictions(sqlite_client) == {}


def _in(delta: timedelta) -> str:
    """The server's clock (well, the test's) moved by ``delta``, with an offset."""
    return (datetime.now(UTC) + delta).astimezone(timezone(timedelta(hours=-3))).isoformat()


def _second_timestamp_refused(response: Any) -> dict[str, Any]:
    """The one error detail of a 422 that refuses the second item's timestamp alone."""
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "validation_error"
    assert error["message"] == "1 invalid field: predictions[1].timestamp"
    [detail] = error["details"]
    assert detail["field"] == "predictions[1].timestamp"
    return dict(detail)


@pytest.mark.parametrize("score_kind", ["probability", "score"])
@pytest.mark.parametrize(
    ("timestamp", "error_type"),
    [
        ("9999-12-31T23:59:59-01:00", "less_than_equal"),
        ("0001-01-01T00:00:00+01:00", "greater_than_equal"),
        ("1969-12-31T23:59:59.999999Z", "greater_than_equal"),
        ("1970-01-01T00:59:59+01:00", "greater_than_equal"),
        ("2200-01-01T00:00:00Z", "less_than_equal"),
        (timedelta(days=1, minutes=1), "less_than_equal"),
    ],
)
def test_timestamp_before_epoch_or_over_a_day_ahead_is_422(
    client: TestClient, score_kind: str, timestamp: str | timedelta, error_type: str
) -> None:
    create_model(client, "m", score_kind=score_kind)
    stamp = _in(timestamp) if isinstance(timestamp, timedelta) else timestamp
    batch = [prediction("ok"), {**prediction("bad"), "timestamp": stamp}, prediction("ok2")]
    detail = _second_timestamp_refused(post_predictions(client, batch, model="m"))
    assert detail["type"] == error_type
    bound = "1970-01-01T00:00:00Z" if error_type == "greater_than_equal" else "Z"
    assert detail["message"].startswith("Input should be ")
    assert detail["message"].endswith(bound)
    assert stored_predictions(client) == {}


def test_timestamp_bound_names_the_latest_instant(client: TestClient) -> None:
    create_model(client, "m")
    before = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    response = post_predictions(client, [prediction("a", timestamp=_in(timedelta(days=3)))], "m")
    after = datetime.now(UTC) + timedelta(days=1)
    message = error_of(response)["details"][0]["message"]
    prefix = "Input should be less than or equal to "
    assert message.startswith(prefix)
    assert before <= datetime.fromisoformat(message.removeprefix(prefix)) <= after


def test_timestamps_from_the_epoch_to_a_day_ahead_are_stored(client: TestClient) -> None:
    create_model(client, "m")
    ahead = _in(timedelta(days=1, seconds=-2))
    items = [
        prediction("epoch", timestamp="1970-01-01T00:00:00Z"),
        prediction("epoch-in-paris", timestamp="1970-01-01T01:00:00+01:00"),
        prediction("ahead", timestamp=ahead),
    ]
    response = post_predictions(client, items, model="m")
    assert response.json()["new"] == 3, response.text
    stored = stored_predictions(client)
    assert stored["epoch"]["ts"] == datetime(1970, 1, 1, tzinfo=UTC)
    assert stored["epoch-in-paris"]["ts"] == datetime(1970, 1, 1, tzinfo=UTC)
    assert stored["ahead"]["ts"] == datetime.fromisoformat(ahead)


@pytest.mark.parametrize("score_kind", ["probability", "score"])
def test_timestamp_before_the_retention_period_is_422_naming_the_earliest_instant(
    make_client: ClientFactory, score_kind: str
) -> None:
    client = make_client(retention_days=30)
    create_model(client, "m", score_kind=score_kind)
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(days=30)
    batch = [
        prediction("ok", timestamp=_in(-timedelta(days=29))),
        {**prediction("old"), "timestamp": _in(-timedelta(days=30, minutes=1))},
        prediction("ok2", timestamp=_in(timedelta(0))),
    ]
    detail = _second_timestamp_refused(post_predictions(client, batch, model="m"))
    after = datetime.now(UTC) - timedelta(days=30)
    assert detail["type"] == "greater_than_equal"
    prefix = "Input should be greater than or equal to "
    assert detail["message"].startswith(prefix)
    assert before <= datetime.fromisoformat(detail["message"].removeprefix(prefix)) <= after
    assert stored_predictions(client) == {}


def test_timestamps_within_the_retention_period_are_stored(make_client: ClientFactory) -> None:
    client = make_client(retention_days=30)
    create_model(client, "m")
    oldest = _in(-timedelta(days=30, seconds=-2))
    items = [prediction("oldest", timestamp=oldest), prediction("now", timestamp=_in(timedelta(0)))]
    response = post_predictions(client, items, model="m")
    assert response.json()["new"] == 2, response.text
    assert stored_predictions(client)["oldest"]["ts"] == datetime.fromisoformat(oldest)


def test_without_retention_the_epoch_is_the_earliest_event_time(
    make_client: ClientFactory,
) -> None:
    client = make_client(retention_days=0)
    create_model(client, "m")
    response = post_predictions(
        client, [prediction("epoch", timestamp="1970-01-01T00:00:00Z")], "m"
    )
    assert response.json()["new"] == 1, response.text


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_non_finite_score_is_422(sqlite_client: TestClient, raw: bytes) -> None:
    create_model(sqlite_client, "s", score_kind="score")
    body = b'{"predictions": [{"id": "a", "timestamp": "%s", "score": %s}]}' % (TS.encode(), raw)
    response = sqlite_client.post(
        "/v1/models/s/predictions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert [d["field"] for d in error_of(response)["details"]] == ["predictions[0].score"]


def test_score_models_take_any_finite_score(fraud: TestClient) -> None:
    create_model(fraud, "ranker", score_kind="score")
    items = [prediction("a", -3.5), prediction("b", 12.0), prediction("c", 1e300)]
    assert post_predictions(fraud, items, model="ranker").json()["new"] == 3
    assert post_predictions(fraud, [prediction("a", 2.0)]).status_code == 422


def test_largest_id_and_segment_are_accepted(fraud: TestClient) -> None:
    client_id = "é" * 128
    segment = "A" + "b_.:=-" * 10 + "xyz"
    assert len(segment) == 64
    response = post_predictions(fraud, [prediction(client_id, segment=segment)])
    assert response.json()["new"] == 1
    assert stored_predictions(fraud)[client_id]["segment"] == segment


def test_batch_limit(sqlite_client: TestClient) -> None:
    create_model(sqlite_client, "fraud")
    batch = [prediction(f"p{i}", (i % 100) / 100) for i in range(10_001)]
    response = post_predictions(sqlite_client, batch)
    assert response.status_code == 422
    assert [d["field"] for d in error_of(response)["details"]] == ["predictions"]
    assert post_predictions(sqlite_client, batch[:10_000]).json()["new"] == 10_000


def test_empty_batch_is_accepted(fraud: TestClient) -> None:
    assert post_predictions(fraud, []).json() == {
        "new": 0,
        "duplicates": 0,
        "pending_labels_applied": 0,
    }


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"predictions": [', "invalid_json"),
        (b"", "invalid_json"),
        (b'[{"id": "a"}]', "validation_error"),
        (b'{"predictions": {}}', "validation_error"),
        (b'{"items": []}', "validation_error"),
    ],
)
def test_malformed_bodies(sqlite_client: TestClient, body: bytes, code: str) -> None:
    create_model(sqlite_client, "fraud")
    response = sqlite_client.post(
        "/v1/models/fraud/predictions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == (400 if code == "invalid_json" else 422)
    assert error_of(response)["code"] == code


@pytest.mark.parametrize(
    ("method", "path", "document"),
    [
        ("POST", "/v1/models/fraud/predictions", {"predictions": [prediction("a")]}),
        ("POST", "/v1/models/fraud/labels", {"labels": [{"id": "b", "label": 1}]}),
        ("PUT", "/v1/models/fraud", {"threshold": 0.7}),
        ("PUT", "/v1/models/new", {}),
    ],
)
@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "text/json"]
)
def test_wrong_content_type_is_415(
    sqlite_client: TestClient,
    content_type: str | None,
    method: str,
    path: str,
    document: dict[str, Any],
) -> None:
    create_model(sqlite_client, "fraud")
    post_predictions(sqlite_client, [prediction("b")])
    before = (sqlite_client.get("/v1/models").json(), stored_predictions(sqlite_client))
    headers = {"content-type": content_type} if content_type else {}
    body = json.dumps(document).encode()
    response = sqlite_client.request(method, path, content=body, headers=headers)
    assert response.status_code == 415
    error = error_of(response)
    assert error["code"] == "unsupported_media_type"
    assert error["details"] == [
        {"field": "Content-Type", "message": f"got {content_type or 'nothing'!r}"}
    ]
    assert (sqlite_client.get("/v1/models").json(), stored_predictions(sqlite_client)) == before
    json_type = {"content-type": "application/json"}
    assert sqlite_client.request(method, path, content=body, headers=json_type).is_success


def test_json_with_charset_is_accepted(sqlite_client: TestClient) -> None:
    create_model(sqlite_client, "fraud")
    body = json.dumps({"predictions": [prediction("a")]}).encode()
    response = sqlite_client.post(
        "/v1/models/fraud/predictions",
        content=body,
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 200


def test_unknown_model_is_404(fraud: TestClient) -> None:
    response = post_predictions(fraud, [prediction("a")], model="other")
    assert response.status_code == 404
    assert error_of(response)["code"] == "model_not_found"
    assert post_labels(fraud, [{"id": "a", "label": 1}], model="other").status_code == 404


def test_unknown_route_and_method_use_the_error_body(sqlite_client: TestClient) -> None:
    missing = sqlite_client.get("/v2/nothing")
    assert missing.status_code == 404
    assert error_of(missing)["code"] == "not_found"
    wrong = sqlite_client.delete("/v1/models/fraud/predictions")
    assert wrong.status_code == 405
    assert error_of(wrong)["code"] == "method_not_allowed"


class TestBodyLimit:
    LIMIT = 2048

    @pytest.fixture
    def small(self, make_client: ClientFactory) -> TestClient:
        client = make_client(max_body_bytes=self.LIMIT)
        create_model(client, "fraud")
        return client

    def _body(self, n: int) -> bytes:
        return json.dumps({"predictions": [prediction(f"id-{i}") for i in range(n)]}).encode()

    def test_content_length_over_limit_is_413(self, small: TestClient) -> None:
        body = self._body(40)
        assert len(body) > self.LIMIT
        response = small.post(
            "/v1/models/fraud/predictions",
            content=body,
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 413
        assert error_of(response)["code"] == "payload_too_large"
        assert stored_predictions(small) == {}

    def test_chunked_body_over_limit_is_413(self, small: TestClient) -> None:
        body = self._body(40)

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(body), 256):
                yield body[start : start + 256]

        response = small.post(
            "/v1/models/fraud/predictions",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert response.request.headers.get("transfer-encoding") == "chunked"
        assert response.status_code == 413
        assert error_of(response)["code"] == "payload_too_large"
        assert stored_predictions(small) == {}

    def test_chunked_body_under_limit_is_served(self, small: TestClient) -> None:
        body = self._body(5)
        assert len(body) < self.LIMIT
        response = small.post(
            "/v1/models/fraud/predictions",
            content=iter([body[:100], body[100:]]),
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 200
        assert response.json()["new"] == 5


class TestLabels:
    def test_label_update_unchanged_and_pending(self, fraud: TestClient) -> None:
        post_predictions(fraud, [prediction("a"), prediction("b", label=1)])
        before = stored_predictions(fraud)
        response = post_labels(
            fraud,
            [{"id": "a", "label": 0}, {"id": "b", "label": 1}, {"id": "zz", "label": 1}],
        )
        assert response.status_code == 200
        assert response.json() == {"updated": 1, "unchanged": 1, "pending": ["zz"], "expired": 0}
        after = stored_predictions(fraud)
        assert after["a"]["label"] == 0
        assert after["a"]["labelled_at"] is not None
        assert after["a"]["changed_at"] > before["a"]["changed_at"]
        assert after["b"] == before["b"]
        assert "zz" not in after

    def test_pending_label_applied_when_prediction_arrives(self, fraud: TestClient) -> None:
        assert post_labels(fraud, [{"id": "late", "label": 1}]).json()["pending"] == ["late"]
        response = post_predictions(fraud, [prediction("late", 0.8), prediction("other")])
        assert response.json() == {"new": 2, "duplicates": 0, "pending_labels_applied": 1}
        stored = stored_predictions(fraud)
        assert stored["late"]["label"] == 1
        assert stored["late"]["labelled_at"] < stored["late"]["received_at"]
        assert stored["other"]["label"] is None
        again = post_predictions(fraud, [prediction("late", 0.8)])
        assert again.json() == {"new": 0, "duplicates": 1, "pending_labels_applied": 0}
        assert post_labels(fraud, [{"id": "late", "label": 1}]).json() == {
            "updated": 0,
            "unchanged": 1,
            "pending": [],
            "expired": 0,
        }

    def test_pending_label_replaced_by_later_label(self, fraud: TestClient) -> None:
        post_labels(fraud, [{"id": "late", "label": 1}])
        assert post_labels(fraud, [{"id": "late", "label": 0}]).json()["pending"] == ["late"]
        post_predictions(fraud, [prediction("late")])
        assert stored_predictions(fraud)["late"]["label"] == 0

    def test_prediction_with_own_label_beats_older_pending(self, fraud: TestClient) -> None:
        post_labels(fraud, [{"id": "late", "label": 0}])
        response = post_predictions(fraud, [prediction("late", label=1)])
        assert response.json()["pending_labels_applied"] == 0
        assert stored_predictions(fraud)["late"]["label"] == 1
        assert post_labels(fraud, [{"id": "late", "label": 1}]).json()["unchanged"] == 1

    def test_relabel_later_label_wins(self, fraud: TestClient) -> None:
        post_predictions(fraud, [prediction("a", label=1)])
        first = stored_predictions(fraud)["a"]
        assert post_labels(fraud, [{"id": "a", "label": 0}]).json()["updated"] == 1
        second = stored_predictions(fraud)["a"]
        assert second["label"] == 0
        assert second["labelled_at"] > first["labelled_at"]
        assert second["changed_at"] > first["changed_at"]
        assert second["received_at"] == first["received_at"]

    def test_last_label_of_an_id_in_a_batch_wins(self, fraud: TestClient) -> None:
        post_predictions(fraud, [prediction("a")])
        batch = [{"id": "a", "label": 1}, {"id": "a", "label": 0}]
        assert post_labels(fraud, batch).json() == {
            "updated": 1,
            "unchanged": 0,
            "pending": [],
            "expired": 0,
        }
        assert stored_predictions(fraud)["a"]["label"] == 0

    def test_invalid_label_rejects_the_batch(self, fraud: TestClient) -> None:
        post_predictions(fraud, [prediction("a"), prediction("b")])
        response = post_labels(fraud, [{"id": "a", "label": 1}, {"id": "b", "label": 3}])
        assert response.status_code == 422
        assert [d["field"] for d in error_of(response)["details"]] == ["labels[1].label"]
        assert all(p["label"] is None for p in stored_predictions(fraud).values())

    def test_labels_are_per_model(self, fraud: TestClient) -> None:
        create_model(fraud, "other")
        post_predictions(fraud, [prediction("a")], model="other")
        assert post_labels(fraud, [{"id": "a", "label": 1}]).json()["pending"] == ["a"]
        assert stored_predictions(fraud)["a"]["label"] is None
