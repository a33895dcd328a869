"""What fault tests share: `calmon api` as a real subprocess that can be killed and restarted,
the batches they send, a client that retries until acknowledged, and what is stored."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg

from harness.processes import (
    calmon_command,
    clean_environment,
    free_port,
    wait_for,
    wait_until_up,
)

MODEL = "faults"
#: an event time well inside the default retention period, whatever the date of the run
TIMESTAMP = (datetime.now(UTC) - timedelta(days=3)).strftime("%Y-%m-%dT10:00:00Z")
JSON = {"Content-Type": "application/json"}
#: attempts of a batch before a test gives up on it
MAX_ATTEMPTS = 30


class ApiProcess:
    """``calmon api --workers N`` in a session of its own, so that a kill reaches every
    worker, as when a container or machine dies."""

    def __init__(
        self,
        database_url: str,
        log: Path,
        *,
        workers: int = 2,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.log = log
        self.workers = workers
        self.settings = dict(settings or {})
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start (or start again, on the same port) and wait until it answers."""
        env = {
            **clean_environment(),
            "CALMON_DATABASE_URL": self.database_url,
            "CALMON_DB_CONNECT_TIMEOUT": "1",
            "CALMON_LOG_LEVEL": "WARNING",
            **self.settings,
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    *calmon_command(),
                    "api",
                    "--workers",
                    str(self.workers),
                    "--port",
                    str(self.port),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until_up(self.base, self.process)

    def kill(self) -> None:
        """SIGKILL the server and its workers at once."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        """Shut down gracefully if running (killed if that takes too long)."""
        if self.process is None:
            return
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None

    def create_model(self) -> None:
        """Create the test model."""
        response = httpx.put(f"{self.base}/v1/models/{MODEL}", json={}, timeout=10)
        assert response.status_code == 201, response.text

    def wait_ready(self, seconds: float) -> float:
        """Seconds until ``/readyz`` answers 200 (fails after ``seconds``)."""
        started = time.monotonic()
        wait_for(
            "the API to become ready",
            lambda: httpx.get(f"{self.base}/readyz", timeout=5).status_code == 200,
            timeout=seconds,
            errors=(httpx.TransportError,),
        )
        return time.monotonic() - started


#: what the ``api_factory`` fixture gives: a started `calmon api` process (keyword arguments:
#: its settings), stopped after the test
ApiFactory = Callable[..., ApiProcess]


def batch_body(batch: int, size: int) -> tuple[bytes, dict[str, float]]:
    """The body of batch number ``batch`` and the score of each of its ids."""
    scores = {
        f"b{batch:04d}-{i:04d}": ((batch * 7919 + i * 104729) % 10_007) / 10_007
        for i in range(size)
    }
    items = [
        {"id": client_id, "timestamp": TIMESTAMP, "score": score, "label": i % 2}
        for i, (client_id, score) in enumerate(scores.items())
    ]
    return json.dumps({"predictions": items}).encode(), scores


def stored(database_url: str) -> tuple[int, dict[str, float]]:
    """Row count of ``predictions`` and the score stored for each id."""
    libpq_url = database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq_url) as conn:
        count = conn.execute("SELECT count(*) FROM predictions").fetchone()
        rows = conn.execute("SELECT client_id, score FROM predictions").fetchall()
    assert count is not None
    return int(count[0]), {str(client_id): float(score) for client_id, score in rows}


def send_until_acknowledged(url: str, body: bytes) -> tuple[dict[str, int], int]:
    """POST ``body`` on a new connection each attempt until a 200; returns the answer and the
    number of attempts. Cut connections and 503 are retried, anything else fails the test."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            response = httpx.post(url, content=body, headers=JSON, timeout=30)
        except httpx.TransportError:
            continue
        if response.status_code == 200:
            answer: dict[str, int] = response.json()
            return answer, attempt
        assert response.status_code == 503, response.text
    raise AssertionError(f"not acknowledged after {MAX_ATTEMPTS} attempts")


def in_threads(count: int, work: Callable[[int], None]) -> None:
    """Run ``work(0)`` … ``work(count - 1)`` in threads; re-raise the first failure."""
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            work(index)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
