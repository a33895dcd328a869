"""Several real `calmon scheduler` processes on one PostgreSQL: every one computes windows it
claims, exactly one leads (scan, retention); every window is computed once per data version,
a process killed in the middle of a window leaves nothing half written and the others
finish, and late labels during a back-fill recompute exactly the windows they touch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from calmon.api.app import create_app
from calmon.db import migrate
from calmon.db.session import create_db_engine
from calmon.settings import Settings
from harness.processes import free_port, wait_for
from tests import paused_scheduler
from tests.integration.scheduler.helpers import Batch, floor, iso, make_batch, send, send_labels

FIVE_MINUTES = timedelta(minutes=5)
MODELS = ["m0", "m1", "m2"]
WINDOWS = 6
SEGMENTS = ["a", "b"]
TIMEOUT = 90.0


@dataclass
class SchedulerProcess:
    """One `calmon scheduler` subprocess and where its logs and metrics are."""

    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int

    def series(self, name: str) -> float | None:
        """The value of an unlabelled series as this process serves it (None: none)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2
            ) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(f"{name} "):
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


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture
def database(postgres_database: str) -> str:
    """A migrated PostgreSQL database holding the models of MODELS (5-minute windows, no
    grace, trailing references), no prediction yet; returns its SQLAlchemy URL."""
    url = postgres_database.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_db_engine(Settings(database_url=url))
    migrate.upgrade(engine)
    engine.dispose()
    with TestClient(create_app(Settings(database_url=url))) as client:
        for name in MODELS:
            response = client.put(f"/v1/models/{name}", json={"window": "5m", "grace": "0s"})
            assert response.status_code == 201
    return url


def _load(url: str, *, unlabelled: float = 0.0) -> dict[str, Batch]:
    """WINDOWS closed windows of predictions (segments a and b) for every model."""
    first = floor(datetime.now(UTC), FIVE_MINUTES) - (WINDOWS + 1) * FIVE_MINUTES
    batches = {}
    with TestClient(create_app(Settings(database_url=url))) as client:
        for i, name in enumerate(MODELS):
            batches[name] = make_batch(
                prefix=name,
                start=first,
                count=WINDOWS * 100,
                spacing=timedelta(seconds=3),
                seed=i,
                segments=list(SEGMENTS),
                unlabelled=unlabelled,
            )
            send(client, name, batches[name])
    return batches


@pytest.fixture
def start_scheduler(database: str, tmp_path: Path) -> Iterator[Callable[..., SchedulerProcess]]:
    """Start `calmon scheduler` subprocesses on the database (stopped at the end)."""
    started: list[SchedulerProcess] = []

    def start(pause: float) -> SchedulerProcess:
        port = free_port()
        log = tmp_path / f"scheduler-{len(started)}.log"
        env = {
            **os.environ,
            "CALMON_DATABASE_URL": database,
            "CALMON_SCHEDULER_INTERVAL": "0.3",
            "CALMON_SCHEDULER_SCAN_MARGIN": "5",
            "PYTHONPATH": paused_scheduler.ROOT,
            "CALMON_RETENTION_DAYS": "0",
        }
        with log.open("wb") as handle:
            process = subprocess.Popen(
                paused_scheduler.command(
                    pause, "--metrics-host", "127.0.0.1", "--metrics-port", str(port)
                ),
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


def _start_three(start: Callable[..., SchedulerProcess], pause: float) -> list[SchedulerProcess]:
    """Three schedulers, once all serve metrics and one of them leads."""
    schedulers = [start(pause=pause) for _ in range(3)]
    wait_for(
        "three schedulers up, one leading",
        lambda: (
            sorted(s.series("calmon_scheduler_leader") or 0.0 for s in schedulers)
            == [0.0, 0.0, 1.0]
            and all(s.series("calmon_windows_computed_total") is not None for s in schedulers)
        ),
        timeout=TIMEOUT,
    )
    return schedulers


def _results(url: str) -> list[tuple[str, datetime, str, str, int]]:
    with psycopg.connect(_libpq(url)) as conn:
        rows = conn.execute(
            "SELECT m.name, r.starts_at, r.segment, r.computed_by, r.version"
            " FROM window_results r JOIN models m ON m.id = r.model_id"
            " ORDER BY m.name, r.starts_at, r.segment"
        ).fetchall()
    return [(row[0], row[1], row[2], row[3], row[4]) for row in rows]


def _pending(url: str) -> int:
    with psycopg.connect(_libpq(url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM window_states"
            " WHERE computed_version IS NULL OR computed_version < version"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _done(url: str) -> bool:
    windows = {(name, start) for name, start, *_ in _results(url)}
    return len(windows) == len(MODELS) * WINDOWS and _pending(url) == 0


def _more_ticks(url: str, count: int = 3) -> None:
    """Wait until the leader has scanned every model ``count`` more times: that many more
    ticks (of 0.3 s) of every scheduler, in which nothing may be computed again."""
    seen: set[datetime] = set()

    def scanned() -> bool:
        with psycopg.connect(_libpq(url)) as conn:
            row = conn.execute("SELECT min(scanned_at) FROM model_scans").fetchone()
        assert row is not None
        seen.add(row[0])
        return len(seen) > count

    wait_for(f"{count} more scans", scanned, timeout=TIMEOUT, interval=0.05)


def _check_whole(url: str) -> dict[tuple[str, datetime], tuple[str, int]]:
    """Every window has all its segments, computed together (one instance, one version), and
    the scores match; returns who computed each window and from which version."""
    by_window: dict[tuple[str, datetime], list[tuple[str, str, int]]] = {}
    for name, start, segment, instance, version in _results(url):
        by_window.setdefault((name, start), []).append((segment, instance, version))
    assert len(by_window) == len(MODELS) * WINDOWS
    owners = {}
    for key, rows in by_window.items():
        assert sorted(segment for segment, _, _ in rows) == ["*", *SEGMENTS], key
        assert len({(instance, version) for _, instance, version in rows}) == 1, key
        owners[key] = (rows[0][1], rows[0][2])
    with psycopg.connect(_libpq(url)) as conn:
        scores = conn.execute("SELECT count(*) FROM window_scores").fetchone()
    assert scores == (len(MODELS) * WINDOWS * (1 + len(SEGMENTS)),)
    return owners


def _computations(schedulers: list[SchedulerProcess]) -> Counter[tuple[str, str, int]]:
    """How many times each (model, window start, version) was logged as computed."""
    return Counter(
        (str(r["model"]), str(r["window_start"]), int(str(r["version"])))
        for s in schedulers
        for r in s.computed()
    )


def _pid(instance: str) -> str:
    return instance.split(":")[1]


def test_three_schedulers_share_a_backfill_computing_each_window_once(
    database: str, start_scheduler: Callable[..., SchedulerProcess]
) -> None:
    schedulers = _start_three(start_scheduler, pause=0.2)
    _load(database)
    wait_for("every window computed", lambda: _done(database), timeout=TIMEOUT)
    owners = _check_whole(database)
    _more_ticks(database)  # nothing is computed again

    computations = _computations(schedulers)
    assert set(computations.values()) == {1}
    per_window = Counter((name, start) for name, start, _ in computations)
    assert len(per_window) == len(MODELS) * WINDOWS
    assert set(per_window.values()) == {1}
    # The stored results are those of the logged computations.
    stored = {(name, iso(start), version) for (name, start), (_, version) in owners.items()}
    assert stored == set(computations)
    for scheduler in schedulers:
        mine = scheduler.computed()
        assert mine, "every process computes some windows"
        assert scheduler.series("calmon_windows_computed_total") == len(mine)
        assert {_pid(str(r["instance"])) for r in mine} == {str(scheduler.process.pid)}
    assert sorted(s.series("calmon_scheduler_leader") or 0.0 for s in schedulers) == [
        0.0,
        0.0,
        1.0,
    ]


def _claims(url: str) -> list[tuple[str, str, int]]:
    """(application name, model name, window start in Unix seconds) of each window claimed by
    a transaction now (its advisory window lock)."""
    with psycopg.connect(_libpq(url)) as conn:
        rows = conn.execute(
            "SELECT a.application_name, m.name, l.objid::bigint"
            " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " JOIN models m ON m.id = 4294967296 - l.classid::bigint"
            " WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted"
            " AND a.datname = current_database()"
            " AND l.classid::bigint > 2147483647"
        ).fetchall()
    return [(str(row[0]), str(row[1]), int(row[2])) for row in rows]


def test_a_leader_killed_mid_window_leaves_nothing_half_written(
    database: str, start_scheduler: Callable[..., SchedulerProcess]
) -> None:
    # Each window's transaction waits 1 s after writing everything, before committing.
    schedulers = _start_three(start_scheduler, pause=1.0)
    leader = next(s for s in schedulers if s.series("calmon_scheduler_leader") == 1.0)
    _load(database)
    marker = f":{leader.process.pid}:"

    def leader_claims() -> list[tuple[str, int]]:
        return [(name, at) for app, name, at in _claims(database) if marker in app]

    wait_for(
        "the leader mid-window",
        lambda: len(leader.computed()) >= 1 and bool(leader_claims()),
        timeout=TIMEOUT,
    )
    (model, seconds), *_ = leader_claims()
    window = iso(datetime.fromtimestamp(seconds, tz=UTC))
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(timeout=10)
    # Nothing of the window in progress was stored.
    assert not [row for row in _results(database) if row[0] == model and iso(row[1]) == window]
    survivors = [s for s in schedulers if s is not leader]
    wait_for(
        "a survivor to lead",
        lambda: sorted(s.series("calmon_scheduler_leader") or 0.0 for s in survivors) == [0.0, 1.0],
        timeout=TIMEOUT,
    )
    wait_for("every window computed", lambda: _done(database), timeout=TIMEOUT)
    owners = _check_whole(database)
    _more_ticks(database)
    killed_logged = {(str(r["model"]), str(r["window_start"])) for r in leader.computed()}
    assert (model, window) not in killed_logged
    owner, _ = next(
        v for (name, start), v in owners.items() if (name, iso(start)) == (model, window)
    )
    assert _pid(owner) in {str(s.process.pid) for s in survivors}
    # Exactly once per window and version, over every process, the killed one included.
    computations = _computations(schedulers)
    assert set(computations.values()) == {1}
    per_window = Counter((name, start) for name, start, _ in computations)
    assert len(per_window) == len(MODELS) * WINDOWS
    assert set(per_window.values()) == {1}
    for scheduler in survivors:
        assert scheduler.computed()


def test_late_labels_during_a_backfill_recompute_exactly_the_windows_they_touch(
    database: str, start_scheduler: Callable[..., SchedulerProcess]
) -> None:
    schedulers = _start_three(start_scheduler, pause=0.4)
    batches = _load(database, unlabelled=0.5)
    first = floor(datetime.now(UTC), FIVE_MINUTES) - (WINDOWS + 1) * FIVE_MINUTES
    touched = {("m0", first), ("m0", first + FIVE_MINUTES), ("m1", first)}

    def computed_touched() -> bool:
        done = {(name, start) for name, start, *_ in _results(database)}
        return touched <= done

    wait_for("the touched windows computed once", computed_touched, timeout=TIMEOUT)
    assert _pending(database) > 0, "the back-fill goes on while the labels arrive"
    with TestClient(create_app(Settings(database_url=database))) as client:
        for name, start in sorted(touched):
            part = batches[name].where(start, start + FIVE_MINUTES)
            late = {
                str(item["id"]): 1 - int(part.labels[i] == 1)
                for i, item in enumerate(part.items)
                if "label" not in item
            }
            assert late
            send_labels(client, name, late)
    wait_for("every window computed", lambda: _done(database), timeout=TIMEOUT)
    _check_whole(database)
    _more_ticks(database)

    computations = _computations(schedulers)
    assert set(computations.values()) == {1}
    per_window = Counter((name, start) for name, start, _ in computations)
    assert {key for key, count in per_window.items() if count == 2} == {
        (name, iso(start)) for name, start in touched
    }
    assert set(per_window.values()) == {1, 2}
    assert len(per_window) == len(MODELS) * WINDOWS
    with psycopg.connect(_libpq(database)) as conn:
        unlabelled = conn.execute(
            "SELECT m.name, r.starts_at, r.unlabelled FROM window_results r"
            " JOIN models m ON m.id = r.model_id WHERE r.segment = '*'"
        ).fetchall()
    for name, start, count in unlabelled:
        assert (count == 0) == ((name, start) in touched), (name, start)
