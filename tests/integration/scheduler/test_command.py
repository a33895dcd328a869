"""`calmon scheduler` (once, unmigrated database, two processes on one SQLite file) and the
scheduler inside `calmon serve` with its metrics on the API's /metrics."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from calmon import __version__
from calmon.api.app import create_app
from calmon.cli import main
from calmon.settings import Settings
from harness.processes import free_port, wait_for
from tests.integration.scheduler.helpers import SettledClock, make_batch, send, windows
from tests.integration.tcp_proxy import TcpProxy
from tests.support.databases import upgraded

TIMEOUT = 30.0


def _scrape(url: str) -> dict[str, float]:
    """Unlabelled samples (and labelled ones by their full name) of a /metrics page."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


@pytest.fixture
def sqlite_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: SettledClock) -> str:
    """A SQLite file holding a model with two closed 5-minute windows of predictions."""
    url = upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    for name in list(os.environ):
        if name.startswith("CALMON_"):
            monkeypatch.delenv(name)
    settings = Settings(database_url=url)
    with TestClient(create_app(settings)) as client:
        assert client.put("/v1/models/fraud", json={"window": "5m", "grace": "0s"}).is_success
        batch = make_batch(
            prefix="p", start=clock.recent(3), count=100, spacing=timedelta(seconds=5), seed=1
        )
        send(client, "fraud", batch)
    return url


def _windows_of(url: str) -> list[dict[str, object]]:
    with TestClient(create_app(Settings(database_url=url))) as client:
        return windows(client, "fraud")


def test_scheduler_once_computes_every_due_window(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, clock: SettledClock
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("CALMON_RETENTION_DAYS", "0")
    assert main(["scheduler", "--once"]) == 0
    assert [r["start"] for r in _windows_of(sqlite_url)] == [
        clock.recent(3).strftime("%Y-%m-%dT%H:%M:%SZ"),
        clock.recent(2).strftime("%Y-%m-%dT%H:%M:%SZ"),
    ]


def test_scheduler_refuses_a_database_not_at_the_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", f"sqlite:///{tmp_path / 'empty.db'}")
    assert main(["scheduler", "--once"]) == 1
    assert "run `calmon migrate`" in capsys.readouterr().err


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Subprocesses started by a test, stopped (SIGTERM, then SIGKILL) at its end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _environment(url: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("CALMON_")},
        "CALMON_DATABASE_URL": url,
        "CALMON_SCHEDULER_INTERVAL": "0.3",
        "CALMON_RETENTION_DAYS": "0",
    }


def _start(
    processes: list[subprocess.Popen[bytes]],
    url: str,
    log: Path | None,
    *args: str,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``calmon ARGS`` on the database ``url`` (a 0.3 s tick, no retention), its output in
    ``log`` (None: discarded), stopped at the end of the test."""
    with log.open("wb") if log is not None else contextlib.nullcontext() as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "calmon.cli", *args],
            env=_environment(url),
            cwd=cwd,
            stdout=subprocess.DEVNULL if out is None else out,
            stderr=subprocess.DEVNULL if out is None else subprocess.STDOUT,
        )
    processes.append(process)
    return process


@contextlib.contextmanager
def _refusing(postgres_url: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy to the test server that refuses connections until it is set up, and the
    SQLAlchemy URL through it; closed at the end."""
    parts = urlsplit(postgres_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    proxy.set_mode("refuse")
    try:
        yield proxy, f"postgresql+psycopg://{parts.username}@127.0.0.1:{proxy.port}{parts.path}"
    finally:
        proxy.close()


# slow: real `calmon` processes
@pytest.mark.slow
def test_two_schedulers_on_one_sqlite_file_one_leads(
    sqlite_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    ports = [free_port(), free_port()]
    for i, port in enumerate(ports):
        _start(
            processes, sqlite_url, tmp_path / f"scheduler-{i}.log",
            "scheduler", "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        )  # fmt: skip

    def leaders() -> list[float]:
        pages = [_scrape(f"http://127.0.0.1:{port}/metrics") for port in ports]
        return sorted(page.get("calmon_scheduler_leader", -1.0) for page in pages)

    wait_for("one leader and one standby", lambda: leaders() == [0.0, 1.0], timeout=TIMEOUT)
    wait_for("both windows computed", lambda: len(_windows_of(sqlite_url)) == 2, timeout=TIMEOUT)
    page = next(
        p
        for p in (_scrape(f"http://127.0.0.1:{port}/metrics") for port in ports)
        if p.get("calmon_scheduler_leader") == 1.0
    )
    assert page["calmon_window_compute_duration_seconds_count"] == 2.0
    assert page[f'calmon_build_info{{version="{__version__}"}}'] == 1.0
    assert "calmon_last_compute_success_timestamp_seconds" in page
    assert page["calmon_windows_pending"] == 0.0


# slow: real `calmon` processes
@pytest.mark.slow
def test_serve_runs_the_scheduler_beside_the_api(
    sqlite_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    _start(
        processes, sqlite_url, tmp_path / "serve.log", "serve", "--port", str(port), cwd=tmp_path
    )

    def computed() -> int:
        try:
            return len(httpx.get(f"{base}/v1/models/fraud/windows", timeout=2).json()["windows"])
        except (httpx.TransportError, ValueError, KeyError):
            return 0

    wait_for("both windows computed by serve", lambda: computed() == 2, timeout=TIMEOUT)
    page = _scrape(f"{base}/metrics")
    assert page["calmon_scheduler_leader"] == 1.0
    assert page["calmon_window_compute_duration_seconds_count"] == 2.0
    assert page["calmon_windows_pending"] == 0.0
    assert page[f'calmon_build_info{{version="{__version__}"}}'] == 1.0


def _log_records(path: Path) -> list[dict[str, object]]:
    """Every line of a process's log, each of which must be one JSON object."""
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.postgres
def test_scheduler_waits_for_a_database_that_is_down_at_start(
    shared_postgres_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    log_path = tmp_path / "scheduler.log"
    with _refusing(shared_postgres_url) as (proxy, url):
        process = _start(processes, url, log_path, "scheduler", "--metrics-port", str(port))
        wait_for(
            "two logged retries",
            lambda: (
                sum(
                    r["message"] == "database unreachable; retrying" for r in _log_records(log_path)
                )
                >= 2
            ),
            timeout=TIMEOUT,
        )
        assert process.poll() is None
        assert _scrape(f"http://127.0.0.1:{port}/metrics").get("calmon_scheduler_leader") == 0.0
        proxy.set_mode("up")
        wait_for(
            "the scheduler leading once the database answers",
            lambda: (
                _scrape(f"http://127.0.0.1:{port}/metrics").get("calmon_scheduler_leader") == 1.0
            ),
            timeout=TIMEOUT,
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    records = _log_records(log_path)
    assert any(r["message"] == "scheduler started" for r in records)
    assert all("retry_in_seconds" in r for r in records if "retrying" in str(r["message"]))


def test_scheduler_reports_a_busy_metrics_port_in_one_line(sqlite_url: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "calmon.cli", "scheduler", "--metrics-port", str(port)],
            env=_environment(sqlite_url),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    assert done.returncode == 1
    assert time.monotonic() - started < 10
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"calmon scheduler: cannot serve metrics on 127.0.0.1:{port}: ")
    assert "in use" in line


def _listening_address(port: int) -> str:
    """The local IPv4 address a listening TCP socket of this machine is bound to on ``port``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:
            return socket.inet_ntoa(bytes.fromhex(address)[::-1])
    raise AssertionError(f"nothing listens on port {port}")


# slow: real `calmon` processes
@pytest.mark.slow
def test_scheduler_metrics_follow_the_api_bind_rule(
    sqlite_url: str, processes: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    _start(processes, sqlite_url, None, "scheduler", "--metrics-port", str(port))
    wait_for(
        "the metrics endpoint",
        lambda: bool(_scrape(f"http://127.0.0.1:{port}/metrics")),
        timeout=TIMEOUT,
    )
    assert _listening_address(port) == "127.0.0.1"
    refused = subprocess.run(
        [sys.executable, "-m", "calmon.cli", "scheduler", "--metrics-host", "0.0.0.0",
         "--metrics-port", str(free_port())],
        env=_environment(sqlite_url),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0" in refused.stderr
    assert "the scheduler's metrics would be open" in refused.stderr


@pytest.mark.postgres
def test_scheduler_waiting_for_the_database_stops_on_sigterm(
    shared_postgres_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log_path = tmp_path / "scheduler.log"
    with _refusing(shared_postgres_url) as (_, url):
        process = _start(processes, url, log_path, "scheduler", "--metrics-port", "0")
        wait_for(
            "a logged retry",
            lambda: any("retrying" in str(r["message"]) for r in _log_records(log_path)),
            timeout=TIMEOUT,
        )
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - started < 2
