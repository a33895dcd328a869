"""Ingestion services under concurrency, on real databases: overlapping batches from several
threads, and labels racing the predictions they belong to."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from calmon.db.models import Model, PendingLabel, Prediction
from calmon.db.session import create_db_engine, create_session_factory
from calmon.services.ingest import ingest_labels, ingest_predictions
from calmon.services.ingest_schemas import PredictionRow
from calmon.services.model_registry import ModelConfig, put_model
from calmon.settings import Settings

TS = datetime(2024, 5, 1, 10, tzinfo=UTC)


@pytest.fixture
def sessions(migrated_url: str) -> Iterator[sessionmaker[Session]]:
    engine = create_db_engine(Settings(database_url=migrated_url, db_pool_size=8))
    factory = create_session_factory(engine)
    with factory() as session:
        put_model(session, name="m", config=ModelConfig(), now=TS, max_models=10)
        session.commit()
    yield factory
    engine.dispose()


def _model(session: Session) -> Model:
    return session.scalars(select(Model).where(Model.name == "m")).one()


def _row(client_id: str, label: int | None = None) -> PredictionRow:
    return (client_id, TS, int(client_id.split("-")[1]) / 1000, label, None)


def _run_threads(targets: list[Callable[[], None]]) -> None:
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors


def test_two_batches_in_one_transaction(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        model = _model(session)
        first = ingest_predictions(session, model=model, rows=[_row("p-1")], now=TS)
        second = ingest_predictions(session, model=model, rows=[_row("p-2")], now=TS)
        session.commit()
    assert (first.new, second.new, second.duplicates) == (1, 1, 0)


def test_overlapping_batches_from_many_threads(sessions: sessionmaker[Session]) -> None:
    ids = [f"p-{i}" for i in range(600)]
    new_counts: list[int] = []
    lock = threading.Lock()

    def sender(seed: int) -> Callable[[], None]:
        def send() -> None:
            rng = random.Random(seed)
            for _ in range(4):
                batch = rng.sample(ids, 200)
                with sessions() as session:
                    result = ingest_predictions(
                        session, model=_model(session), rows=[_row(i) for i in batch], now=TS
                    )
                    session.commit()
                assert result.new + result.duplicates == 200
                with lock:
                    new_counts.append(result.new)

        return send

    _run_threads([sender(seed) for seed in range(4)])
    with sessions() as session:
        stored = session.scalar(select(func.count()).select_from(Prediction))
    assert stored == sum(new_counts)
    assert len(new_counts) == 16


def test_labels_racing_their_predictions_are_never_lost(sessions: sessionmaker[Session]) -> None:
    rounds = 25

    def labels() -> None:
        for r in range(rounds):
            with sessions() as session:
                ingest_labels(
                    session,
                    model=_model(session),
                    labels=[{"id": f"p-{r * 10 + k}", "label": 1} for k in range(10)],
                    now=TS,
                )
                session.commit()

    def predictions() -> None:
        for r in range(rounds):
            with sessions() as session:
                ingest_predictions(
                    session,
                    model=_model(session),
                    rows=[_row(f"p-{r * 10 + k}") for k in range(10)],
                    now=TS,
                )
                session.commit()

    _run_threads([labels, predictions])
    with sessions() as session:
        unlabelled = session.scalar(
            select(func.count()).select_from(Prediction).where(Prediction.label.is_(None))
        )
        stored = session.scalar(select(func.count()).select_from(Prediction))
        pending = session.scalar(select(func.count()).select_from(PendingLabel))
    assert stored == rounds * 10
    assert unlabelled == 0
    assert pending == 0
