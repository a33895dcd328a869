"""Migrations: up, down to base, up again, on PostgreSQL and SQLite; schema equals the models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from app.db import migrate
from app.db.models import Base
from app.db.session import create_db_engine
from app.settings import Settings

TABLES = {
    "models",
    "predictions",
    "pending_labels",
    "model_segments",
    "model_scans",
    "window_states",
    "window_results",
    "window_scores",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'calmon.db'}"
    else:
        url = request.getfixturevalue("postgres_database")
    engine = create_db_engine(Settings(database_url=url))
    yield engine
    engine.dispose()


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def test_up_down_up(engine: Engine) -> None:
    assert _tables(engine) == set()
    migrate.upgrade(engine)
    assert _tables(engine) == TABLES
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
    migrate.downgrade(engine, "base")
    assert _tables(engine) == set()
    with engine.connect() as conn:
        assert migrate.current_revision(conn) is None
    migrate.upgrade(engine)
    assert _tables(engine) == TABLES


def test_migrated_schema_matches_models(engine: Engine) -> None:
    migrate.upgrade(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []


def test_upgrade_twice_is_a_no_op(engine: Engine) -> None:
    migrate.upgrade(engine)
    migrate.upgrade(engine)
    assert _tables(engine) == TABLES


def test_window_scores_are_stored_out_of_line_on_postgresql(postgres_database: str) -> None:
    """Sorted scores do not compress: PostgreSQL keeps them out of line, uncompressed."""
    engine = create_db_engine(Settings(database_url=postgres_database))
    try:
        migrate.upgrade(engine)
        with engine.connect() as conn:
            storage: dict[str, str] = dict(
                conn.execute(
                    text(
                        "SELECT attname, attstorage FROM pg_attribute"
                        " WHERE attrelid = 'window_scores'::regclass"
                        " AND attname IN ('positives', 'negatives')"
                    )
                ).all()
            )
    finally:
        engine.dispose()
    assert storage == {"positives": "e", "negatives": "e"}
