"""Several real `calmon scheduler` processes on one PostgreSQL: exactly one computes, a
standby takes over when it dies, and a leader killed in the middle of a window leaves no
partial result; the survivor computes every window exactly once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.db import migrate
from app.db.session import create_db_engine
from app.services.windows import WINDOW_LOCK_CLASS
from app.settings import Settings
from tests.integration.scheduler.helpers import floor, make_batch, send

FIVE_MINUTES = timedelta(minutes=5)
WINDOWS = 4
SEGMENTS = ["a", "b"]
TIMEOUT = 60.0


@dataclass
class SchedulerProcess:
    """One `calmon scheduler` subprocess and where its logs and metrics are."""

    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int

    def leader_gauge(self) -> float | None:
        """calmon_scheduler_leader as this process serves it (None: not answering)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2
            ) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("calmon_scheduler_leader "):
                return float(line.split()[1])
        return None

    def computed(self) -> list[dict[str, object]]:
        """The "window computed" log records of this process."""
        records = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("message") == "window computed":
                    records.append(record)
        return records


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def database(postgres_database: str) -> str:
    """A migrated PostgreSQL database holding one model with WINDOWS closed windows of data
    in segments a and b; returns its SQLAlchemy URL."""
    url = postgres_database.replace("postgresql://", "postgresql+psycopg://", 1)
    settings = Settings(database_url=url)
    engine = create_db_engine(settings)
    migrate.upgrade(engine)
    engine.dispose()
    first = floor(datetime.now(UTC), FIVE_MINUTES) - (WINDOWS + 1) * FIVE_MINUTES
    with TestClient(create_app(settings)) as client:
        response = client.put("/v1/models/fraud", json={"window": "5m", "grace": "0s"})
        assert response.status_code == 201
        batch = make_batch(
            prefix="p",
            start=first,
            count=WINDOWS * 150,
            spacing=timedelta(seconds=2),
            seed=4,
            segments=list(SEGMENTS),
        )
        send(client, "fraud", batch)
    return url


@pytest.fixture
def start_scheduler(database: str, tmp_path: Path) -> Iterator[Callable[..., SchedulerProcess]]:
    """Start `calmon scheduler` subprocesses on the database (stopped at the end)."""
    started: list[SchedulerProcess] = []

    def start(pause: float) -> SchedulerProcess:
        port = _free_port()
        log = tmp_path / f"scheduler-{len(started)}.log"
        env = {
            **os.environ,
            "CALMON_DATABASE_URL": database,
            "CALMON_SCHEDULER_INTERVAL": "0.3",
            "CALMON_SCHEDULER_SCAN_MARGIN": "5",
            "CALMON_SCHEDULER_PAUSE_BEFORE_COMMIT": str(pause),
            "CALMON_RETENTION_DAYS": "0",
        }
        with log.open("wb") as handle:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "app.cli",
                    "scheduler",
                    "--metrics-host",
                    "127.0.0.1",
                    "--metrics-port",
                    str(port),
                ],
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        started.append(SchedulerProcess(process=process, log=log, metrics_port=port))
        return started[-1]

    yield start
    for scheduler in started:
        if scheduler.process.poll() is None:
            scheduler.process.send_signal(signal.SIGTERM)
    for scheduler in started:
        try:
            scheduler.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            scheduler.process.kill()
            scheduler.process.wait()


def _results(url: str) -> list[tuple[datetime, str, str, int]]:
    libpq = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq) as conn:
        rows = conn.execute(
            "SELECT starts_at, segment, computed_by, version FROM window_results"
            " ORDER BY starts_at, segment"
        ).fetchall()
    return [(row[0], row[1], row[2], row[3]) for row in rows]


def _computing(url: str) -> bool:
    """True while some transaction holds a window lock (a window is being computed)."""
    libpq = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
            " AND objsubid = 2 AND granted",
            (WINDOW_LOCK_CLASS,),
        ).fetchone()
    return bool(row and row[0])


def _check_whole(url: str) -> dict[datetime, str]:
    """Every window has all its segments, computed together (one instance, one version) and
    none is pending; returns who computed each."""
    by_window: dict[datetime, list[tuple[str, str, int]]] = {}
    for start, segment, instance, version in _results(url):
        by_window.setdefault(start, []).append((segment, instance, version))
    assert len(by_window) == WINDOWS
    owners: dict[datetime, str] = {}
    for start, rows in by_window.items():
        assert sorted(segment for segment, _, _ in rows) == ["*", *SEGMENTS], start
        assert len({instance for _, instance, _ in rows}) == 1, start
        assert len({version for _, _, version in rows}) == 1, start
        owners[start] = rows[0][1]
    libpq = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq) as conn:
        scores = conn.execute("SELECT count(*) FROM window_scores").fetchone()
        pending = conn.execute(
            "SELECT count(*) FROM window_states"
            " WHERE computed_version IS NULL OR computed_version < version"
        ).fetchone()
    assert scores == (WINDOWS * (1 + len(SEGMENTS)),)
    assert pending == (0,)
    return owners


def test_one_scheduler_computes_and_a_standby_takes_over(
    database: str, start_scheduler: Callable[..., SchedulerProcess]
) -> None:
    schedulers = [start_scheduler(pause=0.0) for _ in range(3)]

    def gauges() -> list[float | None]:
        return [s.leader_gauge() for s in schedulers]

    _wait(lambda: sorted(g or 0.0 for g in gauges()) == [0.0, 0.0, 1.0], "one leader")
    _wait(lambda: len(_results(database)) == WINDOWS * 3, "every window computed")
    leader = next(s for s in schedulers if s.leader_gauge() == 1.0)
    owners = _check_whole(database)
    assert {owner.split(":")[1] for owner in owners.values()} == {str(leader.process.pid)}
    for scheduler in schedulers:
        if scheduler is not leader:
            assert scheduler.computed() == []
    time.sleep(1.0)  # several more ticks: still one leader, nothing recomputed
    assert sorted(g or 0.0 for g in gauges()) == [0.0, 0.0, 1.0]
    assert len(leader.computed()) == WINDOWS

    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(timeout=10)
    survivors = [s for s in schedulers if s is not leader]
    _wait(
        lambda: sorted(s.leader_gauge() or 0.0 for s in survivors) == [0.0, 1.0],
        "a standby to take over",
    )


def test_a_leader_killed_mid_window_leaves_nothing_half_written(
    database: str, start_scheduler: Callable[..., SchedulerProcess]
) -> None:
    # Each window's transaction waits 1.5 s after writing everything, before committing.
    first = start_scheduler(pause=1.5)
    _wait(lambda: first.leader_gauge() == 1.0, "the first scheduler to lead")
    second = start_scheduler(pause=1.5)
    _wait(lambda: second.leader_gauge() == 0.0, "the second scheduler to stand by")
    _wait(lambda: len(first.computed()) >= 1, "one window committed")
    _wait(lambda: _computing(database), "the next window in progress")
    done_before = {record["window_start"] for record in first.computed()}
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(timeout=10)
    rows_after_kill = _results(database)
    # The window in progress left nothing; the committed ones are whole.
    assert len(rows_after_kill) == len(done_before) * 3

    _wait(lambda: second.leader_gauge() == 1.0, "the standby to take over")
    _wait(lambda: len(_results(database)) == WINDOWS * 3, "every window computed")
    owners = _check_whole(database)
    first_pid, second_pid = str(first.process.pid), str(second.process.pid)
    assert {owner.split(":")[1] for owner in owners.values()} == {first_pid, second_pid}
    # Exactly once: every window is logged as computed by one process, one time.
    logged = Counter(record["window_start"] for s in (first, second) for record in s.computed())
    assert len(logged) == WINDOWS
    assert set(logged.values()) == {1}
    assert {r["window_start"] for r in second.computed()}.isdisjoint(done_before)
    time.sleep(1.0)
    assert len(second.computed()) == WINDOWS - len(done_before)
