"""Window results are never silently stale: a configuration change with the documented
recompute reaches every window however the scheduler planned, retention and computation never
deadlock, and windows retention expired stay expired (late labels included)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest
from sqlalchemy import select

from calmon.db.models import Model, Prediction, WindowChange
from calmon.services.retention import expire_windows_batch, run_retention
from calmon.services.retention_bound import change_retention
from calmon.services.windows.compute import compute_window
from calmon.services.windows.reference_cache import ReferenceCache
from harness.processes import wait_for
from tests.integration.scheduler.helpers import (
    FIVE_MINUTES,
    Batch,
    Env,
    SetClock,
    SettledClock,
    create_model,
    make_batch,
    send,
    send_labels,
)
from tests.support.clients import ClientFactory

FIXED_2020 = {"kind": "fixed", "start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"}
NEW_THRESHOLD = 0.7
NEW_CONFIG: dict[str, Any] = {"threshold": NEW_THRESHOLD, "pi0": [0.2]}


def _load(env: Env, name: str, windows: int, **config: Any) -> Batch:
    create_model(env.client, name, window="5m", grace="0s", threshold=0.5, pi0=[0.1], **config)
    batch = make_batch(
        prefix=name,
        start=env.clock.recent(windows),
        count=windows * 40,
        spacing=FIVE_MINUTES / 40,
        seed=5,
    )
    send(env.client, name, batch)
    return batch


def _precision(batch: Batch, threshold: float) -> float:
    scores, labels = batch.labelled()
    flagged = scores >= threshold
    return float(np.count_nonzero(flagged & (labels == 1)) / np.count_nonzero(flagged))


def _reconfigure(env: Env, name: str, first: datetime, last: datetime) -> None:
    """PUT a new threshold and π0, then request the recompute ``docs/reference/scheduler.md``
    asks for."""
    current = env.client.get(f"/v1/models/{name}").json()
    config = {key: current[key] for key in ("score_kind", "window", "grace", "reference")}
    response = env.client.put(f"/v1/models/{name}", json={**config, **NEW_CONFIG})
    assert response.status_code == 200, response.text
    response = env.client.post(
        f"/v1/models/{name}/recompute",
        params={"start": first.isoformat(), "end": (last + FIVE_MINUTES).isoformat()},
    )
    assert response.status_code == 202, response.text


def _assert_new_config(env: Env, name: str, batch: Batch, starts: list[datetime]) -> None:
    results = env.results(env.model_id(name))
    assert set(results) == set(starts)
    for start, result in results.items():
        record = result.record
        assert set(record["calibrated"]) == {"reference", "0.2"}, start
        expected = _precision(batch.where(start, start + FIVE_MINUTES), NEW_THRESHOLD)
        assert record["regular"]["precision"] == pytest.approx(expected), start


def test_a_window_planned_before_a_reconfiguration_is_computed_with_the_new_one(
    env: Env,
    clock: SettledClock,
) -> None:
    """The scheduler computes the windows of a plan made before ``PUT`` + recompute with the
    model as it was planned: each must be computed with the configuration of its commit."""
    batch = _load(env, "fixed", 3, reference=FIXED_2020)
    env.scheduler().tick()
    starts = [clock.recent(3), clock.recent(2), clock.recent(1)]
    with env.session_factory() as session:
        planned = session.scalars(select(Model).where(Model.name == "fixed")).one()
    _reconfigure(env, "fixed", starts[0], starts[-1])
    cache = ReferenceCache()
    for start in starts:
        with env.session_factory() as session:
            now = datetime.now(planned.created_at.tzinfo)
            computed = compute_window(
                session,
                model=planned,
                start=start,
                now=now,
                instance="stale-plan",
                cache=cache,
                margin=timedelta(seconds=5),
                only_due=True,
            )
            session.commit()
        assert computed is not None
    _assert_new_config(env, "fixed", batch, starts)


@pytest.mark.parametrize("migrated_url", ["postgresql"], indirect=True)
def test_a_reconfiguration_during_a_backfill_reaches_every_window(
    env: Env, clock: SettledClock
) -> None:
    """The probe's case: ``PUT`` + recompute while the scheduler works through a back-fill
    planned before it; once idle, every stored window carries the new configuration. (The
    pause that keeps the back-fill going holds SQLite's one write lock, which the ``PUT``
    would wait for: SQLite's stale plan is the test above.)"""
    windows = 8
    batch = _load(env, "fixed", windows, reference=FIXED_2020)
    starts = [clock.recent(k) for k in range(windows, 0, -1)]
    # each window is a slow one (1 s before it commits), so the PUT lands mid back-fill
    scheduler = env.scheduler(scheduler_interval=600.0, before_commit=lambda: time.sleep(1.0))
    ticking = threading.Thread(target=scheduler.tick)
    ticking.start()
    model_id = env.model_id("fixed")
    wait_for(
        "two windows of the back-fill",
        lambda: len(env.results(model_id)) >= 2,
        timeout=60,
        interval=0.05,
    )
    _reconfigure(env, "fixed", starts[0], starts[-1])
    # the reconfiguration landed in the middle of the back-fill's plan
    assert ticking.is_alive()
    assert len(env.results(model_id)) < windows
    ticking.join(timeout=120)
    assert not ticking.is_alive()
    scheduler.before_commit = None
    for _ in range(10):
        if scheduler.tick().due == 0:
            break
    _assert_new_config(env, "fixed", batch, starts)


@pytest.mark.parametrize("migrated_url", ["postgresql"], indirect=True)
def test_retention_and_a_computation_of_the_same_window_do_not_deadlock(
    env: Env, clock: SettledClock
) -> None:
    """A computation replacing a window's results and retention expiring that window, both
    queued behind a third transaction's row lock on the window's results: released together,
    they must not deadlock (each waited for the other's rows before they took one order)."""
    _load(env, "fixed", 1, reference=FIXED_2020)
    model_id = env.model_id("fixed")
    start = clock.recent(1)
    env.scheduler().tick()
    assert set(env.results(model_id)) == {start}
    _reconfigure(env, "fixed", start, start)
    url = env.url.replace("postgresql+psycopg://", "postgresql://", 1)
    errors: list[BaseException] = []

    def expire() -> None:
        try:
            with env.session_factory() as session:
                model = session.get(Model, model_id)
                assert model is not None
                expire_windows_batch(session, model=model, before=start + FIVE_MINUTES, limit=10)
                session.commit()
        except BaseException as exc:
            errors.append(exc)

    reports: list[Any] = []
    scheduler = env.scheduler()
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as watcher:
        holder.execute("SELECT 1 FROM window_results WHERE model_id = %s FOR UPDATE", (model_id,))
        computing = threading.Thread(target=lambda: reports.append(scheduler.tick()))
        computing.start()
        _wait_for_lock_waits(watcher, 1)
        expiring = threading.Thread(target=expire)
        expiring.start()
        _wait_for_lock_waits(watcher, 2)
        holder.rollback()
        computing.join(timeout=60)
        expiring.join(timeout=60)
    assert errors == []
    assert len(reports) == 1
    assert reports[0].failed == 0
    assert env.results(model_id) == {}
    assert env.states(model_id) == {}


def _wait_for_lock_waits(watcher: psycopg.Connection[Any], count: int) -> None:
    """Wait until ``count`` backends of this database wait for a lock."""

    def waiting() -> bool:
        row = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        return row is not None and row[0] >= count

    wait_for(f"{count} lock waits", waiting, timeout=30, interval=0.02)


def test_windows_retention_expired_do_not_come_back(env: Env, clock: SettledClock) -> None:
    """Retention expires two computed windows; late labels then reach their predictions (the
    day is not dropped yet) and the scan sees change records of them. Neither window may be
    recreated or computed again; the window after the cutoff is computed as usual."""
    create_model(env.client, "kept", window="5m", grace="0s")
    old = make_batch(
        prefix="old",
        start=clock.recent(2),
        count=40,
        spacing=FIVE_MINUTES / 20,
        seed=7,
        unlabelled=0.5,
    )
    fresh = make_batch(
        prefix="new", start=clock.recent(-1), count=20, spacing=FIVE_MINUTES / 20, seed=8
    )
    send(env.client, "kept", old)
    send(env.client, "kept", fresh)
    model_id = env.model_id("kept")
    scheduler = env.scheduler()
    scheduler.tick()
    assert set(env.results(model_id)) == {clock.recent(2), clock.recent(1)}
    # Ten days on, with ten days' retention: the cutoff falls inside the next window.
    later = clock.recent(0) + timedelta(days=10, minutes=7, seconds=30)
    with env.session_factory() as session:
        change_retention(session, days=10, now=clock.now())
        session.commit()
    run_retention(env.session_factory, now=later, retention_days=10)
    assert set(env.states(model_id)) == {clock.recent(-1)}
    assert env.results(model_id) == {}
    late = {item["id"]: 1 for item in old.items if "label" not in item}
    send_labels(env.client, "kept", late)
    # the same scheduler ten days on (the leader: on SQLite only the leader computes), its
    # cached period read again as it is after CACHE_SECONDS
    scheduler.retention.forget()
    scheduler.clock = SetClock(at=later)
    scheduler.tick()
    assert set(env.states(model_id)) == {clock.recent(-1)}
    assert set(env.results(model_id)) == {clock.recent(-1)}


def test_labels_of_predictions_older_than_retention_are_ignored(
    env: Env, make_client: ClientFactory, clock: SettledClock
) -> None:
    create_model(env.client, "labels", window="5m", grace="0s")
    old = clock.recent(0) - timedelta(days=3)
    response = env.client.post(
        "/v1/models/labels/predictions",
        json={
            "predictions": [
                {"id": "old", "timestamp": old.isoformat(), "score": 0.4},
                {"id": "new", "timestamp": clock.recent(1).isoformat(), "score": 0.6},
            ]
        },
    )
    assert response.status_code == 200, response.text
    with env.session_factory() as session:
        before = set(session.scalars(select(WindowChange.starts_at)))
        change_retention(session, days=2, now=clock.now())
        session.commit()
    client = make_client(retention_days=2)
    response = client.post(
        "/v1/models/labels/labels",
        json={
            "labels": [
                {"id": "old", "label": 1},
                {"id": "new", "label": 0},
                {"id": "x", "label": 1},
            ]
        },
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"updated": 1, "unchanged": 0, "pending": ["x"], "expired": 1}
    with env.session_factory() as session:
        labels = dict(
            session.execute(
                select(Prediction.client_id, Prediction.label).where(
                    Prediction.model_id == env.model_id("labels")
                )
            ).all()
        )
        after = set(session.scalars(select(WindowChange.starts_at)))
    assert labels == {"old": None, "new": 0}
    assert after == before
