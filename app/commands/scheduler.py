"""`calmon scheduler`: the window scheduler alone (production), with its Prometheus metrics.

Any number may run against one PostgreSQL database: the one holding the leader lock computes,
the others stand by and take over when it dies (``docs/scheduler.md``). Metrics are served on
``--metrics-host``:``--metrics-port`` (``/metrics``; default 0.0.0.0:9464, so that Prometheus
in another container reaches it); they hold no data of the models.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

DEFAULT_METRICS_PORT = 9464


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
        default="0.0.0.0",  # noqa: S104 (metrics must be reachable by Prometheus)
        help="address of the metrics endpoint (default 0.0.0.0)",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="run one tick (scan, compute every due window if leading) and exit",
    )


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM or SIGINT; exit 1 when the database is not at the expected schema."""
    from prometheus_client import start_http_server
    from sqlalchemy.exc import SQLAlchemyError

    from app.commands.common import load_settings
    from app.db import migrate
    from app.db.session import create_db_engine
    from app.observability import build_scrape_registry
    from app.scheduler.metrics import SCHEDULER_REGISTRY
    from app.scheduler.runner import WindowScheduler

    settings = load_settings("scheduler")
    if settings is None:
        return 2
    engine = create_db_engine(settings)
    try:
        with engine.connect() as connection:
            revision = migrate.current_revision(connection)
    except SQLAlchemyError as exc:
        print(f"calmon scheduler: database error: {exc}", file=sys.stderr)
        engine.dispose()
        return 1
    if revision != migrate.head_revision():
        print(
            f"calmon scheduler: the database is at revision {revision or 'none'}, expected "
            f"{migrate.head_revision()}: run `calmon migrate`",
            file=sys.stderr,
        )
        engine.dispose()
        return 1
    scheduler = WindowScheduler(settings, engine=engine)
    if args.once:
        try:
            report = scheduler.tick()
        finally:
            scheduler.shutdown()
            engine.dispose()
        print(
            f"leader={report.leader} computed={report.computed} failed={report.failed}",
            file=sys.stderr,
        )
        return 0 if report.failed == 0 else 1
    server = None
    if args.metrics_port:
        server, _ = start_http_server(
            args.metrics_port,
            addr=args.metrics_host,
            registry=build_scrape_registry([SCHEDULER_REGISTRY]),
        )
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    scheduler.start()
    try:
        stop.wait()
    finally:
        scheduler.shutdown()
        engine.dispose()
        if server is not None:
            server.shutdown()
    return 0
