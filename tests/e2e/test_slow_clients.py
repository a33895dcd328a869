"""`calmon api` against clients that send too much or too little, over raw sockets: an oversized
request head is refused after reading a bounded part of it, and a request whose head or body
never arrives is closed once its time is up (``calmon.api.server``). Two workers, so the bounds
hold in uvicorn's worker processes too."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.processes import calmon_command, clean_environment, free_port, wait_until_up
from harness.stack import running

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 2.0
MAX_HEADER_BYTES = 16 * 1024
#: how late a close may come after its bound on a loaded machine
SLACK = 1.5
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`calmon api --workers 2` on a migrated SQLite file with short read bounds."""
    tmp_path = tmp_path_factory.mktemp("api")
    env = {
        **clean_environment(),
        "CALMON_DATABASE_URL": f"sqlite:///{tmp_path / 'calmon.db'}",
        "CALMON_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
        "CALMON_BODY_TIMEOUT": str(BODY_TIMEOUT),
        "CALMON_MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
        "CALMON_LOG_LEVEL": "WARNING",
    }
    subprocess.run([*calmon_command(), "migrate"], env=env, cwd=tmp_path, check=True, timeout=60)
    port = free_port()
    with running(
        [*calmon_command(), "api", "--port", str(port), "--workers", "2"],
        env=env,
        log=tmp_path / "api.log",
    ) as process:
        wait_until_up(f"http://127.0.0.1:{port}", process)
        yield port, process


def _read_until_closed(sock: socket.socket, *, limit: float) -> bytes:
    """Everything the server sends until it closes the connection (fails after ``limit``)."""
    sock.settimeout(limit)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and all its descendants, in MiB."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except FileNotFoundError:
            continue
        total += next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")
        )
        pending.extend(int(child) for child in children)
    return total / 1024


def test_an_oversized_header_is_refused_without_reading_it(
    api: tuple[int, subprocess.Popen[bytes]],
) -> None:
    port, process = api
    before = _tree_rss_mib(process.pid)
    sent: list[int] = []

    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ")

        def flood() -> None:
            chunk = b"a" * MIB
            try:
                for _ in range(64):
                    sock.sendall(chunk)
                    sent.append(len(chunk))
            except OSError:
                pass

        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        answer = _read_until_closed(sock, limit=10)
        elapsed = time.monotonic() - started
        sender.join(timeout=10)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert b'"headers_too_large"' in answer
    assert elapsed < 2.0
    assert sum(sent) < 64 * MIB
    assert _tree_rss_mib(process.pid) - before < 20
    assert process.poll() is None


@pytest.mark.parametrize(
    ("request_bytes", "bound"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json", HEADER_TIMEOUT),
        (b"", HEADER_TIMEOUT),
        (
            b"PUT /v1/models/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{",
            BODY_TIMEOUT,
        ),
    ],
    ids=["half-sent head", "nothing sent", "announced body never sent"],
)
def test_a_request_not_sent_in_time_is_closed(
    api: tuple[int, subprocess.Popen[bytes]], request_bytes: bytes, bound: float
) -> None:
    port, _ = api
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.monotonic()
        sock.sendall(request_bytes)
        answer = _read_until_closed(sock, limit=bound + 10)
        elapsed = time.monotonic() - started
    assert bound - 0.1 <= elapsed < bound + SLACK
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
    assert b'"request_timeout"' in answer


def test_a_slow_but_timely_request_is_served(api: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, _ = api
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for part in (
            b"GET /healthz HTTP/1.1\r\n",
            b"Host: 127.0.0.1\r\n",
            b"Connection: close\r\n\r\n",
        ):
            sock.sendall(part)
            time.sleep(HEADER_TIMEOUT / 4)  # the measured thing: a slow, timely client
        answer = _read_until_closed(sock, limit=10)
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_a_malformed_head_is_answered_400_in_json(api: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, _ = api
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = _read_until_closed(sock, limit=10)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(body)["error"]["code"] == "bad_request"
