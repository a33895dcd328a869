"""Databases for the tests: a throwaway PostgreSQL database, a database brought to the latest
schema (a new SQLite file as a copy of the one template migrated per test session), and
emptying the session's shared PostgreSQL database."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from calmon.db import migrate
from calmon.db.session import create_db_engine
from calmon.settings import Settings


@contextmanager
def throwaway_database(admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the server of ``admin_url`` (a libpq URL of its
    maintenance database) for the ``with`` block: yields its name, then drops it."""
    name = f"calmon_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def database_url(admin_url: str, name: str) -> str:
    """The libpq URL of database ``name`` on the server of ``admin_url``."""
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


def upgraded(url: str) -> str:
    """``url``, its database brought to the latest schema.

    A SQLite file that does not exist yet becomes a copy of :data:`SQLITE_TEMPLATE`: the same
    bytes the migrations would write (schema and Alembic version), without running them for
    every test. Any other database is migrated."""
    path = new_sqlite_file(url)
    if path is not None:
        shutil.copyfile(SQLITE_TEMPLATE.path(), path)
        return url
    engine = create_db_engine(Settings(database_url=url))
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    return url


def new_sqlite_file(url: str) -> Path | None:
    """The file of a plain ``sqlite:///<path>`` URL whose file does not exist yet, else None."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url:
        return None
    path = Path(url.removeprefix(prefix))
    if path.name in ("", ":memory:") or path.exists():
        return None
    return path


class SqliteTemplate:
    """The SQLite file migrated to the latest schema that every new SQLite database of the
    tests copies: migrated once per test session, not once per test nor per pytest-xdist
    worker.

    The session's processes share one directory (:meth:`share`: the root conftest creates it
    in the pytest-xdist controller and hands it to each worker); the first process that needs
    the template migrates it there under a file lock while the others wait, then every process
    copies the finished file. Without a shared directory (the helpers used outside a pytest
    session) each process makes its own, removed when it ends."""

    FILE = "template.db"

    def __init__(self) -> None:
        self.directory: Path | None = None
        self._path: Path | None = None

    def share(self, directory: Path) -> None:
        """Build (or find) the template in ``directory``, which the session's processes share."""
        self.directory = directory
        self._path = None

    def path(self) -> Path:
        """The migrated template file, built on the first call of the session."""
        if self._path is None:
            self._path = self._built()
        return self._path

    def _built(self) -> Path:
        directory = self.directory
        if directory is None:
            directory = Path(tempfile.mkdtemp(prefix="calmon-template-"))
            atexit.register(shutil.rmtree, directory, ignore_errors=True)
        template = directory / self.FILE
        with (directory / f"{self.FILE}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not template.exists():
                migrated_sqlite_file(directory / f"building-{os.getpid()}.db").replace(template)
        return template


#: the session's migrated SQLite template (:class:`SqliteTemplate`)
SQLITE_TEMPLATE = SqliteTemplate()
#: the key of its directory in the input of a pytest-xdist worker
TEMPLATE_DIRECTORY = "calmon_sqlite_template"


def migrated_sqlite_file(path: Path) -> Path:
    """``path``, a new SQLite file migrated to the latest schema (Alembic's upgrade to head), its
    write-ahead log folded in so that copying the file alone copies the database."""
    engine = create_db_engine(Settings(database_url=f"sqlite:///{path}"))
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    return path


def empty_postgres(url: str) -> None:
    """Delete every row of the PostgreSQL database ``url`` but its Alembic version (the
    session's shared database, before each test that uses it)."""
    libpq_url = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                " AND tablename <> 'alembic_version'"
            )
        ]
        if tables:
            conn.execute(
                sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                    sql.SQL(", ").join(sql.Identifier(t) for t in tables)
                )
            )
