"""Processes the benchmarks and the end-to-end tests start and wait for: the ``calmon``
command, its environment without the caller's ``CALMON_*`` settings, a free port, and the one
polling loop (:func:`wait_for`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


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


#: how long a started server may take to answer
STARTUP_SECONDS = 30


def calmon_command() -> list[str]:
    """The ``calmon`` command of this environment (its script, else ``python -m calmon.cli``)."""
    script = Path(sys.executable).parent / "calmon"
    return [str(script)] if script.exists() else [sys.executable, "-m", "calmon.cli"]


def clean_environment() -> dict[str, str]:
    """This process's environment without its calmon settings, so a started process reads
    only what its caller gives it."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CALMON_") and k != "PROMETHEUS_MULTIPROC_DIR"
    }


def wait_until_up(base: str, process: subprocess.Popen[bytes]) -> None:
    """Wait until the server ``process`` started answers ``/healthz`` at ``base``; an
    AssertionError when it exits first or does not answer within :data:`STARTUP_SECONDS`."""

    def healthy() -> bool:
        assert process.poll() is None, "the server exited"
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200

    wait_for(
        "the server to answer /healthz",
        healthy,
        timeout=STARTUP_SECONDS,
        interval=0.2,
        errors=(httpx.TransportError,),
    )


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
