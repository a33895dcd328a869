"""Statements marked with ``binary_rows``: on PostgreSQL the server sends their rows in its
binary format (and only theirs), and on both backends they read the very values an unmarked
statement reads."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, LargeBinary, cast, event, func, literal, select
from sqlalchemy.orm import Session

from calmon.db.models import UTCDateTime
from calmon.db.session import binary_rows, create_db_engine
from calmon.settings import Settings

EVERY_BYTE = bytes(range(256)) * 3
INSTANT = datetime(2026, 1, 5, 12, 30, 15, 123456, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'binary.db'}"
    else:
        url = request.getfixturevalue("postgres_database")
    engine = create_db_engine(Settings(database_url=url))
    yield engine
    engine.dispose()


def _statement() -> Any:
    """Bytes with every byte value, an integer, a sum and an instant."""
    return select(
        cast(literal(EVERY_BYTE, LargeBinary), LargeBinary),
        literal(-7),
        func.coalesce(func.sum(literal(3)), 0),
        literal(INSTANT, UTCDateTime()),
    )


def test_marked_statements_read_the_same_values(engine: Engine) -> None:
    with Session(engine) as session:
        plain = session.execute(_statement()).one()
        marked = session.execute(binary_rows(_statement())).one()
    assert tuple(marked) == tuple(plain)
    assert bytes(marked[0]) == EVERY_BYTE
    assert marked[1] == -7
    assert int(marked[2]) == 3
    assert marked[3] == INSTANT


@pytest.mark.postgres
def test_postgresql_sends_only_marked_rows_in_binary(postgres_database: str) -> None:
    engine = create_db_engine(Settings(database_url=postgres_database))
    formats: list[int] = []

    @event.listens_for(engine, "after_cursor_execute")
    def _record(*args: Any) -> None:
        cursor = args[1]
        formats.append(cursor.pgresult.fformat(0))

    try:
        with Session(engine) as session:
            session.execute(_statement()).one()
            session.execute(binary_rows(_statement())).one()
            session.execute(_statement()).one()
    finally:
        engine.dispose()
    # the engine's own statements (its connection's ping) come first; ours are the last three
    assert formats[-3:] == [0, 1, 0]
