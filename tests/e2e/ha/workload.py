"""The workload of the high-availability tests: writers that send predictions and labels to
`calmon api` until told to stop, retrying what was not acknowledged, and remember what was;
`calmon scheduler` processes; and the checks on what a database holds afterwards."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import psycopg

from harness.processes import calmon_command, clean_environment

MODELS = ("ha-a", "ha-b")
FIVE_MINUTES = timedelta(minutes=5)
#: windows the predictions fall in (closed ones, well before now)
WINDOWS = 3
BATCH = 100
JSON = {"Content-Type": "application/json"}


@dataclass
class Writer:
    """One client thread: batches of predictions (half of them labelled), then labels for the
    other half, each request retried (on a new connection) until a 200 or the stop."""

    index: int
    base: str
    first_window: datetime
    stop: threading.Event
    #: (model, id) -> (score, label sent with the prediction) of acknowledged predictions
    predictions: dict[tuple[str, str], tuple[float, int | None]] = field(default_factory=dict)
    #: (model, id) -> label of acknowledged labels
    labels: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (monotonic time, HTTP status or 0 for a cut connection) of every answer
    answers: list[tuple[float, int]] = field(default_factory=list)
    failure: BaseException | None = None
    thread: threading.Thread | None = None

    def run(self) -> None:
        """Send batch after batch until the stop (a thread's target)."""
        try:
            batch = 0
            while not self.stop.is_set():
                self._batch(batch)
                batch += 1
        except BaseException as exc:
            self.failure = exc

    def _batch(self, batch: int) -> None:
        model = MODELS[batch % len(MODELS)]
        items = []
        late: dict[str, int] = {}
        for i in range(BATCH):
            client_id = f"w{self.index}-{batch:05d}-{i:03d}"
            score = ((self.index * 7919 + batch * 104729 + i * 1299709) % 10_007) / 10_007
            label = int(score > 0.4) if (i + batch) % 3 else int(score > 0.8)
            seconds = (batch * BATCH + i) * 7 % int(WINDOWS * FIVE_MINUTES.total_seconds())
            moment = self.first_window + timedelta(seconds=seconds)
            item: dict[str, object] = {
                "id": client_id,
                "timestamp": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "score": score,
            }
            if i % 2 == 0:
                item["label"] = label
            else:
                late[client_id] = label
            items.append(item)
        body = json.dumps({"predictions": items}).encode()
        if not self._post(f"/v1/models/{model}/predictions", body):
            return
        for item in items:
            sent_label = item.get("label")
            sent_score = item["score"]
            assert isinstance(sent_score, float)
            self.predictions[(model, str(item["id"]))] = (
                sent_score,
                sent_label if isinstance(sent_label, int) else None,
            )
        labels = [{"id": key, "label": value} for key, value in late.items()]
        if self._post(f"/v1/models/{model}/labels", json.dumps({"labels": labels}).encode()):
            self.labels.update({(model, key): value for key, value in late.items()})

    def _post(self, path: str, body: bytes) -> bool:
        """True once acknowledged; False when stopped first. Only 200 and 503 are expected."""
        while not self.stop.is_set():
            try:
                response = httpx.post(self.base + path, content=body, headers=JSON, timeout=30)
            except httpx.TransportError:
                self.answers.append((time.monotonic(), 0))
                time.sleep(0.05)
                continue
            self.answers.append((time.monotonic(), response.status_code))
            if response.status_code == 200:
                return True
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "1"
            time.sleep(0.05)
        return False


def start_writers(base: str, first_window: datetime, count: int) -> list[Writer]:
    """``count`` writers running in threads."""
    stop = threading.Event()
    writers = [Writer(i, base, first_window, stop) for i in range(count)]
    for writer in writers:
        writer.thread = threading.Thread(target=writer.run, name=f"writer-{writer.index}")
        writer.thread.start()
    return writers


def stop_writers(writers: list[Writer]) -> None:
    """Stop the writers and wait for their last request; fail on a writer's failure."""
    writers[0].stop.set()
    for writer in writers:
        assert writer.thread is not None
        writer.thread.join(timeout=60)
        assert not writer.thread.is_alive(), "a writer did not stop"
        if writer.failure is not None:
            raise writer.failure


def unavailability(writers: list[Writer], since: float) -> tuple[float, int]:
    """Seconds from ``since`` to the first 200 after it, and the 503 answers in between."""
    answers = sorted(a for w in writers for a in w.answers if a[0] >= since)
    first_ok = next(at for at, status in answers if status == 200)
    refused = sum(1 for at, status in answers if at < first_ok and status == 503)
    return first_ok - since, refused


@dataclass
class Scheduler:
    """One `calmon scheduler` subprocess and its log."""

    process: subprocess.Popen[bytes]
    log: Path

    def records(self, message: str) -> list[dict[str, object]]:
        """The JSON log records of this process with ``message``."""
        found = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("message") == message:
                    found.append(record)
        return found

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_scheduler(database_url: str, log: Path, *, extra: Mapping[str, str] = {}) -> Scheduler:
    """`calmon scheduler` on ``database_url`` ticking every second."""
    env = {
        **clean_environment(),
        "CALMON_DATABASE_URL": database_url,
        "CALMON_SCHEDULER_INTERVAL": "1",
        "CALMON_SCHEDULER_SCAN_MARGIN": "5",
        "CALMON_RETENTION_DAYS": "0",
        "CALMON_DB_CONNECT_TIMEOUT": "1",
        "CALMON_LOG_LEVEL": "INFO",
        **extra,
    }
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [*calmon_command(), "scheduler", "--metrics-port", "0"],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    return Scheduler(process, log)


def computations(schedulers: list[Scheduler]) -> Counter[tuple[str, str, int]]:
    """How many times each (model, window start, version) was logged as computed."""
    return Counter(
        (str(r["model"]), str(r["window_start"]), int(str(r["version"])))
        for s in schedulers
        for r in s.records("window computed")
    )


#: windows whose stored '*' result does not count what the predictions table holds
STALE_WINDOWS = """
WITH counts AS (
    SELECT s.model_id, s.starts_at, count(p.client_id) AS total, count(p.label) AS labelled
    FROM window_states s
    LEFT JOIN predictions p
        ON p.model_id = s.model_id AND p.ts >= s.starts_at AND p.ts < s.ends_at
    GROUP BY s.model_id, s.starts_at
)
SELECT count(*) FROM counts c
LEFT JOIN window_results r
    ON r.model_id = c.model_id AND r.starts_at = c.starts_at AND r.segment = '*'
WHERE c.total > 0 AND (
    r.n IS DISTINCT FROM c.labelled OR r.unlabelled IS DISTINCT FROM c.total - c.labelled
)
"""


def unsettled(libpq_url: str) -> tuple[int, int, int]:
    """Windows whose stored result misses stored predictions, windows not computed at their
    latest version, and whether no window is computed yet (1): all 0 once settled."""
    with psycopg.connect(libpq_url, connect_timeout=5) as conn:
        stale = conn.execute(STALE_WINDOWS).fetchone()
        pending = conn.execute(
            "SELECT count(*) FROM window_states"
            " WHERE computed_version IS NULL OR computed_version < version"
        ).fetchone()
        computed = conn.execute("SELECT count(*) FROM window_results").fetchone()
    assert stale is not None
    assert pending is not None
    assert computed is not None
    return int(stale[0]), int(pending[0]), int(computed[0] == 0)


def stored(libpq_url: str) -> dict[tuple[str, str], tuple[float, int | None]]:
    """(model, id) -> (score, label) of every stored prediction."""
    with psycopg.connect(libpq_url, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT m.name, p.client_id, p.score, p.label"
            " FROM predictions p JOIN models m ON m.id = p.model_id"
        ).fetchall()
    return {(str(r[0]), str(r[1])): (float(r[2]), r[3]) for r in rows}


def check_acknowledged(
    writers: list[Writer], rows: dict[tuple[str, str], tuple[float, int | None]]
) -> tuple[int, int, list[tuple[str, str]]]:
    """The acknowledged predictions and labels, and those of them missing or wrong in
    ``rows`` (the stored predictions, one row per id by the primary key)."""
    wrong: list[tuple[str, str]] = []
    predictions = labels = 0
    for writer in writers:
        for key, (score, label) in writer.predictions.items():
            predictions += 1
            expected = writer.labels.get(key, label)
            row = rows.get(key)
            if row is None or row[0] != score or (expected is not None and row[1] != expected):
                wrong.append(key)
        labels += len(writer.labels)
        wrong += [key for key in writer.labels if key not in writer.predictions]
    return predictions, labels, wrong
