"""Retention: predictions older than the period (by event time) and stale pending labels go,
batch by batch; everything else stays."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import PendingLabel, Prediction
from app.db.session import create_db_engine, create_session_factory
from app.services.ingest import ingest_labels, ingest_predictions
from app.services.models import ModelConfig, put_model
from app.services.retention import retention_cutoff, run_retention
from app.settings import Settings

NOW = datetime(2025, 6, 1, 12, tzinfo=UTC)


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
    # per model: age 10 at k = 1, 2 (older than the cutoff by k seconds), ages 11 and 400
    assert result.predictions == 2 * (2 + 3 + 3)
    assert result.pending_labels == 1
    kept = _ids(sessions)
    assert kept == {
        f"{name}-{age}-{k}" for name in ("m1", "m2") for age in (0, 5, 9) for k in range(3)
    } | {"m1-10-0", "m2-10-0"}
    with sessions() as session:
        assert list(session.scalars(select(PendingLabel.client_id))) == ["recent"]


def test_boundary_is_exclusive(sessions: sessionmaker[Session]) -> None:
    _seed(sessions)
    cutoff = retention_cutoff(now=NOW, retention_days=10)
    assert cutoff is not None
    run_retention(sessions, now=NOW, retention_days=10)
    with sessions() as session:
        oldest = session.scalar(select(func.min(Prediction.ts)))
    assert oldest is not None
    assert oldest >= cutoff
    assert oldest == cutoff
    assert "m1-10-0" in _ids(sessions)
    assert "m1-10-1" not in _ids(sessions)


def test_retention_zero_keeps_everything(sessions: sessionmaker[Session]) -> None:
    _seed(sessions)
    result = run_retention(sessions, now=NOW, retention_days=0)
    assert (result.cutoff, result.predictions, result.pending_labels) == (None, 0, 0)
    assert len(_ids(sessions)) == 36
