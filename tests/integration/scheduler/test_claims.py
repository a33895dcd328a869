"""Claims on PostgreSQL, held by hand from another connection: a window claimed elsewhere is
skipped and computed once released; the leader's scan of a model waits for the model's
windows being computed, and gives up until the next plan after ``lock_timeout``."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from calmon.db.locks import WINDOW
from calmon.db.models import Model
from calmon.scheduler import instruments
from calmon.services.windows.planning import scan_model
from tests.integration.scheduler.helpers import (
    FIVE_MINUTES,
    Env,
    SettledClock,
    create_model,
    make_batch,
    send,
)

pytestmark = pytest.mark.parametrize("migrated_url", ["postgresql"], indirect=True)


def _libpq(env: Env) -> str:
    return env.url.replace("postgresql+psycopg://", "postgresql://", 1)


def _load(env: Env, name: str, windows: int, **config: object) -> None:
    create_model(env.client, name, window="5m", grace="0s", **config)
    send(
        env.client,
        name,
        make_batch(
            prefix=name,
            start=env.clock.recent(windows),
            count=windows * 20,
            spacing=FIVE_MINUTES / 20,
            seed=3,
        ),
    )


def test_a_window_claimed_elsewhere_is_skipped_then_computed(env: Env, clock: SettledClock) -> None:
    _load(
        env,
        "fixed",
        3,
        reference={"kind": "fixed", "start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"},
    )
    model_id = env.model_id("fixed")
    held = clock.recent(2)
    scheduler = env.scheduler()
    with psycopg.connect(_libpq(env)) as other:
        # What a claim of another scheduler holds: the window's own lock.
        seconds = int(held.timestamp())
        other.execute("SELECT pg_advisory_xact_lock(%s, %s)", (-model_id, seconds))
        report = scheduler.tick()
        assert report.computed == 2
        assert set(env.results(model_id)) == {clock.recent(3), clock.recent(1)}
        assert env.states(model_id)[held].computed_version is None
    report = scheduler.tick()
    assert report.computed == 1
    assert set(env.results(model_id)) == {clock.recent(3), held, clock.recent(1)}


def test_a_trailing_model_computes_nothing_while_one_of_its_windows_is_computed(
    env: Env,
    clock: SettledClock,
) -> None:
    _load(env, "trailing", 2)
    model_id = env.model_id("trailing")
    with env.session_factory() as session:
        model = session.get(Model, model_id)
        assert model is not None
        scan_model(session, model=model, now=datetime.now(UTC), margin=timedelta(seconds=5))
        session.commit()
    assert len(env.states(model_id)) == 2
    scheduler = env.scheduler(db_statement_timeout=1.0)
    with psycopg.connect(_libpq(env)) as other:
        # What a claim of another scheduler holds on a trailing model: its model lock,
        # exclusively. The leader's scan waits for it, at most lock_timeout.
        other.execute("SELECT pg_advisory_xact_lock(%s, %s)", (WINDOW, model_id))
        failures = instruments.COMPUTE_FAILURES.labels("trailing")._value.get()
        began = time.monotonic()
        report = scheduler.tick()
        waited = time.monotonic() - began
        assert report.computed == 0
        assert report.failed == 0
        assert instruments.COMPUTE_FAILURES.labels("trailing")._value.get() == failures
        # the scan waited for the lock (lock_timeout: 90% of the statement timeout)
        assert waited >= 0.85
    report = scheduler.tick()
    assert report.computed == 2
    assert set(env.results(model_id)) == {clock.recent(2), clock.recent(1)}
    # oldest first: the second window's trailing reference is the first one
    results = env.results(model_id)
    assert results[clock.recent(1)].record["reference"]["windows"] == 1
    assert results[clock.recent(2)].record["reference"] is None
    assert results[clock.recent(2)].computed_at < results[clock.recent(1)].computed_at
