"""The change record: what prediction and label batches record, what the scan finds in it and
what it deletes. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from calmon.db.models import Model, WindowChange
from calmon.services.windows.planning import scan_model
from tests.integration.scheduler.helpers import (
    MARGIN,
    Env,
    by_window,
    create_model,
    iso,
    send_labels,
    windows,
)

HOUR = timedelta(hours=1)
OLD = datetime(2025, 6, 1, tzinfo=UTC)


def _post(env: Env, items: list[dict[str, object]]) -> None:
    response = env.client.post("/v1/models/fraud/predictions", json={"predictions": items})
    assert response.status_code == 200


def _records(env: Env) -> list[tuple[datetime, datetime]]:
    """The model's change records: (window start, changed at), in that order."""
    with env.session_factory() as session:
        rows = session.execute(
            select(WindowChange.starts_at, WindowChange.changed_at)
            .where(WindowChange.model_id == env.model_id("fraud"))
            .order_by(WindowChange.starts_at, WindowChange.changed_at)
        ).all()
    return [(start, changed) for start, changed in rows]


def _scan(env: Env, now: datetime) -> None:
    with env.session_factory() as session:
        model = session.get_one(Model, env.model_id("fraud"))
        scan_model(session, model=model, now=now, margin=timedelta(seconds=MARGIN))
        session.commit()


def test_a_batch_records_each_window_it_stores_into_once(env: Env) -> None:
    create_model(env.client, "fraud", window="1h", grace="0s")
    _post(
        env,
        [
            {"id": "a", "timestamp": iso(OLD + timedelta(minutes=1)), "score": 0.2},
            {"id": "b", "timestamp": iso(OLD + timedelta(minutes=59)), "score": 0.4},
            {"id": "c", "timestamp": iso(OLD + HOUR), "score": 0.6},
        ],
    )
    first = _records(env)
    assert [start for start, _ in first] == [OLD, OLD + HOUR]
    assert first[0][1] == first[1][1]
    # Repeats store nothing: only the window of the new id is recorded.
    _post(
        env,
        [
            {"id": "a", "timestamp": iso(OLD + timedelta(minutes=1)), "score": 0.2},
            {"id": "d", "timestamp": iso(OLD + 3 * HOUR), "score": 0.8},
        ],
    )
    second = _records(env)
    assert second[:2] == first
    assert [start for start, _ in second[2:]] == [OLD + 3 * HOUR]
    _post(env, [{"id": "c", "timestamp": iso(OLD + HOUR), "score": 0.6}])
    assert _records(env) == second


def test_a_late_label_of_an_old_window_is_found(env: Env) -> None:
    create_model(env.client, "fraud", window="1h", grace="0s")
    _post(
        env,
        [
            {"id": "old", "timestamp": iso(OLD), "score": 0.7},
            {"id": "known", "timestamp": iso(OLD + 5 * HOUR), "score": 0.3, "label": 0},
        ],
    )
    scheduler = env.scheduler()
    assert scheduler.tick().computed == 2
    assert scheduler.tick().computed == 0
    stored = max(changed for _, changed in _records(env))
    send_labels(env.client, "fraud", {"old": 1, "known": 0})
    assert [start for start, changed in _records(env) if changed > stored] == [OLD]
    assert scheduler.tick().computed == 1
    assert by_window(windows(env.client, "fraud"))[iso(OLD)]["n_pos"] == 1
    assert scheduler.tick().computed == 0


def test_a_pending_label_applied_by_its_prediction_is_recorded_once(env: Env) -> None:
    create_model(env.client, "fraud", window="1h", grace="0s")
    send_labels(env.client, "fraud", {"late": 1})
    assert _records(env) == []
    _post(env, [{"id": "late", "timestamp": iso(OLD + 2 * HOUR), "score": 0.9}])
    assert [start for start, _ in _records(env)] == [OLD + 2 * HOUR]


def test_the_scan_deletes_the_records_it_cannot_read_again(env: Env) -> None:
    create_model(env.client, "fraud", window="1h", grace="0s")
    _post(env, [{"id": "a", "timestamp": iso(OLD), "score": 0.7}])
    written = _records(env)
    assert len(written) == 1
    changed = written[0][1]
    # Within the margin of the scan: the next scan (from now - margin) reads it again.
    _scan(env, changed + timedelta(seconds=MARGIN))
    assert _records(env) == written
    _scan(env, changed + timedelta(seconds=MARGIN, microseconds=1))
    assert _records(env) == []
