"""A new SQLite file of the tests is a copy of one migrated template
(:func:`tests.support.databases.upgraded`): the same database as running every migration on
it, down to each table, index and trigger, the Alembic version and the journal mode. The
template is migrated once per session: processes that share its directory build it once and
all copy that one file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from calmon.db import migrate
from calmon.db.session import create_db_engine
from calmon.settings import Settings
from tests.support import databases
from tests.support.databases import SQLITE_TEMPLATE, TEMPLATE_DIRECTORY, SqliteTemplate, upgraded


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


def test_a_process_sharing_the_directory_copies_the_template_it_finds(tmp_path: Path) -> None:
    first = SqliteTemplate()
    first.share(tmp_path)
    built = first.path()
    made = built.stat()
    second = SqliteTemplate()
    second.share(tmp_path)

    assert second.path() == built
    assert (built.stat().st_ino, built.stat().st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    assert _described(built)["version"] == [(migrate.head_revision(),)]


def test_processes_that_need_it_at_once_migrate_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrated: list[Path] = []
    migrate_file = databases.migrated_sqlite_file

    def counted(path: Path) -> Path:
        migrated.append(path)
        return migrate_file(path)

    monkeypatch.setattr(databases, "migrated_sqlite_file", counted)
    start = threading.Barrier(3)
    found: list[Path] = []

    def need_it() -> None:
        template = SqliteTemplate()
        template.share(tmp_path)
        start.wait()
        found.append(template.path())

    threads = [threading.Thread(target=need_it) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(migrated) == 1
    assert found == [tmp_path / SqliteTemplate.FILE] * 3


def test_the_session_template_is_in_the_directory_the_session_shares(
    request: pytest.FixtureRequest,
) -> None:
    template = SQLITE_TEMPLATE.path()
    assert SQLITE_TEMPLATE.directory is not None
    assert template == SQLITE_TEMPLATE.directory / SqliteTemplate.FILE
    assert SQLITE_TEMPLATE.directory.name.startswith("calmon-template-")
    workerinput = getattr(request.config, "workerinput", None)
    if workerinput is not None:
        assert workerinput[TEMPLATE_DIRECTORY] == str(SQLITE_TEMPLATE.directory)
