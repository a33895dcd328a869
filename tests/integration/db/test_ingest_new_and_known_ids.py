"""PostgreSQL: a prediction batch of new ids goes in with one statement; an id already known
(a duplicate or a conflict), or repeated in the batch, sends it through the ``ON CONFLICT``
form. Both keep the contract: what is stored (registry and partitions), the change record,
duplicates accepted, conflicts refused with nothing stored, a batch waiting for another."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from calmon.db import migrate
from calmon.db.models import Model, Prediction, WindowChange, prediction_keys
from calmon.db.session import create_db_engine, create_session_factory
from calmon.services.errors import ConflictError
from calmon.services.ingest import PredictionsResult, ingest_predictions
from calmon.services.ingest_schemas import PredictionRow
from calmon.services.model_registry import ModelConfig, put_model
from calmon.settings import Settings
from calmon.timeline import window_starts

NOW = datetime(2026, 3, 10, 12, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
DAY = datetime(2026, 3, 9, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def engine(postgres_database: str) -> Iterator[Engine]:
    engine = create_db_engine(Settings(database_url=postgres_database, db_pool_size=4))
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    factory = create_session_factory(engine)
    with factory() as session:
        put_model(session, name="m", config=ModelConfig(window="1h"), now=NOW, max_models=10)
        session.commit()
    return factory


def _model(session: Session) -> Model:
    return session.scalars(select(Model).where(Model.name == "m")).one()


def _rows(ids: list[int], *, score: float = 0.25) -> list[PredictionRow]:
    """Predictions ``p-<k>``, each in hour ``k % 10`` of :data:`DAY`, every third labelled,
    every other with a segment."""
    return [
        (
            f"p-{k}",
            DAY + (k % 10) * HOUR + timedelta(seconds=k),
            score,
            k % 2 if k % 3 == 0 else None,
            "country=FR" if k % 2 else None,
        )
        for k in ids
    ]


def _ingest(
    sessions: sessionmaker[Session], rows: list[PredictionRow], *, now: datetime = NOW
) -> PredictionsResult:
    """Ingest and commit ``rows``."""
    with sessions() as session:
        result = ingest_predictions(session, model=_model(session), rows=rows, now=now)
        session.commit()
    return result


def _stored(sessions: sessionmaker[Session]) -> dict[str, tuple[object, ...]]:
    with sessions() as session:
        return {
            row[0]: tuple(row[1:])
            for row in session.execute(
                select(
                    Prediction.client_id,
                    Prediction.ts,
                    Prediction.score,
                    Prediction.label,
                    Prediction.segment,
                    Prediction.received_at,
                    Prediction.labelled_at,
                    Prediction.changed_at,
                )
            )
        }


def _changes(sessions: sessionmaker[Session], at: datetime) -> list[datetime]:
    with sessions() as session:
        return sorted(
            session.scalars(select(WindowChange.starts_at).where(WindowChange.changed_at == at))
        )


def _expected(rows: list[PredictionRow], now: datetime) -> dict[str, tuple[object, ...]]:
    return {
        client_id: (ts, score, label, segment, now, None if label is None else now, now)
        for client_id, ts, score, label, segment in rows
    }


def test_a_batch_of_new_ids_stores_every_column_its_keys_and_its_windows(
    sessions: sessionmaker[Session],
) -> None:
    rows = _rows(list(range(40)))
    result = _ingest(sessions, rows[::-1])
    assert result == PredictionsResult(new=40, duplicates=0, pending_labels_applied=0)
    assert _stored(sessions) == _expected(rows, NOW)
    with sessions() as session:
        keys = dict(
            session.execute(select(prediction_keys.c.client_id, prediction_keys.c.ts)).all()
        )
    assert keys == {client_id: ts for client_id, ts, *_ in rows}
    assert _changes(sessions, NOW) == sorted(window_starts([row[1] for row in rows], "1h"))


def test_a_known_id_among_new_ones_is_a_duplicate_and_the_rest_stored(
    sessions: sessionmaker[Session],
) -> None:
    first = _rows([5])
    _ingest(sessions, first)
    rows = _rows(list(range(10)))
    result = _ingest(sessions, rows, now=LATER)
    assert result == PredictionsResult(new=9, duplicates=1, pending_labels_applied=0)
    assert _stored(sessions) == {**_expected(rows, LATER), **_expected(first, NOW)}
    # only the windows of the rows stored now: p-5 was alone in its hour
    assert _changes(sessions, LATER) == [DAY + k * HOUR for k in range(10) if k != 5]


def test_a_repeated_id_within_a_batch_of_new_ones_is_a_duplicate(
    sessions: sessionmaker[Session],
) -> None:
    rows = _rows(list(range(10)))
    result = _ingest(sessions, [*rows, rows[3]])
    assert result == PredictionsResult(new=10, duplicates=1, pending_labels_applied=0)
    assert _stored(sessions) == _expected(rows, NOW)


def test_a_conflicting_id_among_new_ones_stores_nothing(
    sessions: sessionmaker[Session],
) -> None:
    _ingest(sessions, _rows([5]))
    with sessions() as session:
        with pytest.raises(ConflictError) as raised:
            ingest_predictions(
                session, model=_model(session), rows=_rows(list(range(10)), score=0.75), now=LATER
            )
        session.rollback()
    assert raised.value.code == "prediction_conflict"
    assert raised.value.details == [{"id": "p-5"}]
    assert raised.value.message == "1 prediction id(s) already exist with other content"
    assert set(_stored(sessions)) == {"p-5"}
    assert _changes(sessions, LATER) == []


def test_a_batch_waiting_for_an_open_batch_of_the_same_ids_takes_them_as_duplicates(
    sessions: sessionmaker[Session],
) -> None:
    """The second batch's insert waits on the first's uncommitted keys, then fails on them
    and takes the ``ON CONFLICT`` form: its own ids stored, the shared ones duplicates."""
    shared = _rows(list(range(20)))
    results: list[PredictionsResult] = []
    with sessions() as holder:
        ingest_predictions(holder, model=_model(holder), rows=shared, now=NOW)

        def second() -> None:
            results.append(_ingest(sessions, _rows(list(range(30)))[::-1], now=LATER))

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(timeout=1.0)
        assert thread.is_alive()
        holder.commit()
    thread.join(timeout=30)
    assert results == [PredictionsResult(new=10, duplicates=20, pending_labels_applied=0)]
    assert len(_stored(sessions)) == 30
