"""Scratch PostgreSQL databases for the benchmarks: one per run, dropped at its end."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from calmon.db import migrate
from calmon.db.session import create_db_engine, create_session_factory
from calmon.settings import Settings

#: the server the benchmarks create their scratch databases on (a database to connect to
#: while creating and dropping them)
ADMIN_URL: Final = os.environ.get(
    "CALMON_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def create_scratch(admin_url: str = ADMIN_URL) -> tuple[str, str]:
    """Create an empty database ``calmon_bench_<random>``; returns (its name, its libpq URL)."""
    name = f"calmon_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name, f"{admin_url.rpartition('/')[0]}/{name}"


def drop_scratch(name: str, admin_url: str = ADMIN_URL) -> None:
    """Drop the scratch database ``name``, closing its remaining connections."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@dataclass(frozen=True)
class Scratch:
    """A migrated scratch database: its settings, engine, session factory and libpq URL."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    libpq_url: str


@contextmanager
def migrated_scratch(*, keep: bool = False, **settings: Any) -> Iterator[Scratch]:
    """A scratch database upgraded to the latest revision, with ``settings`` (fields of
    :class:`~calmon.settings.Settings`) beside its URL; at the end its engine is disposed and,
    unless ``keep``, the database dropped."""
    name, libpq_url = create_scratch()
    url = libpq_url.replace("postgresql://", "postgresql+psycopg://", 1)
    config = Settings(database_url=url, **settings)
    engine = create_db_engine(config)
    try:
        migrate.upgrade(engine)
        yield Scratch(config, engine, create_session_factory(engine), libpq_url)
    finally:
        engine.dispose()
        if not keep:
            drop_scratch(name)
