"""One retention period for every process of a database: the API's ingestion bounds, the
scheduler's planning and the retention run read the stored period, whatever each process's
``CALMON_RETENTION_DAYS``, so no process computes again a window another expired."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, union
from sqlalchemy.orm import Session, sessionmaker

from calmon.api.app import create_app
from calmon.db.models import Model, WindowResult, WindowState
from calmon.db.session import create_db_engine, create_session_factory
from calmon.scheduler.runner import RETENTION_EVERY, WindowScheduler
from calmon.services.retention_bound import (
    CACHE_SECONDS,
    RetentionBound,
    change_retention,
    settled,
    stored_retention,
)
from calmon.settings import Settings
from tests.integration.scheduler.helpers import (
    FIVE_MINUTES,
    SetClock,
    SettledClock,
    create_model,
    make_batch,
    send,
    send_labels,
)

#: a window end and the retention run are this far apart in the tests below
DAY = timedelta(days=1)


class Processes:
    """An API and schedulers on one database, each with its own settings and a clock the test
    moves."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_db_engine(Settings(database_url=url))
        self.session_factory: sessionmaker[Session] = create_session_factory(self.engine)
        self.clients: list[TestClient] = []
        self.schedulers: list[WindowScheduler] = []

    def settings(self, days: int) -> Settings:
        return Settings(
            database_url=self.url,
            retention_days=days,
            scheduler_scan_margin=5.0,
            scheduler_interval=0.2,
        )

    def api(self, *, days: int, clock: SetClock) -> TestClient:
        client = TestClient(create_app(self.settings(days), clock=clock))
        client.__enter__()
        self.clients.append(client)
        return client

    def scheduler(self, *, days: int, clock: SetClock) -> WindowScheduler:
        scheduler = WindowScheduler(
            self.settings(days), instance=f"days-{days}-{len(self.schedulers)}", clock=clock
        )
        self.schedulers.append(scheduler)
        return scheduler

    def close(self) -> None:
        for scheduler in self.schedulers:
            scheduler.shutdown()
        for client in self.clients:
            client.__exit__(None, None, None)
        self.engine.dispose()


@pytest.fixture
def processes(migrated_url: str) -> Iterator[Processes]:
    started = Processes(migrated_url)
    yield started
    started.close()


def _windows(processes: Processes) -> set[datetime]:
    """Starts of the model's windows that hold a state or a result."""
    with processes.session_factory() as session:
        model_id = session.scalar(select(Model.id).where(Model.name == "m"))
        return set(
            session.scalars(
                union(
                    select(WindowState.starts_at).where(WindowState.model_id == model_id),
                    select(WindowResult.starts_at).where(WindowResult.model_id == model_id),
                )
            )
        )


@pytest.mark.parametrize("first", ["scheduler", "api"])
def test_an_api_at_3_days_and_a_retention_run_at_1_day_resurrect_nothing(
    processes: Processes, clock: SettledClock, first: str
) -> None:
    """The API is configured with 3 days, the scheduler that runs retention with 1 day, and a
    second scheduler with 3 days plans once the first has stopped. Whichever process starts
    first stores its period and every process uses it: with 1 day the two windows that ended
    a day before the retention run are expired, the API refuses predictions for them and
    ignores labels of theirs, and no scheduler computes them again; with 3 days nothing is
    expired and late data is computed as usual."""
    start = clock.recent(0) + timedelta(seconds=150)
    api_clock, scheduler_clock = SetClock(at=start), SetClock(at=start)
    if first == "scheduler":
        expiring = processes.scheduler(days=1, clock=scheduler_clock)
        expiring.tick()
        api = processes.api(days=3, clock=api_clock)
    else:
        api = processes.api(days=3, clock=api_clock)
        expiring = processes.scheduler(days=1, clock=scheduler_clock)
    stored_days = 1 if first == "scheduler" else 3
    create_model(api, "m", window="5m", grace="0s")
    old = make_batch(
        prefix="old", start=clock.recent(3), count=60, spacing=FIVE_MINUTES / 20, seed=3,
        unlabelled=0.5,
    )  # fmt: skip
    send(api, "m", old)
    expiring.tick()
    computed = {clock.recent(3), clock.recent(2), clock.recent(1)}
    assert _windows(processes) == computed
    # A day on, less five minutes: a one-day cutoff falls in the middle of recent(1), so it
    # expires recent(3) and recent(2); the hourly run is due on the scheduler's clock.
    later = start + DAY - FIVE_MINUTES
    api_clock.at = scheduler_clock.at = later
    scheduler_clock.seconds = RETENTION_EVERY
    expiring.tick()
    expired = {clock.recent(3), clock.recent(2)} if stored_days == 1 else set()
    assert _windows(processes) == computed - expired
    # late data for the two oldest windows through the API configured with 3 days
    late = api.post(
        "/v1/models/m/predictions",
        json={
            "predictions": [
                {"id": "late", "timestamp": (clock.recent(2) + timedelta(minutes=1)).isoformat(),
                 "score": 0.7, "label": 1}
            ]
        },
    )  # fmt: skip
    send_labels(api, "m", {item["id"]: 1 for item in old.items if "label" not in item})
    # the scheduler with 1 day stops; one with 3 days leads and plans (on SQLite only the
    # leader computes)
    expiring.shutdown()
    planner = processes.scheduler(days=3, clock=SetClock(at=later))
    report = planner.tick()
    assert report.leader
    assert report.failed == 0
    assert _windows(processes) == computed - expired
    assert late.status_code == (422 if stored_days == 1 else 200), late.text
    if stored_days == 3:
        assert report.computed >= 2  # the late data was computed
    with processes.session_factory() as session:
        stored = stored_retention(session)
    assert stored is not None
    assert stored.days == stored_days


def test_a_period_read_is_kept_for_the_cache_time_and_a_disagreement_is_logged(
    processes: Processes, caplog: pytest.LogCaptureFixture
) -> None:
    clock = SetClock(at=datetime(2026, 1, 1, tzinfo=UTC))
    seeding, other = RetentionBound(7), RetentionBound(30)
    with processes.session_factory() as session, caplog.at_level(logging.WARNING):
        assert seeding.read(session, now=clock.at, monotonic=0.0).days == 7
        session.commit()
        assert [r for r in caplog.records if "differs" in r.getMessage()] == []
        assert other.read(session, now=clock.at, monotonic=0.0).days == 7
        assert other.read(session, now=clock.at, monotonic=1.0).days == 7
        warnings = [r for r in caplog.records if "differs" in r.getMessage()]
        assert len(warnings) == 1  # once per stored value, not per read
        changed_at = clock.at + timedelta(hours=1)
        assert change_retention(session, days=2, now=changed_at) == 7
        session.commit()
        # the old value until the cache time has passed, then the new one
        assert other.read(session, now=changed_at, monotonic=CACHE_SECONDS - 0.1).days == 7
        assert other.read(session, now=changed_at, monotonic=CACHE_SECONDS).days == 2
        assert seeding.refresh(session, now=changed_at, monotonic=0.0).days == 2
        stored = stored_retention(session)
    assert stored is not None
    assert stored.changed_at == changed_at
    assert not settled(
        stored, now=changed_at + timedelta(seconds=CACHE_SECONDS), scheduler_interval=1.0
    )
    assert settled(
        stored, now=changed_at + timedelta(seconds=CACHE_SECONDS + 2.0), scheduler_interval=1.0
    )


def test_the_retention_run_waits_until_a_changed_period_reaches_every_process(
    processes: Processes, clock: SettledClock
) -> None:
    """A period lowered a moment ago is not expired by at once: another process may still
    plan with the former one for ``CACHE_SECONDS`` and two intervals. The run after that
    expires by it."""
    start = clock.recent(0) + timedelta(seconds=150)
    api_clock, scheduler_clock = SetClock(at=start), SetClock(at=start)
    api = processes.api(days=3, clock=api_clock)
    scheduler = processes.scheduler(days=3, clock=scheduler_clock)
    create_model(api, "m", window="5m", grace="0s")
    batch = make_batch(
        prefix="p", start=clock.recent(3), count=60, spacing=FIVE_MINUTES / 20, seed=4
    )
    send(api, "m", batch)
    scheduler.tick()
    computed = {clock.recent(3), clock.recent(2), clock.recent(1)}
    assert _windows(processes) == computed
    later = start + DAY - FIVE_MINUTES
    with processes.session_factory() as session:
        change_retention(session, days=1, now=later - timedelta(seconds=CACHE_SECONDS))
        session.commit()
    scheduler_clock.at = later
    scheduler_clock.seconds = RETENTION_EVERY
    scheduler.tick()
    assert _windows(processes) == computed
    # the next run (due an hour on, on the monotonic clock), a minute on by the wall clock's
    # instants so that the cutoff stays inside recent(1): the two windows before it go
    scheduler_clock.at = later + timedelta(minutes=1)
    scheduler_clock.seconds = 2 * RETENTION_EVERY
    scheduler.tick()
    assert _windows(processes) == {clock.recent(1)}
