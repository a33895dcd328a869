"""Small builders shared by the API tests."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

TS = "2024-05-01T10:00:00+02:00"


def prediction(client_id: str, score: float = 0.5, **extra: Any) -> dict[str, Any]:
    """A valid prediction body item."""
    return {"id": client_id, "timestamp": TS, "score": score, **extra}


def create_model(client: TestClient, name: str = "fraud", **config: Any) -> None:
    """PUT a model, asserting it was created."""
    response = client.put(f"/v1/models/{name}", json=config)
    assert response.status_code == 201, response.text


def post_predictions(client: TestClient, items: list[dict[str, Any]], model: str = "fraud") -> Any:
    """POST a prediction batch; returns the response."""
    return client.post(f"/v1/models/{model}/predictions", json={"predictions": items})


def post_labels(client: TestClient, items: list[dict[str, Any]], model: str = "fraud") -> Any:
    """POST a label batch; returns the response."""
    return client.post(f"/v1/models/{model}/labels", json={"labels": items})


def error_of(response: Any) -> dict[str, Any]:
    """The ``error`` object of an error body (asserting its shape)."""
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["details"], list)
    return error


def stored_predictions(client: TestClient) -> dict[str, dict[str, Any]]:
    """Every stored prediction of every model by client id, read from the database."""
    from sqlalchemy import select

    from calmon.db.models import Prediction

    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        rows = session.scalars(select(Prediction)).all()
        return {
            row.client_id: {
                "ts": row.ts,
                "score": row.score,
                "label": row.label,
                "segment": row.segment,
                "received_at": row.received_at,
                "labelled_at": row.labelled_at,
                "changed_at": row.changed_at,
            }
            for row in rows
        }
