"""`calmon migrate`: bring the configured database (``CALMON_DATABASE_URL``) to a revision."""

from __future__ import annotations

import argparse
import sys

EPILOG = """\
The database is the one CALMON_DATABASE_URL names (default sqlite:///calmon.db, a file in the
working directory), e.g. postgresql+psycopg://user:password@host:5432/calmon.
--check only reads: it creates no database (a missing SQLite file is reported as empty).
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon migrate`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--downgrade",
        metavar="REVISION",
        help="downgrade to REVISION instead of upgrading (base drops every table)",
    )
    group.add_argument(
        "--check",
        action="store_true",
        help="only report the current and the expected revision; exit 1 when they differ",
    )


def run(args: argparse.Namespace) -> int:
    """Upgrade to head (default), downgrade, or check; returns the exit code."""
    from sqlalchemy.exc import SQLAlchemyError

    from calmon.commands.common import database_engine, load_settings, upgrade_schema
    from calmon.db import migrate

    settings = load_settings("migrate")
    if settings is None:
        return 2
    missing = missing_sqlite_file(settings.database_url) if args.check else None
    if missing is not None:
        print(f"current: empty (no file {missing}); head: {migrate.head_revision()}")
        return 1
    try:
        with database_engine(settings) as engine:
            if args.check:
                with engine.connect() as connection:
                    current = migrate.current_revision(connection)
                head = migrate.head_revision()
                print(f"current: {current or 'empty'}; head: {head}")
                return 0 if current == head else 1
            if args.downgrade:
                migrate.downgrade(engine, args.downgrade)
            else:
                upgrade_schema(engine)
    except SQLAlchemyError as exc:
        print(f"calmon migrate: database error: {exc}", file=sys.stderr)
        return 1
    return 0


def missing_sqlite_file(database_url: str) -> str | None:
    """The path of the SQLite file ``database_url`` names when that file does not exist (a
    connection would create it empty), else None (it exists, is in memory, or the database
    is not SQLite)."""
    from pathlib import Path

    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.database.startswith("file:") or url.query.get("mode") == "memory":
        return None
    return None if Path(url.database).exists() else url.database
