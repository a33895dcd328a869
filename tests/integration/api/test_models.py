"""Model registry: PUT creates or replaces, idempotently; GET and list; validation; 409."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from calmon.db.models import Model
from tests.integration.api.helpers import create_model, error_of, post_predictions, prediction
from tests.support.clients import ClientFactory

FULL = {
    "score_kind": "score",
    "window": "5m",
    "threshold": 1.5,
    "pi0": [0.2, 0.01],
    "reference": {"kind": "fixed", "start": "2024-01-01T00:00:00Z", "end": "2024-01-08T00:00:00Z"},
    "grace": "90s",
    "max_segments": 5,
}


def test_put_creates_with_defaults_then_get(client: TestClient) -> None:
    response = client.put("/v1/models/fraud.v2", json={})
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "fraud.v2"
    assert body["score_kind"] == "probability"
    assert body["window"] == "1h"
    assert body["threshold"] == 0.5
    assert body["pi0"] == []
    assert body["reference"] == {"kind": "trailing", "windows": 7}
    assert body["grace"] == "10m"
    assert body["max_segments"] == 20
    assert body["created_at"] == body["updated_at"]
    assert client.get("/v1/models/fraud.v2").json() == body


def test_put_full_configuration_round_trips(client: TestClient) -> None:
    response = client.put("/v1/models/m1", json=FULL)
    assert response.status_code == 201
    body = response.json()
    assert body["pi0"] == [0.01, 0.2]
    assert body["grace"] == "90s"
    assert body["reference"] == {
        "kind": "fixed",
        "start": "2024-01-01T00:00:00Z",
        "end": "2024-01-08T00:00:00Z",
    }
    assert {k: body[k] for k in ("score_kind", "window", "threshold", "max_segments")} == {
        "score_kind": "score",
        "window": "5m",
        "threshold": 1.5,
        "max_segments": 5,
    }


@pytest.mark.parametrize(
    "objective",
    [
        {"target_precision": 0.8},
        {"costs": {"false_positive": 1.0, "false_negative": 25.0}},
        {"alert_rate": 0.02},
    ],
)
def test_objective_round_trips_and_is_replaced_whole(
    client: TestClient, objective: dict[str, Any]
) -> None:
    response = client.put("/v1/models/m1", json={"objective": objective})
    assert response.status_code == 201, response.text
    assert response.json()["objective"] == objective
    assert client.get("/v1/models/m1").json()["objective"] == objective
    cleared = client.put("/v1/models/m1", json={})
    assert "objective" not in cleared.json()


def test_put_is_idempotent(client: TestClient) -> None:
    first = client.put("/v1/models/m1", json=FULL)
    second = client.put("/v1/models/m1", json=FULL)
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()
    assert client.get("/v1/models/m1").json() == first.json()


def test_put_replaces_whole_configuration(client: TestClient) -> None:
    client.put("/v1/models/m1", json={"pi0": [0.1], "grace": "1h"})
    response = client.put("/v1/models/m1", json={"threshold": 0.7})
    assert response.status_code == 200
    body = response.json()
    assert body["threshold"] == 0.7
    assert body["pi0"] == []
    assert body["grace"] == "10m"
    assert body["updated_at"] > body["created_at"]


def test_longest_grace_is_stored(client: TestClient) -> None:
    response = client.put("/v1/models/m1", json={"grace": "24855d"})
    assert response.status_code == 201, response.text
    assert response.json()["grace"] == "24855d"


def test_list_models_by_name(client: TestClient) -> None:
    for name in ("zeta", "alpha", "mid-1"):
        create_model(client, name)
    response = client.get("/v1/models")
    assert response.status_code == 200
    assert [m["name"] for m in response.json()["models"]] == ["alpha", "mid-1", "zeta"]


def test_unknown_model_is_404(client: TestClient) -> None:
    response = client.get("/v1/models/nothing")
    assert response.status_code == 404
    assert error_of(response)["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"window": "2h"}, "window"),
        ({"score_kind": "logit"}, "score_kind"),
        ({"threshold": "0.5"}, "threshold"),
        (b'{"threshold": 1e999}', "threshold"),
        (b'{"threshold": NaN}', "threshold"),
        ({"pi0": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]}, "pi0"),
        ({"pi0": [0.1, 1.0]}, "pi0[1]"),
        ({"pi0": [0.0]}, "pi0[0]"),
        ({"pi0": [0.2, 5e-324]}, "pi0[1]"),
        ({"pi0": [1e-300]}, "pi0[0]"),
        ({"pi0": ["0.5"]}, "pi0[0]"),
        ({"pi0": 0.5}, "pi0"),
        ({"pi0": [0.1, 0.1]}, "pi0"),
        ({"grace": "-5m"}, "grace"),
        ({"grace": 600}, "grace"),
        ({"grace": "24856d"}, "grace"),
        ({"grace": "9999999h"}, "grace"),
        ({"max_segments": 0}, "max_segments"),
        ({"max_segments": 1001}, "max_segments"),
        ({"reference": {"kind": "sliding"}}, "reference.kind"),
        ({"reference": {"kind": "trailing", "windows": 0}}, "reference.windows"),
        ({"reference": {"kind": "fixed", "start": "2024-01-02T00:00:00Z"}}, "reference"),
        (
            {
                "reference": {
                    "kind": "fixed",
                    "start": "2024-01-02T00:00:00Z",
                    "end": "2024-01-01T00:00:00Z",
                }
            },
            "reference",
        ),
        (
            {
                "reference": {
                    "kind": "fixed",
                    "start": "2024-01-01T00:00:00",
                    "end": "2024-01-02T00:00:00Z",
                }
            },
            "reference.start",
        ),
        ({"colour": "blue"}, "colour"),
        ({"objective": {}}, "objective"),
        ({"objective": {"target_precision": 0.5, "alert_rate": 0.1}}, "objective"),
        ({"objective": {"target_precision": 0.0}}, "objective.target_precision"),
        ({"objective": {"target_precision": 1.5}}, "objective.target_precision"),
        ({"objective": {"alert_rate": "0.1"}}, "objective.alert_rate"),
        ({"objective": {"costs": {"false_positive": 1.0}}}, "objective.costs.false_negative"),
        (
            {"objective": {"costs": {"false_positive": -1.0, "false_negative": 1.0}}},
            "objective.costs.false_positive",
        ),
        ({"objective": {"recall": 0.5}}, "objective.recall"),
    ],
)
def test_invalid_configuration_is_422_naming_the_field(
    sqlite_client: TestClient, body: dict[str, Any] | bytes, field: str
) -> None:
    client = sqlite_client
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.put(
        "/v1/models/m1", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "validation_error"
    assert field in [d["field"] for d in error["details"]]
    assert client.get("/v1/models/m1").status_code == 404


def _fixed(start: str, end: str) -> dict[str, Any]:
    return {"reference": {"kind": "fixed", "start": start, "end": end}}


def _days_ahead(days: float) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat()


@pytest.mark.parametrize(
    ("start", "end", "errors"),
    [
        ("0001-01-01T00:00:00+01:00", "2024-01-01T00:00:00Z", {"start": "greater_than_equal"}),
        ("1969-12-31T23:59:59Z", "2024-01-01T00:00:00Z", {"start": "greater_than_equal"}),
        ("2024-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00", {"end": "less_than_equal"}),
        ("2024-01-01T00:00:00Z", "+2", {"end": "less_than_equal"}),
        ("+2", "+3", {"start": "less_than_equal", "end": "less_than_equal"}),
    ],
)
def test_fixed_reference_outside_event_times_is_422(
    client: TestClient, start: str, end: str, errors: dict[str, str]
) -> None:
    start, end = (_days_ahead(float(t)) if t.startswith("+") else t for t in (start, end))
    response = client.put("/v1/models/m1", json=_fixed(start, end))
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "validation_error"
    assert {d["field"]: d["type"] for d in error["details"]} == {
        f"reference.{field}": error_type for field, error_type in errors.items()
    }
    assert all(d["message"].startswith("Input should be ") for d in error["details"])
    assert client.get("/v1/models/m1").status_code == 404


def test_fixed_reference_from_the_epoch_to_a_day_ahead_is_stored(client: TestClient) -> None:
    ahead = _days_ahead(1 - 2 / 86_400)
    body = {"window": "7d", **_fixed("1970-01-01T01:00:00+01:00", ahead)}
    response = client.put("/v1/models/m1", json=body)
    assert response.status_code == 201, response.text
    reference = client.get("/v1/models/m1").json()["reference"]
    assert reference["start"] == "1970-01-01T00:00:00Z"
    assert datetime.fromisoformat(reference["end"]) == datetime.fromisoformat(ahead)


@pytest.mark.parametrize(
    ("window", "days", "status"),
    [("5m", 34, 201), ("5m", 35, 422), ("1h", 416, 201), ("1h", 417, 422)],
)
def test_fixed_reference_spans_at_most_ten_thousand_windows(
    client: TestClient, window: str, days: float, status: int
) -> None:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    end = start + timedelta(days=days)
    body = {"window": window, **_fixed(start.isoformat(), end.isoformat())}
    response = client.put("/v1/models/m1", json=body)
    assert response.status_code == status, response.text
    if status == 422:
        (detail,) = error_of(response)["details"]
        assert detail["field"] == "reference"
        assert "at most 10000 windows" in detail["message"]
        assert client.get("/v1/models/m1").status_code == 404


def test_stored_reference_out_of_range_is_still_served(client: TestClient) -> None:
    """The range is a rule for requests: a model stored before it (or whose end was ahead
    then) is read back as stored."""
    client.put("/v1/models/m1", json=_fixed("2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"))
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        session.execute(
            update(Model).values(
                reference_start=datetime(1960, 1, 1, tzinfo=UTC),
                reference_end=datetime(2200, 1, 1, tzinfo=UTC),
            )
        )
        session.commit()
    response = client.get("/v1/models/m1")
    assert response.status_code == 200
    assert response.json()["reference"] == {
        "kind": "fixed",
        "start": "1960-01-01T00:00:00Z",
        "end": "2200-01-01T00:00:00Z",
    }


@pytest.mark.parametrize("name", ["Upper", "-lead", "a" * 64, "sp ace", "é"])
def test_invalid_model_name_is_422(sqlite_client: TestClient, name: str) -> None:
    response = sqlite_client.put(f"/v1/models/{name}", json={})
    assert response.status_code == 422
    assert [d["field"] for d in error_of(response)["details"]] == ["model"]


def test_longest_valid_name_is_accepted(client: TestClient) -> None:
    name = "a" + "b_.-9" * 12 + "xy"
    assert len(name) == 63
    assert client.put(f"/v1/models/{name}", json={}).status_code == 201


def test_score_kind_and_window_freeze_once_predictions_exist(client: TestClient) -> None:
    create_model(client, "m1")
    assert client.put("/v1/models/m1", json={"window": "1d"}).status_code == 200
    assert post_predictions(client, [prediction("a")], model="m1").status_code == 200
    response = client.put("/v1/models/m1", json={"window": "1h"})
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "model_has_predictions"
    assert error["details"] == [{"field": "window"}]
    assert client.get("/v1/models/m1").json()["window"] == "1d"
    assert client.put("/v1/models/m1", json={"window": "1d", "pi0": [0.3]}).status_code == 200


def test_put_needs_json_content_type(client: TestClient) -> None:
    response = client.put("/v1/models/m1", content=b"{}", headers={"content-type": "text/plain"})
    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"


def test_malformed_json_is_400(client: TestClient) -> None:
    response = client.put(
        "/v1/models/m1", content=b'{"window": ', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_json"


def test_models_beyond_the_limit_are_a_409_and_replacing_one_still_works(
    make_client: ClientFactory,
) -> None:
    client = make_client(max_models=2)
    for name in ("m1", "m2"):
        assert client.put(f"/v1/models/{name}", json={}).status_code == 201
    response = client.put("/v1/models/m3", json={})
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert error["code"] == "model_limit"
    assert "CALMON_MAX_MODELS" in error["message"]
    assert client.get("/v1/models/m3").status_code == 404
    assert client.put("/v1/models/m2", json={"threshold": 0.3}).status_code == 200
    assert [m["name"] for m in client.get("/v1/models").json()["models"]] == ["m1", "m2"]


def test_pi0_is_checked_by_the_metric_engine_validator(sqlite_client: TestClient) -> None:
    response = sqlite_client.put("/v1/models/m1", json={"pi0": [0.2, 1e-300]})
    assert response.status_code == 422, response.text
    [detail] = error_of(response)["details"]
    assert detail["field"] == "pi0[1]"
    assert "1e-300; each pi0 must be at least 4.8e-271" in detail["message"]
