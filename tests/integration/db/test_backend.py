"""The backend's named differences, on a real PostgreSQL and on SQLite: each capability is
what its backend does, and the SQL that computes a window's start or an instant's microseconds
gives the same numbers on both."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, literal, select, union_all
from sqlalchemy.orm import Session

from calmon.db.backend import (
    backend,
    bytewise,
    epoch_microseconds,
    has_advisory_locks,
    partitions_predictions,
    sends_binary_arrays,
    single_writer,
    window_start_seconds,
)
from calmon.db.models import UTCDateTime
from calmon.timeline import EPOCH

INSTANTS = [
    datetime(2024, 3, 1, 12, 34, 56, 789012, tzinfo=UTC),
    datetime(2024, 12, 31, 23, 59, 59, 999600, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2031, 7, 4, 0, 0, 0, 1, tzinfo=UTC),
]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'backend.db'}"
    else:
        admin = request.getfixturevalue("postgres_database")
        url = admin.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_engine(url)
    yield engine
    engine.dispose()


def test_each_capability_is_its_backends(engine: Engine) -> None:
    postgresql = engine.dialect.name == "postgresql"
    with Session(engine) as session, engine.connect() as connection:
        for bind in (engine, session, connection):
            assert backend(bind) == engine.dialect.name
            assert single_writer(bind) is not postgresql
            assert has_advisory_locks(bind) is postgresql
            assert partitions_predictions(bind) is postgresql
            assert sends_binary_arrays(bind) is postgresql


@pytest.mark.parametrize("length", [300, 3600, 86400])
def test_window_starts_and_microseconds_agree_with_python(engine: Engine, length: int) -> None:
    with Session(engine) as session:
        for instant in INSTANTS:
            column = literal(instant, UTCDateTime())
            start = session.scalar(select(window_start_seconds(session, column, length)))
            micros = session.scalar(select(epoch_microseconds(session, column)))
            seconds = int((instant - EPOCH).total_seconds())
            assert start == seconds - seconds % length, instant
            assert micros == (instant - EPOCH) // timedelta(microseconds=1), instant


def test_bytewise_order_sorts_text_by_bytes(engine: Engine) -> None:
    words = ["b", "B", "a", "_", "Z", "é", "*"]
    subquery = union_all(*(select(literal(word).label("w")) for word in words)).subquery()
    with Session(engine) as session:
        ordered = session.scalars(
            select(subquery.c.w).order_by(bytewise(session, subquery.c.w))
        ).all()
    assert ordered == sorted(words, key=lambda word: word.encode())
