"""Run Alembic migrations from code (``calmon migrate``, ``calmon serve``, tests, ``/readyz``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

import migrations

VERSION_TABLE = "alembic_version"


def alembic_config(engine: Engine | None = None) -> Config:
    """Alembic configuration pointing at the installed ``migrations`` package."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
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
    """Upgrade the database of ``engine`` to ``revision``."""
    with engine.connect() as connection:
        config = alembic_config(engine)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        connection.commit()


def downgrade(engine: Engine, revision: str) -> None:
    """Downgrade the database of ``engine`` to ``revision`` (``base`` empties it)."""
    with engine.connect() as connection:
        config = alembic_config(engine)
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
        connection.commit()
