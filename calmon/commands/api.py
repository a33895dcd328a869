"""`calmon api`: the HTTP API under uvicorn, with one or more worker processes.

With ``--workers`` above 1 the service metrics are kept in a directory shared by the workers
(``PROMETHEUS_MULTIPROC_DIR``): a fresh temporary one, removed at exit, unless the variable is
already set, in which case that directory is emptied of old values first and kept.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from calmon.settings import Settings

APP_FACTORY = "calmon.api.app:create_app"


def add_bind_options(parser: argparse.ArgumentParser) -> None:
    """``--host`` and ``--port``, defaulting to ``CALMON_HOST`` / ``CALMON_PORT``."""
    parser.add_argument("--host", help="address to listen on (default: CALMON_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: CALMON_PORT, 8000)")


def serving_settings(command: str, args: argparse.Namespace) -> tuple[Settings, str, int] | None:
    """The settings of ``calmon COMMAND`` and the host and port it listens on (its options,
    else the settings), or None after saying on stderr why they are invalid or why that
    address must not be served (callers exit with 2)."""
    from calmon.commands.common import load_settings
    from calmon.settings import bind_refusal

    settings = load_settings(command)
    if settings is None:
        return None
    host = args.host or settings.host
    refusal = bind_refusal(settings, host)
    if refusal is not None:
        print(f"calmon {command}: {refusal}", file=sys.stderr)
        return None
    return settings, host, args.port or settings.port


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon api`."""
    add_bind_options(parser)
    parser.add_argument("--workers", type=int, help="worker processes (default: CALMON_WORKERS, 1)")


def prepare_multiprocess_dir(*, workers: int) -> Path | None:
    """Set up the metrics directory shared by worker processes; returns it if it must be
    removed at exit.

    A directory named by ``PROMETHEUS_MULTIPROC_DIR`` is created if missing and emptied of old
    values; otherwise, with several workers, a temporary one is made. Must run before anything
    in this process imports :mod:`calmon.instruments`.
    """
    from calmon.settings import MULTIPROC_ENV

    existing = os.environ.get(MULTIPROC_ENV)
    if not existing and workers <= 1:
        return None
    if existing:
        directory = Path(existing)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink()
        return None
    created = Path(tempfile.mkdtemp(prefix="calmon-metrics-"))
    os.environ[MULTIPROC_ENV] = str(created)
    return created


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; exit code 2 for a configuration that must not be served."""
    import uvicorn

    from calmon.api.server import server_options

    serving = serving_settings("api", args)
    if serving is None:
        return 2
    settings, host, port = serving
    workers = args.workers or settings.workers
    created = prepare_multiprocess_dir(workers=workers)
    try:
        uvicorn.run(
            APP_FACTORY,
            factory=True,
            host=host,
            port=port,
            workers=workers,
            **server_options(settings),
        )
    finally:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
    return 0
