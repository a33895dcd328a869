"""Databases for the tests: a throwaway PostgreSQL database, a database brought to the latest
schema (a new SQLite file as a copy of one migrated per test process), and emptying the
session's shared PostgreSQL database."""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
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

    A SQLite file that does not exist yet becomes a copy of :func:`sqlite_template`: the same
    bytes the migrations would write (schema and Alembic version), without running them for
    every test. Any other database is migrated."""
    path = new_sqlite_file(url)
    if path is not None:
        shutil.copyfile(sqlite_template(), path)
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


@cache
def sqlite_template() -> Path:
    """A SQLite file migrated to the latest schema once per test process (so once per
    pytest-xdist worker), its write-ahead log folded in, so that copying the file alone copies
    the database. Removed when the process ends."""
    directory = Path(tempfile.mkdtemp(prefix="calmon-template-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    template = directory / "template.db"
    engine = create_db_engine(Settings(database_url=f"sqlite:///{template}"))
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    connection = sqlite3.connect(template)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    return template


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
