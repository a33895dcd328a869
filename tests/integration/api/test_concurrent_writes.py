"""Writes of the same model at the same moment, through the API: configuration changes against
prediction batches, label batches over the same ids, concurrent model creations."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from calmon.db.models import Model, Prediction
from calmon.db.session import outage_gate
from calmon.services.model_registry import ModelConfig, get_model, put_model
from harness.processes import wait_for
from tests.integration.api.helpers import (
    create_model,
    error_of,
    post_labels,
    post_predictions,
    prediction,
    stored_predictions,
)
from tests.support.clients import ClientFactory

on_postgres = pytest.mark.parametrize("migrated_url", ["postgresql"], indirect=True)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


_LOCK_WAITS = text(
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


def _blocked(factory: sessionmaker[Session], thread: threading.Thread) -> bool:
    """Wait until ``thread`` has ended or a backend of the database waits for a lock; whether
    the thread still runs then (it waits for the test's open transaction)."""

    def settled() -> bool:
        if not thread.is_alive():
            return True
        with factory() as probe:  # a transaction of its own: a fresh pg_stat_activity
            return int(probe.execute(_LOCK_WAITS).scalar_one()) > 0

    wait_for("the request to wait for a lock or end", settled, timeout=20, interval=0.02)
    return thread.is_alive()


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(call()))
    thread.start()
    return thread, answers


def _scores(n: int, score: float) -> list[dict[str, Any]]:
    return [prediction(f"p-{i}", score) for i in range(n)]


@on_postgres
def test_a_batch_sent_while_score_kind_changes_is_validated_against_the_new_kind(
    client: TestClient,
) -> None:
    create_model(client, score_kind="score", window="1h")
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        put_model(
            session,
            name="fraud",
            config=ModelConfig(score_kind="probability", window="5m"),
            now=NOW,
            max_models=10,
        )
        thread, answers = _in_thread(lambda: post_predictions(client, _scores(3000, 5.0)))
        waited = _blocked(factory, thread)
        session.commit()
    thread.join(timeout=30)
    assert waited, "the batch did not wait for the configuration change"
    assert answers[0].status_code == 422, answers[0].text
    assert error_of(answers[0])["details"][0]["field"] == "predictions[0].score"
    assert stored_predictions(client) == {}
    assert client.get("/v1/models/fraud").json()["score_kind"] == "probability"


@on_postgres
def test_a_score_kind_change_sent_while_a_batch_is_stored_is_refused(client: TestClient) -> None:
    create_model(client, score_kind="score", window="1h")
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        model = get_model(session, name="fraud", share_lock=True)
        assert model is not None
        thread, answers = _in_thread(
            lambda: client.put("/v1/models/fraud", json={"score_kind": "probability"})
        )
        waited = _blocked(factory, thread)
        session.add(
            Prediction(
                model_id=model.id,
                client_id="p-0",
                ts=NOW,
                score=5.0,
                received_at=NOW,
                changed_at=NOW,
            )
        )
        session.commit()
    thread.join(timeout=30)
    assert waited, "the configuration change did not wait for the batch"
    assert answers[0].status_code == 409, answers[0].text
    assert error_of(answers[0])["code"] == "model_has_predictions"
    assert client.get("/v1/models/fraud").json()["score_kind"] == "score"


@on_postgres
def test_configuration_changes_racing_batches_leave_the_model_computable(
    client: TestClient,
) -> None:
    for attempt in range(4):
        name = f"race{attempt}"
        create_model(client, name, score_kind="score", window="1h")
        with ThreadPoolExecutor(2) as pool:
            batch = pool.submit(post_predictions, client, _scores(3000, 5.0), name)
            change = pool.submit(
                client.put, f"/v1/models/{name}", json={"score_kind": "probability", "window": "5m"}
            )
        answers = sorted([batch.result().status_code, change.result().status_code])
        assert answers in ([200, 409], [200, 422]), answers
        kind = client.get(f"/v1/models/{name}").json()["score_kind"]
        factory = client.app.state.session_factory  # type: ignore[attr-defined]
        with factory() as session:
            top = session.scalar(
                select(func.max(Prediction.score)).join(Model).where(Model.name == name)
            )
        assert kind == "score" or top is None or top <= 1.0, (kind, top)


@on_postgres
def test_label_batches_over_the_same_ids_in_different_orders_all_succeed(
    client: TestClient,
) -> None:
    create_model(client)
    ids = [f"p-{i}" for i in range(500)]
    assert post_predictions(client, [prediction(i) for i in ids]).status_code == 200

    def send(seed: int) -> list[int]:
        rng = random.Random(seed)
        statuses = []
        for _ in range(5):
            order = rng.sample(ids, len(ids))
            labels = [{"id": i, "label": rng.randint(0, 1)} for i in order]
            statuses.append(post_labels(client, labels).status_code)
        return statuses

    with ThreadPoolExecutor(4) as pool:
        statuses = [s for result in pool.map(send, range(4)) for s in result]
    assert statuses == [200] * 20
    gate = outage_gate(client.app.state.engine)  # type: ignore[attr-defined]
    assert gate is not None
    assert (gate.down, gate.outages) == (False, 0)


@on_postgres
def test_concurrent_creations_keep_to_the_model_limit(make_client: ClientFactory) -> None:
    client = make_client(max_models=20)
    for i in range(8):
        create_model(client, f"old{i}")
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda i: client.put(f"/v1/models/new{i}", json={}), range(32)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201] * 12 + [409] * 20
    assert {error_of(a)["code"] for a in answers if a.status_code == 409} == {"model_limit"}
    assert len(client.get("/v1/models").json()["models"]) == 20


@pytest.mark.parametrize("character", ["\x85", "\x80", "\x9f", "\x1b", "\x7f"])
def test_ids_with_control_characters_are_refused(sqlite_client: TestClient, character: str) -> None:
    create_model(sqlite_client)
    client_id = f"a{character}b"
    response = post_predictions(sqlite_client, [prediction(client_id)])
    assert response.status_code == 422, response.text
    assert error_of(response)["details"][0]["field"] == "predictions[0].id"
    response = post_labels(sqlite_client, [{"id": client_id, "label": 1}])
    assert response.status_code == 422, response.text
    assert error_of(response)["details"][0]["field"] == "labels[0].id"


def test_ids_with_other_non_ascii_characters_are_taken(sqlite_client: TestClient) -> None:
    create_model(sqlite_client)
    response = post_predictions(sqlite_client, [prediction("a\xa0é\u2028b")])
    assert response.status_code == 200, response.text
    assert list(stored_predictions(sqlite_client)) == ["a\xa0é\u2028b"]


def test_a_fixed_reference_is_answered_in_utc_as_stored(client: TestClient) -> None:
    reference = {
        "kind": "fixed",
        "start": "2024-01-01T02:00:00+02:00",
        "end": "2024-01-08T00:30:00-01:00",
    }
    created = client.put("/v1/models/fraud", json={"reference": reference})
    assert created.status_code == 201, created.text
    read = client.get("/v1/models/fraud").json()["reference"]
    assert created.json()["reference"] == read
    assert datetime.fromisoformat(read["start"]) == datetime(2024, 1, 1, tzinfo=UTC)
    assert datetime.fromisoformat(read["start"]).utcoffset() == datetime.now(UTC).utcoffset()
    assert datetime.fromisoformat(read["end"]) == datetime(2024, 1, 8, 1, 30, tzinfo=UTC)
    replaced = client.put("/v1/models/fraud", json={"reference": reference, "threshold": 0.2})
    assert replaced.json()["reference"] == read


@on_postgres
def test_concurrent_recomputes_of_the_same_range_all_succeed(client: TestClient) -> None:
    create_model(client, window="5m")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    items = [
        {"id": f"p-{i}", "timestamp": (start + i * timedelta(minutes=5)).isoformat(), "score": 0.5}
        for i in range(2000)
    ]
    assert post_predictions(client, items).status_code == 200
    params = {"start": start.isoformat(), "end": (start + timedelta(days=8)).isoformat()}

    def recompute(_: int) -> Any:
        return client.post("/v1/models/fraud/recompute", params=params)

    for _ in range(3):
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(recompute, range(6)))
        assert [a.status_code for a in answers] == [202] * 6, [a.text for a in answers]
        assert {len(a.json()["windows"]) for a in answers} == {2000}


@on_postgres
def test_a_lock_wait_beyond_the_lock_timeout_is_a_conflict_not_an_outage(
    make_client: ClientFactory,
) -> None:
    """A batch that waits for the model's row longer than the lock timeout gets 503
    transaction_conflict (contention), stores nothing, and leaves the outage gate open."""
    client = make_client(db_statement_timeout=0.5)
    create_model(client, score_kind="score", window="1h")
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        held = session.scalars(select(Model).where(Model.name == "fraud").with_for_update()).one()
        assert held.name == "fraud"
        answer = post_predictions(client, _scores(10, 0.5))
        session.rollback()
    assert answer.status_code == 503, answer.text
    assert error_of(answer)["code"] == "transaction_conflict"
    assert answer.headers["Retry-After"] == "1"
    assert stored_predictions(client) == {}
    gate = outage_gate(client.app.state.engine)  # type: ignore[attr-defined]
    assert gate is not None
    assert (gate.down, gate.outages) == (False, 0)
    assert post_predictions(client, _scores(10, 0.5)).status_code == 200
