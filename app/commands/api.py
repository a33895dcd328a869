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

APP_FACTORY = "app.api.app:create_app"


def add_bind_options(parser: argparse.ArgumentParser) -> None:
    """``--host`` and ``--port``, defaulting to ``CALMON_HOST`` / ``CALMON_PORT``."""
    parser.add_argument("--host", help="address to listen on (default: CALMON_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: CALMON_PORT, 8000)")


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon api`."""
    add_bind_options(parser)
    parser.add_argument("--workers", type=int, help="worker processes (default: CALMON_WORKERS, 1)")


def prepare_multiprocess_dir(*, workers: int) -> Path | None:
    """Set up the metrics directory shared by worker processes; returns it if it must be
    removed at exit.

    A directory named by ``PROMETHEUS_MULTIPROC_DIR`` is created if missing and emptied of old
    values; otherwise, with several workers, a temporary one is made. Must run before anything
    in this process imports :mod:`app.instruments`.
    """
    from app.settings import MULTIPROC_ENV

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

    from app.api.server import server_options
    from app.commands.common import load_settings
    from app.settings import bind_refusal

    settings = load_settings("api")
    if settings is None:
        return 2
    host = args.host or settings.host
    port = args.port or settings.port
    workers = args.workers or settings.workers
    refusal = bind_refusal(settings, host)
    if refusal is not None:
        print(f"calmon api: {refusal}", file=sys.stderr)
        return 2
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
