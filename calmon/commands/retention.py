"""`calmon retention`: show or change the retention period every process of the database uses.

The period is stored in the database (``calmon.services.retention_bound``): the API's ingestion
bounds, the scheduler's planning and its hourly retention run all read it there, whatever each
process's ``CALMON_RETENTION_DAYS`` (which only seeds a database that holds none).
"""

from __future__ import annotations

import argparse
import sys

from calmon.words import plural

EPILOG = """\
Without --days: print the stored period. With --days N: store N days (0 keeps everything).
Every process reads the new period within 30 seconds; the scheduler's hourly retention run
expires by it once every process plans with it (a minute or so after the change), so lowering
it deletes what is older at the next run, and nothing deleted comes back by raising it.
CALMON_RETENTION_DAYS only seeds a database that holds no period; a process whose variable
differs logs a warning and uses the stored period.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon retention`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "--days",
        type=days_value,
        metavar="N",
        help="store N days as the period (0: keep everything)",
    )


def days_value(text: str) -> int:
    """argparse type: a whole number of days, at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0: {text!r}")
    return value


def describe(days: int) -> str:
    """A period as the command prints it."""
    return "0 (keep everything)" if days == 0 else plural(days, "day")


def run(args: argparse.Namespace) -> int:
    """Print or store the period; exit 1 for a database error or one not at the latest schema."""
    from datetime import UTC, datetime

    from sqlalchemy.exc import SQLAlchemyError

    from calmon.commands.common import database_engine, load_settings
    from calmon.db import migrate
    from calmon.db.session import create_session_factory
    from calmon.services.retention_bound import change_retention, stored_retention
    from calmon.timeline import iso

    settings = load_settings("retention")
    if settings is None:
        return 2
    try:
        with database_engine(settings) as engine:
            with engine.connect() as connection:
                revision = migrate.current_revision(connection)
            if revision != migrate.head_revision():
                print(
                    f"calmon retention: the database is at revision {revision or 'none'}, "
                    f"expected {migrate.head_revision()}: run `calmon migrate`",
                    file=sys.stderr,
                )
                return 1
            with create_session_factory(engine)() as session:
                if args.days is None:
                    stored = stored_retention(session)
                    if stored is None:
                        print(
                            "retention: none stored yet; the first process to start stores "
                            f"its CALMON_RETENTION_DAYS (here {describe(settings.retention_days)})"
                        )
                    else:
                        print(
                            f"retention: {describe(stored.days)}, stored {iso(stored.changed_at)}"
                        )
                    return 0
                former = change_retention(session, days=args.days, now=datetime.now(UTC))
                session.commit()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(f"calmon retention: database error: {reason}", file=sys.stderr)
        return 1
    was = "none stored" if former is None else describe(former)
    print(f"retention: {describe(args.days)} (was {was})")
    return 0
