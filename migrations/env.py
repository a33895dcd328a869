"""Alembic environment: runs on the connection that :mod:`calmon.db.migrate` hands over.

On PostgreSQL the run holds a session advisory lock so that replicas starting together
migrate one after the other; on SQLite, operations run in batch mode (table copies) so that
later revisions can alter columns.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from calmon.db import locks
from calmon.db.models import Base
from calmon.db.session import create_db_engine
from calmon.settings import Settings

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    is_postgres = connection.dialect.name == "postgresql"
    if is_postgres:
        locks.lock_migrations(connection)
        connection.commit()
    try:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    finally:
        if is_postgres:
            locks.unlock_migrations(connection)
            connection.commit()


def run_migrations_online() -> None:
    """Migrate on the given connection, or on a new engine for ``sqlalchemy.url``."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    engine = create_db_engine(Settings(database_url=url) if url else Settings())
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("calmon migrations run online only")
run_migrations_online()
