"""`calmon serve`: the one-command start. Migrates the database, then serves the API (and,
through :func:`lifespan_hooks`, everything else that runs beside it) in one process."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from calmon.api.app import LifespanHook
    from calmon.clock import Clock
    from calmon.settings import Settings


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon serve`."""
    from calmon.commands.api import add_bind_options

    add_bind_options(parser)
    parser.add_argument(
        "--no-migrate",
        action="store_true",
        help="do not upgrade the database schema before starting",
    )


def lifespan_hooks(
    settings: Settings,
    *,
    clock: Clock | None = None,
    before_commit: Callable[[], None] | None = None,
) -> list[LifespanHook]:
    """What starts and stops with the API in `calmon serve` (each an async context manager):
    the window exporter, refreshed every ``CALMON_SCHEDULER_INTERVAL`` on its own timer and
    after every tick of the scheduler that runs beside it, both on ``clock`` (default: the
    machine's). The timer keeps the series fresh while one long tick back-fills or recomputes
    many windows (a tick ends only once no window is due). ``before_commit``: the scheduler's
    (None in production)."""
    from calmon.api.lifespan import scheduler_lifespan
    from calmon.clock import SYSTEM_CLOCK
    from calmon.exporter.refresh import WindowExporter

    clock = clock or SYSTEM_CLOCK
    exporter = WindowExporter(clock=clock)
    return [
        exporter.lifespan(refresh_every=settings.scheduler_interval),
        scheduler_lifespan(
            settings, after_tick=exporter.after_tick, clock=clock, before_commit=before_commit
        ),
    ]


def web_address(host: str, port: int) -> str:
    """The root URL a browser on this machine opens for a server bound to ``host``."""
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 - a bound address, not one to bind
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run(args: argparse.Namespace) -> int:
    """Migrate, then serve until interrupted."""
    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from calmon.commands.api import prepare_multiprocess_dir, serving_settings
    from calmon.commands.common import database_engine, upgrade_schema

    serving = serving_settings("serve", args)
    if serving is None:
        return 2
    settings, host, port = serving
    prepare_multiprocess_dir(workers=1)
    if not args.no_migrate:
        try:
            with database_engine(settings) as engine:
                upgrade_schema(engine)
        except SQLAlchemyError as exc:
            print(f"calmon serve: cannot migrate the database: {exc}", file=sys.stderr)
            return 1
    from calmon.api.app import create_app
    from calmon.api.server import AnnouncingServer, server_options

    app = create_app(settings, lifespan_hooks=lifespan_hooks(settings))
    config = uvicorn.Config(app, host=host, port=port, **server_options(settings))
    AnnouncingServer(config, address=web_address(host, port)).run()
    return 0
