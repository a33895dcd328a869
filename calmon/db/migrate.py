"""Run Alembic migrations from code (``calmon migrate``, ``calmon serve``, tests, ``/readyz``)."""

from __future__ import annotations

import logging
from functools import cache
from importlib.resources import files
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

VERSION_TABLE = "alembic_version"
#: the installed package holding Alembic's env.py and versions/ (the repository's top-level
#: ``migrations/`` folder, mapped by setup.py)
MIGRATIONS_PACKAGE = "calmon.migrations"

logger = logging.getLogger(__name__)


def migrations_directory() -> Path:
    """Folder of :data:`MIGRATIONS_PACKAGE` on disk, found through the import system (so an
    installed wheel and an editable install both work); Alembic needs a real directory."""
    location = files(MIGRATIONS_PACKAGE)
    if not isinstance(location, Path):
        raise RuntimeError(f"{MIGRATIONS_PACKAGE} is not installed as a folder: {location!r}")
    return location


def alembic_config(engine: Engine | None = None) -> Config:
    """Alembic configuration pointing at the installed ``calmon.migrations`` package."""
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    if engine is not None:
        config.set_main_option(
            "sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%")
        )
    return config


@cache
def head_revision() -> str:
    """The revision the code expects the database to be at."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (None for an empty database)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    revisions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars()
    return next(iter(revisions), None)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database of ``engine`` to ``revision``, and log the outcome in one line."""
    with engine.connect() as connection:
        before = current_revision(connection)
        config = alembic_config(engine)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        after = current_revision(connection)
        connection.commit()
    if before == after:
        logger.info("database schema up to date", extra={"revision": after})
    else:
        logger.info(
            "database schema upgraded",
            extra={"from_revision": before or "empty", "revision": after},
        )


def downgrade(engine: Engine, revision: str) -> None:
    """Downgrade the database of ``engine`` to ``revision`` (``base`` empties it)."""
    with engine.connect() as connection:
        config = alembic_config(engine)
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
        connection.commit()
