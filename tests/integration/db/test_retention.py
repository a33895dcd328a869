"""Retention: predictions older than the period (by event time) and stale pending labels go,
batch by batch; everything else stays."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session, sessionmaker

from calmon.db.models import (
    Model,
    PendingLabel,
    Prediction,
    WindowResult,
    WindowScores,
    WindowState,
)
from calmon.db.session import create_db_engine, create_session_factory
from calmon.services.ingest import ingest_labels, ingest_predictions
from calmon.services.model_registry import ModelConfig, put_model
from calmon.services.retention import run_retention
from calmon.services.retention_bound import retention_cutoff
from calmon.settings import Settings

NOW = datetime(2025, 6, 1, 12, tzinfo=UTC)
_TICK = timedelta(microseconds=1)


@pytest.fixture
def sessions(migrated_url: str) -> Iterator[sessionmaker[Session]]:
    engine = create_db_engine(Settings(database_url=migrated_url))
    yield create_session_factory(engine)
    engine.dispose()


def _seed(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        for name in ("m1", "m2"):
            model, _ = put_model(session, name=name, config=ModelConfig(), now=NOW, max_models=10)
            rows = [
                (f"{name}-{age}-{k}", NOW - timedelta(days=age, seconds=k), 0.5, None, None)
                for age in (0, 5, 9, 10, 11, 400)
                for k in range(3)
            ]
            ingest_predictions(session, model=model, rows=rows, now=NOW)
        ingest_labels(
            session,
            model=model,
            labels=[{"id": "never-came", "label": 1}],
            now=NOW - timedelta(days=30),
        )
        ingest_labels(session, model=model, labels=[{"id": "recent", "label": 0}], now=NOW)
        session.commit()


def _ids(sessions: sessionmaker[Session]) -> set[str]:
    with sessions() as session:
        return set(session.scalars(select(Prediction.client_id)))


def test_retention_deletes_only_expired(sessions: sessionmaker[Session]) -> None:
    _seed(sessions)
    assert len(_ids(sessions)) == 36
    result = run_retention(sessions, now=NOW, retention_days=10, batch_size=4)
    assert result.cutoff == NOW - timedelta(days=10)
    # per model: ages 11 and 400, and on SQLite age 10 at k = 1, 2 (older than the cutoff by
    # k seconds); PostgreSQL expires whole days, and the cutoff's day has not ended by then
    boundary = {0, 1, 2} if _partitioned(sessions) else {0}
    assert result.predictions == 2 * (3 - len(boundary) + 3 + 3)
    assert result.pending_labels == 1
    kept = _ids(sessions)
    assert kept == {
        f"{name}-{age}-{k}" for name in ("m1", "m2") for age in (0, 5, 9) for k in range(3)
    } | {f"{name}-10-{k}" for name in ("m1", "m2") for k in boundary}
    with sessions() as session:
        assert list(session.scalars(select(PendingLabel.client_id))) == ["recent"]


def _partitioned(sessions: sessionmaker[Session]) -> bool:
    return bool(sessions.kw["bind"].dialect.name == "postgresql")


def test_boundary_is_exclusive(sessions: sessionmaker[Session]) -> None:
    """Rows at the cutoff stay, older ones go; on PostgreSQL, where whole days go, the cutoff
    is put at a midnight to see the same."""
    _seed(sessions)
    now = NOW + timedelta(hours=12) if _partitioned(sessions) else NOW
    with sessions() as session:
        model = session.scalars(select(Model).where(Model.name == "m1")).one()
        edge = now - timedelta(days=10)
        rows = [("edge-at", edge, 0.5, None, None), ("edge-before", edge - _TICK, 0.5, None, None)]
        ingest_predictions(session, model=model, rows=rows, now=NOW)
        session.commit()
    cutoff = retention_cutoff(now=now, retention_days=10)
    assert cutoff == edge
    run_retention(sessions, now=now, retention_days=10)
    with sessions() as session:
        oldest = session.scalar(select(func.min(Prediction.ts)))
    assert oldest is not None
    assert oldest >= cutoff
    assert oldest == cutoff
    assert "edge-at" in _ids(sessions)
    assert "edge-before" not in _ids(sessions)


def test_retention_zero_keeps_everything(sessions: sessionmaker[Session]) -> None:
    _seed(sessions)
    result = run_retention(sessions, now=NOW, retention_days=0)
    assert (result.cutoff, result.predictions, result.pending_labels) == (None, 0, 0)
    assert len(_ids(sessions)) == 36


def _seed_windows(sessions: sessionmaker[Session], *, hours: int) -> int:
    """Hourly windows of one model, each with its state and a computed ``*`` segment, ending
    every hour from ``NOW - 10 days - hours + 1h`` to ``NOW - 10 days + 3h``; returns the
    model id."""
    with sessions() as session:
        model, _ = put_model(
            session, name="w", config=ModelConfig(window="1h"), now=NOW, max_models=10
        )
        first = NOW - timedelta(days=10, hours=hours)
        for k in range(hours + 3):
            start = first + timedelta(hours=k)
            end = start + timedelta(hours=1)
            session.add(
                WindowState.first_seen(
                    model_id=model.id, starts_at=start, ends_at=end, version=1, now=NOW
                )
            )
            session.add(
                WindowResult(
                    model_id=model.id,
                    segment="*",
                    starts_at=start,
                    ends_at=end,
                    computed_at=NOW,
                    computed_by="test",
                    version=1,
                    n=0,
                    n_pos=0,
                    unlabelled=0,
                    prior=None,
                    record={},
                )
            )
            session.add(
                WindowScores(
                    model_id=model.id,
                    segment="*",
                    starts_at=start,
                    version=1,
                    positives=b"",
                    negatives=b"",
                )
            )
        session.commit()
        return model.id


def test_windows_that_ended_by_the_cutoff_go_in_bounded_batches(
    sessions: sessionmaker[Session],
) -> None:
    model_id = _seed_windows(sessions, hours=7)
    statements: list[tuple[str, int]] = []

    def record(
        _conn: object, _cursor: object, statement: str, parameters: object, *_: object
    ) -> None:
        if statement.lstrip().upper().startswith("DELETE") and "window_" in statement:
            size = len(parameters) if isinstance(parameters, dict | tuple | list) else 0
            statements.append((statement, size))

    engine = sessions.kw["bind"]
    event.listen(engine, "before_cursor_execute", record)
    try:
        result = run_retention(sessions, now=NOW, retention_days=10, window_batch=3)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    cutoff = NOW - timedelta(days=10)
    assert result.windows == 7
    with sessions() as session:
        for table in (WindowState, WindowResult, WindowScores):
            starts = session.scalars(select(table.starts_at).where(table.model_id == model_id))
            assert sorted(starts) == [cutoff + timedelta(hours=k) for k in range(3)]
    # 7 windows in batches of 3: three batches, each one DELETE per table, 3 instants at most
    windows = [(sql, size) for sql, size in statements if "window_changes" not in sql]
    assert len(windows) == 9
    assert max(size for _, size in windows) <= 3 + 1
    # and each batch forgets the change records of the expired windows (no scan finds them)
    assert len(statements) - len(windows) == 3
