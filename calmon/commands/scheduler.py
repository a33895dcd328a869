"""`calmon scheduler`: the window scheduler alone (production), with its Prometheus metrics.

Any number may run against one PostgreSQL database: each claims due windows and computes
them, and the one holding the leader lock also scans for changes and expires old data; another
takes the lock over when it dies (``docs/reference/scheduler.md``, "Scaling out"). Metrics are
served on ``--metrics-host``:``--metrics-port`` (``/metrics``; default ``CALMON_HOST``:9464); they
hold no data of the models, but name them, so like the API they listen beyond loopback only when a
token is configured. A database that does not answer at start is waited for (logged, retried
with back-off), as the API waits with 503s; one at the wrong schema is an error.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from calmon.settings import Settings

DEFAULT_METRICS_PORT: Final = 9464
#: seconds before the first retry of an unreachable database; doubled up to ``RETRY_MAX``
RETRY_FIRST: Final = 1.0
RETRY_MAX: Final = 30.0

logger = logging.getLogger(__name__)


class StoppedWaitingError(Exception):
    """SIGTERM or SIGINT arrived while the database was being waited for."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon scheduler`."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"port of the Prometheus metrics endpoint (default {DEFAULT_METRICS_PORT}; 0: none)",
    )
    parser.add_argument(
        "--metrics-host",
        help="address of the metrics endpoint (default: CALMON_HOST, 127.0.0.1; beyond "
        "loopback only with a token configured, as the API)",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="run one tick (scan if leading, compute every due window it can claim) and exit; "
        "an unreachable database is an error (exit 1), not waited for",
    )


def wait_for_database(engine: Engine, *, stop: threading.Event, wait: bool) -> str | None:
    """The schema revision of the database, once it answers.

    Each failed attempt is logged (error class only) and retried after ``RETRY_FIRST`` seconds,
    doubled each time up to ``RETRY_MAX``, until it answers or ``stop`` is set. Raises
    ``SQLAlchemyError`` when ``wait`` is False and the first attempt fails,
    :class:`StoppedWaitingError` when stopped while waiting.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from calmon.db import migrate

    delay = RETRY_FIRST
    while True:
        try:
            with engine.connect() as connection:
                return migrate.current_revision(connection)
        except SQLAlchemyError as exc:
            if not wait:
                raise
            logger.warning(
                "database unreachable; retrying",
                extra={"error": type(exc).__name__, "retry_in_seconds": delay},
            )
        if stop.wait(delay):
            raise StoppedWaitingError
        delay = min(delay * 2, RETRY_MAX)


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM or SIGINT; exit 1 when the database is not at the expected schema or
    the metrics port cannot be bound, 2 for an invalid configuration."""
    from prometheus_client import start_http_server
    from sqlalchemy.exc import SQLAlchemyError

    from calmon.commands.common import load_settings
    from calmon.db.session import create_db_engine
    from calmon.instruments import build_scrape_registry
    from calmon.scheduler.instruments import SCHEDULER_REGISTRY
    from calmon.settings import bind_refusal

    settings = load_settings("scheduler")
    if settings is None:
        return 2
    host = args.metrics_host or settings.host
    if args.metrics_port and not args.once:
        refusal = bind_refusal(settings, host, service="the scheduler's metrics")
        if refusal is not None:
            print(f"calmon scheduler: {refusal}", file=sys.stderr)
            return 2
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server = None
    if args.metrics_port and not args.once:
        try:
            server, _ = start_http_server(
                args.metrics_port,
                addr=host,
                registry=build_scrape_registry([SCHEDULER_REGISTRY]),
            )
        except OSError as exc:
            print(
                f"calmon scheduler: cannot serve metrics on {host}:{args.metrics_port}: "
                f"{exc.strerror or exc}",
                file=sys.stderr,
            )
            return 1
    engine = create_db_engine(settings)
    try:
        return _run_with(args, settings=settings, engine=engine, stop=stop)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(f"calmon scheduler: database error: {reason}", file=sys.stderr)
        return 1
    except StoppedWaitingError:
        return 0
    finally:
        engine.dispose()
        if server is not None:
            server.shutdown()


def _run_with(
    args: argparse.Namespace, *, settings: Settings, engine: Engine, stop: threading.Event
) -> int:
    from calmon.db import migrate
    from calmon.db.partitions import prepare_partitions
    from calmon.scheduler.runner import WindowScheduler

    revision = wait_for_database(engine, stop=stop, wait=not args.once)
    if revision != migrate.head_revision():
        print(
            f"calmon scheduler: the database is at revision {revision or 'none'}, expected "
            f"{migrate.head_revision()}: run `calmon migrate`",
            file=sys.stderr,
        )
        return 1
    prepare_partitions(engine)
    scheduler = WindowScheduler(settings, engine=engine)
    if args.once:
        try:
            report = scheduler.tick()
        finally:
            scheduler.shutdown()
        print(
            f"leader={report.leader} computed={report.computed} failed={report.failed}",
            file=sys.stderr,
        )
        return 0 if report.failed == 0 else 1
    scheduler.start()
    try:
        stop.wait()
    finally:
        scheduler.shutdown()
    return 0
