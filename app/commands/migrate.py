"""`calmon migrate`: bring the configured database (``CALMON_DATABASE_URL``) to a revision."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon migrate`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--downgrade",
        metavar="REVISION",
        help="downgrade to REVISION instead of upgrading (`base` drops every table)",
    )
    group.add_argument(
        "--check",
        action="store_true",
        help="only report the current and the expected revision; exit 1 when they differ",
    )


def run(args: argparse.Namespace) -> int:
    """Upgrade to head (default), downgrade, or check; returns the exit code."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.commands.common import load_settings
    from app.db import migrate
    from app.db.session import create_db_engine
    from app.services.partitions import prepare_partitions

    settings = load_settings("migrate")
    if settings is None:
        return 2
    engine = create_db_engine(settings)
    try:
        if args.check:
            with engine.connect() as connection:
                current = migrate.current_revision(connection)
            head = migrate.head_revision()
            print(f"current: {current or 'empty'}; head: {head}")
            return 0 if current == head else 1
        if args.downgrade:
            migrate.downgrade(engine, args.downgrade)
        else:
            migrate.upgrade(engine)
            prepare_partitions(engine)
    except SQLAlchemyError as exc:
        print(f"calmon migrate: database error: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    return 0
