"""A new SQLite file of the tests is a copy of one migrated template
(:func:`tests.support.databases.upgraded`): the same database as running every migration on
it, down to each table, index and trigger, the Alembic version and the journal mode."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from calmon.db import migrate
from calmon.db.session import create_db_engine
from calmon.settings import Settings
from tests.support.databases import upgraded


def _described(path: Path) -> dict[str, Any]:
    with sqlite3.connect(path) as conn:
        return {
            "schema": sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")),
            "version": conn.execute("SELECT version_num FROM alembic_version").fetchall(),
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone(),
            "user_version": conn.execute("PRAGMA user_version").fetchone(),
        }


def test_a_copied_template_is_the_migrated_database(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    engine = create_db_engine(Settings(database_url=f"sqlite:///{migrated}"))
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    copied = tmp_path / "copied.db"
    assert upgraded(f"sqlite:///{copied}") == f"sqlite:///{copied}"

    expected = _described(migrated)
    assert expected["version"] == [(migrate.head_revision(),)]
    assert len(expected["schema"]) > 10
    assert _described(copied) == expected


def test_an_existing_file_is_migrated_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "calmon.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE kept (x INTEGER)")
    upgraded(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    assert "kept" in tables
    assert version == [(migrate.head_revision(),)]
