"""Helpers shared by the integration and end-to-end tests: free ports, polling, a throwaway
HTTP server, a throwaway PostgreSQL database, a test that cannot run for want of a tool, and
the check that a missing client fails or skips as the environment asks."""

from __future__ import annotations

import os
import socket
import threading
import time
import types
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import psycopg
import pytest
from psycopg import sql

if TYPE_CHECKING:
    import uvicorn

T = TypeVar("T")

#: what did not run in this session and why, by title ("PostgreSQL tests"): the conftests
#: append the reasons of their skips, the root conftest shows them at the end of the run
#: (gathered from every pytest-xdist worker)
NOT_RUN: dict[str, list[str]] = {}
#: further lines for the end of the run (how long the container image took)
NOTES: list[str] = []


def not_run_reasons(title: str) -> list[str]:
    """The list of reasons why the tests called ``title`` did not run, for the end of the run
    (its section reads "<title> DID NOT RUN")."""
    return NOT_RUN.setdefault(title, [])


@contextmanager
def throwaway_database(admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the server of ``admin_url`` (a libpq URL of its
    maintenance database) for the ``with`` block: yields its name, then drops it."""
    name = f"calmon_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def database_url(admin_url: str, name: str) -> str:
    """The libpq URL of database ``name`` on the server of ``admin_url``."""
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(
    what: str,
    check: Callable[[], T],
    *,
    timeout: float,
    interval: float = 0.1,
    errors: tuple[type[Exception], ...] = (),
    context: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` every ``interval`` seconds until it returns something true, and return
    that; an AssertionError naming ``what`` and the last result after ``timeout`` seconds
    (followed by what ``context`` returns then, e.g. a server's log).

    An exception of ``errors`` counts as a false result (and is the last one); any other one,
    such as an assertion of ``check`` that the process waited for is still running, ends the
    wait at once. The one polling loop of the tests: use it rather than a loop of sleeps."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except errors as exc:
            last = exc
        else:
            if last:
                return last  # type: ignore[no-any-return]
        time.sleep(interval)
    message = f"timed out waiting for {what}; last: {last!r}"
    if context is not None:
        message += f"\n{context()}"
    raise AssertionError(message)


def server_started(server: uvicorn.Server, thread: threading.Thread) -> bool:
    """Whether the uvicorn ``server`` that ``thread`` runs has started (for :func:`wait_for`);
    an AssertionError once the thread has ended without starting it."""
    assert server.started or thread.is_alive(), "the server did not start"
    return bool(server.started)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (pytest shows what the test asserts instead)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served on a free port of 127.0.0.1 in a thread; yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def not_run(what: str, reason: str, *, require_env: str) -> NoReturn:
    """A test that cannot run for ``reason``: a failure under ``require_env``=1 (CI), else a
    skip with a warning that ``what`` did NOT RUN."""
    if os.environ.get(require_env) == "1":
        pytest.fail(f"{reason} and {require_env}=1")
    warnings.warn(f"{what} NOT RUN: {reason}", stacklevel=1)
    pytest.skip(f"{what} NOT RUN: {reason}")


def assert_required_or_skipped(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    conftest: types.ModuleType,
    find: Callable[[], object],
    *,
    require_env: str,
    missing: str,
) -> None:
    """With an empty PATH, ``find`` fails when ``require_env`` is 1 and otherwise skips (a
    skip ``conftest._skipped`` remembers for the run's closing warning), its message
    matching ``missing``."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(conftest, "_skipped", [])
    monkeypatch.setenv(require_env, "1")
    # BaseException: a skip must not pass for the failure (nor turn this test into a skip)
    with pytest.raises(BaseException, match=f"{require_env}=1") as required:
        find()
    assert required.type is pytest.fail.Exception
    assert conftest._skipped == []
    monkeypatch.delenv(require_env)
    with pytest.raises(BaseException, match=missing) as optional:
        find()
    assert optional.type is pytest.skip.Exception
    assert len(conftest._skipped) == 1
