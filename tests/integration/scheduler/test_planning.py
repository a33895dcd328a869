"""Window planning: epoch alignment, closed windows only, grace, late labels, late commits,
no double computation inside the scan overlap, failure isolation. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import update

from calmon.db.changes import record_changes
from calmon.db.models import Model, Prediction
from calmon.metrics import evaluate
from calmon.scheduler import instruments, runner
from calmon.scheduler.runner import TickReport
from calmon.services.windows.planning import (
    DueWindow,
    ScanResult,
    due_windows,
    fingerprint,
    first_fingerprints,
    scan_model,
)
from tests.integration.scheduler.helpers import (
    MARGIN,
    Env,
    SettledClock,
    by_window,
    create_model,
    iso,
    make_batch,
    send,
    send_labels,
    settle,
    windows,
)

FIVE_MINUTES = timedelta(minutes=5)


def _recent_start(clock: SettledClock, windows_ago: int) -> datetime:
    return clock.recent(windows_ago)


def _scan(env: Env, model_id: int) -> ScanResult:
    """One scan of a model, now, committed."""
    with env.session_factory() as session:
        model = session.get(Model, model_id)
        assert model is not None
        result = scan_model(
            session, model=model, now=datetime.now(UTC), margin=timedelta(seconds=MARGIN)
        )
        session.commit()
    return result


def test_windows_are_aligned_to_the_utc_epoch(env: Env) -> None:
    create_model(env.client, "hourly", window="1h", grace="0s")
    create_model(env.client, "weekly", window="7d", grace="0s")
    # 10:30 at +02:00 is 08:30 UTC: the hourly window starts at 08:00Z.
    local = datetime.fromisoformat("2026-03-04T10:30:00+02:00")
    items = [
        {"id": "a", "timestamp": local.isoformat(), "score": 0.7, "label": 1},
        {"id": "b", "timestamp": "2026-03-04T08:59:59.999999Z", "score": 0.2, "label": 0},
        {"id": "c", "timestamp": "2026-03-04T09:00:00Z", "score": 0.4, "label": 0},
    ]
    for model in ("hourly", "weekly"):
        response = env.client.post(f"/v1/models/{model}/predictions", json={"predictions": items})
        assert response.status_code == 200
    report = env.scheduler().tick()
    assert report.computed == 3
    hourly = by_window(windows(env.client, "hourly"))
    assert sorted(hourly) == ["2026-03-04T08:00:00Z", "2026-03-04T09:00:00Z"]
    assert hourly["2026-03-04T08:00:00Z"]["end"] == "2026-03-04T09:00:00Z"
    assert hourly["2026-03-04T08:00:00Z"]["n"] == 2
    assert hourly["2026-03-04T09:00:00Z"]["n"] == 1
    # 7d windows start on Thursdays (1970-01-01 was one): 2026-03-04 is a Wednesday.
    weekly = by_window(windows(env.client, "weekly"))
    assert list(weekly) == ["2026-02-26T00:00:00Z"]
    assert datetime.fromisoformat("2026-02-26T00:00:00+00:00").weekday() == 3
    assert weekly["2026-02-26T00:00:00Z"]["end"] == "2026-03-05T00:00:00Z"
    assert weekly["2026-02-26T00:00:00Z"]["n"] == 3


def test_the_last_microseconds_of_a_window_stay_in_it(env: Env) -> None:
    create_model(env.client, "edge", window="1h", grace="0s")
    items = [
        {"id": "a", "timestamp": "2026-03-04T08:59:59.9996Z", "score": 0.7, "label": 1},
        {"id": "b", "timestamp": "2026-03-04T08:59:59.999999Z", "score": 0.2, "label": 0},
    ]
    response = env.client.post("/v1/models/edge/predictions", json={"predictions": items})
    assert response.status_code == 200
    report = env.scheduler().tick()
    assert report.computed == 1
    assert list(by_window(windows(env.client, "edge"))) == ["2026-03-04T08:00:00Z"]


def test_only_closed_windows_past_their_grace_are_computed(env: Env, clock: SettledClock) -> None:
    create_model(env.client, "fraud", window="5m", grace="20m")
    batches = {
        ago: make_batch(
            prefix=f"w{ago}",
            start=_recent_start(clock, ago),
            count=20,
            spacing=timedelta(seconds=10),
            seed=ago,
        )
        for ago in (0, 2, 6)
    }
    for batch in batches.values():
        send(env.client, "fraud", batch)
    report = env.scheduler().tick()
    # The open window (0) and the one that ended 5-10 minutes ago (2) wait; 6 is past grace.
    assert report.computed == 1
    assert list(by_window(windows(env.client, "fraud"))) == [iso(_recent_start(clock, 6))]
    model_id = env.model_id("fraud")
    states = env.states(model_id)
    assert set(states) == {_recent_start(clock, ago) for ago in (0, 2, 6)}
    assert states[_recent_start(clock, 0)].computed_version is None
    assert states[_recent_start(clock, 2)].computed_version is None
    # Planning with a later clock: window 2 is due 20 minutes after it ends, 0 after that.
    with env.session_factory() as session:
        model = session.get(Model, model_id)
        assert model is not None
        ends_2 = _recent_start(clock, 2) + FIVE_MINUTES
        before = due_windows(session, model=model, now=ends_2 + timedelta(minutes=19))
        after = due_windows(session, model=model, now=ends_2 + timedelta(minutes=20))
        later = due_windows(session, model=model, now=ends_2 + timedelta(minutes=40))
    assert [w.start for w in before] == []
    assert [w.start for w in after] == [_recent_start(clock, 2)]
    assert [w.start for w in later] == [_recent_start(clock, 2), _recent_start(clock, 0)]


def test_late_labels_trigger_a_recomputation_of_their_window_only(
    env: Env, clock: SettledClock
) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s")
    batch = make_batch(
        prefix="p",
        start=_recent_start(clock, 6),
        count=90,
        spacing=timedelta(seconds=10),
        seed=7,
        unlabelled=0.5,
    )
    send(env.client, "fraud", batch)
    scheduler = env.scheduler()
    assert scheduler.tick().computed == 3
    first = by_window(windows(env.client, "fraud"))
    middle = _recent_start(clock, 5)
    part = batch.where(middle, middle + FIVE_MINUTES)
    _scores, labels = part.labelled()
    record = first[iso(middle)]
    assert (record["n"], record["n_pos"]) == (labels.size, int(labels.sum()))
    assert record["unlabelled"] == len(part.items) - labels.size > 0
    assert scheduler.tick().computed == 0

    rng = np.random.default_rng(1)
    late = {item["id"]: int(rng.random() < 0.5) for item in part.items if "label" not in item}
    send_labels(env.client, "fraud", late)
    assert scheduler.tick().computed == 1
    second = by_window(windows(env.client, "fraud"))
    updated = second[iso(middle)]
    new_labels = np.array(
        [item.get("label", late.get(item["id"], -1)) for item in part.items], dtype=np.int8
    )
    expected = evaluate(part.scores, new_labels, threshold=0.5, score_kind="probability")
    assert updated["n"] == len(part.items)
    assert updated["unlabelled"] == 0
    assert updated["regular"]["roc_auc"] == pytest.approx(expected["regular"]["roc_auc"], abs=1e-12)
    assert updated["computed_at"] > record["computed_at"]
    for start, other in first.items():
        if start != iso(middle):
            assert second[start]["computed_at"] == other["computed_at"]
    model_id = env.model_id("fraud")
    state = env.states(model_id)[middle]
    assert (state.version, state.computed_version) == (2, 2)
    assert scheduler.tick().computed == 0


@pytest.mark.parametrize("interval", [None, 1e-6], ids=["per_tick", "before_every_window"])
def test_repeated_scans_inside_the_margin_compute_each_window_once(
    env: Env, interval: float | None, clock: SettledClock
) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s")
    send(
        env.client,
        "fraud",
        make_batch(
            prefix="p",
            start=_recent_start(clock, 4),
            count=60,
            spacing=timedelta(seconds=10),
            seed=3,
        ),
    )
    # An interval this short plans again, and the leader scans again, before every window.
    scheduler = env.scheduler() if interval is None else env.scheduler(scheduler_interval=interval)
    computed = [scheduler.tick().computed for _ in range(4)]
    assert computed == [2, 0, 0, 0]
    model_id = env.model_id("fraud")
    assert {s.version for s in env.states(model_id).values()} == {1}


def test_a_window_not_computed_yet_gets_a_new_version_only_when_its_predictions_change(
    env: Env,
    clock: SettledClock,
) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s")
    start = _recent_start(clock, 3)
    batch = make_batch(
        prefix="p", start=start, count=20, spacing=timedelta(seconds=5), seed=2, unlabelled=0.5
    )
    send(env.client, "fraud", batch)
    model_id = env.model_id("fraud")

    def scan() -> tuple[int, int]:
        found = _scan(env, model_id)
        return found.new, found.changed

    assert scan() == (1, 0)
    # Scans inside the margin read the same predictions again: nothing changed.
    assert [scan(), scan()] == [(0, 0), (0, 0)]
    assert env.states(model_id)[start].version == 1
    # Before its first computation, a label or a prediction more is a change all the same.
    target = next(item for item in batch.items if "label" not in item)["id"]
    send_labels(env.client, "fraud", {target: 1})
    assert [scan(), scan()] == [(0, 1), (0, 0)]
    send(
        env.client,
        "fraud",
        make_batch(prefix="q", start=start, count=1, spacing=timedelta(seconds=5), seed=4),
    )
    assert [scan(), scan()] == [(0, 1), (0, 0)]
    state = env.states(model_id)[start]
    assert (state.version, state.computed_version) == (3, None)


@pytest.mark.parametrize("change", ["insert", "label"])
def test_a_write_stamped_before_the_computation_but_committed_after_is_not_missed(
    env: Env, change: str, clock: SettledClock
) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s")
    start = _recent_start(clock, 3)
    batch = make_batch(prefix="p", start=start, count=30, spacing=timedelta(seconds=5), seed=5)
    send(env.client, "fraud", batch)
    scheduler = env.scheduler()
    assert scheduler.tick().computed == 1
    model_id = env.model_id("fraud")
    checkpoint = env.states(model_id)[start].checkpoint_at
    # A writer took its timestamp before the computation began and committed afterwards.
    stamped = checkpoint - timedelta(seconds=MARGIN / 2)
    with env.session_factory() as session:
        if change == "insert":
            session.add(
                Prediction(
                    model_id=model_id,
                    client_id="late",
                    ts=start + timedelta(seconds=1),
                    score=0.9,
                    label=1,
                    segment=None,
                    received_at=stamped,
                    labelled_at=stamped,
                    changed_at=stamped,
                )
            )
        else:
            target = next(i for i in batch.items if i.get("label") == 0)["id"]
            session.execute(
                update(Prediction)
                .where(Prediction.model_id == model_id, Prediction.client_id == target)
                .values(label=1, labelled_at=stamped, changed_at=stamped)
            )
        model = session.get_one(Model, model_id)
        record_changes(session.connection(), model=model, stamps=[start], now=stamped)
        session.commit()
    before = by_window(windows(env.client, "fraud"))[iso(start)]
    assert scheduler.tick().computed == 1
    after = by_window(windows(env.client, "fraud"))[iso(start)]
    if change == "insert":
        assert after["n"] == before["n"] + 1
    assert after["n_pos"] == before["n_pos"] + 1
    assert scheduler.tick().computed == 0


def test_a_failing_model_is_counted_and_the_others_go_on(env: Env, clock: SettledClock) -> None:
    for name in ("bad", "good"):
        create_model(env.client, name, window="5m", grace="0s")
        batch = make_batch(
            prefix=name,
            start=_recent_start(clock, 3),
            count=20,
            spacing=timedelta(seconds=5),
            seed=1,
        )
        send(env.client, name, batch)
    bad_id = env.model_id("bad")
    with env.session_factory() as session:
        # Not a probability: the computation refuses it (the API would have).
        session.execute(
            update(Prediction)
            .where(Prediction.model_id == bad_id, Prediction.client_id == "bad-3")
            .values(score=1.5)
        )
        session.commit()
    failures = instruments.COMPUTE_FAILURES.labels("bad")._value.get()
    scheduler = env.scheduler(scheduler_interval=60.0)
    report = scheduler.tick()
    assert (report.computed, report.failed) == (1, 1)
    assert instruments.COMPUTE_FAILURES.labels("bad")._value.get() == failures + 1
    assert len(windows(env.client, "good")) == 1
    assert windows(env.client, "bad") == []
    state = env.states(bad_id)[_recent_start(clock, 3)]
    assert state.failures == 1
    assert state.retry_at is not None
    assert state.retry_at > datetime.now(UTC) + timedelta(seconds=30)
    # Held back until its retry time (one tick interval, doubling with each failure).
    assert scheduler.tick() == TickReport(leader=True, due=0, computed=0, failed=0)
    with env.session_factory() as session:
        session.execute(
            update(Prediction)
            .where(Prediction.model_id == bad_id, Prediction.client_id == "bad-3")
            .values(score=0.5, changed_at=datetime.now(UTC))
        )
        model = session.get_one(Model, bad_id)
        record_changes(
            session.connection(),
            model=model,
            stamps=[_recent_start(clock, 3)],
            now=datetime.now(UTC),
        )
        session.commit()
    # A recompute request clears the back-off.
    start = _recent_start(clock, 3)
    response = env.client.post(
        "/v1/models/bad/recompute",
        params={"start": start.isoformat(), "end": (start + FIVE_MINUTES).isoformat()},
    )
    assert response.status_code == 202
    assert scheduler.tick().computed == 1
    assert len(windows(env.client, "bad")) == 1


def test_scan_records_every_window_holding_predictions(env: Env) -> None:
    create_model(env.client, "fraud", window="1h", grace="0s")
    starts = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in (0, 3, 4)]
    items = [
        {
            "id": f"x{i}",
            "timestamp": (s + timedelta(minutes=59, seconds=59)).isoformat(),
            "score": 0.5,
        }
        for i, s in enumerate(starts)
    ]
    response = env.client.post("/v1/models/fraud/predictions", json={"predictions": items})
    assert response.status_code == 200
    model_id = env.model_id("fraud")
    result = _scan(env, model_id)
    rows = [state for _, state in sorted(env.states(model_id).items())]
    assert result.new == 3
    assert [r.starts_at for r in rows] == starts
    assert [r.ends_at - r.starts_at for r in rows] == [timedelta(hours=1)] * 3


def test_settle_near_a_boundary_sets_the_scheduler_clock_back_instead_of_sleeping(
    env: Env,
) -> None:
    # A room of almost a whole window: the boundary is "near" at any moment of the test run.
    before = datetime.now(UTC)
    clock = settle(room=FIVE_MINUTES.total_seconds() - 0.5)
    assert (datetime.now(UTC) - before).total_seconds() < 0.5
    env.clock = clock  # the test's schedulers run on it
    scheduler = env.scheduler()
    assert clock.recent(0) <= scheduler.clock.now() < clock.recent(0) + timedelta(seconds=1)
    create_model(env.client, "fraud", window="5m", grace="0s")
    for ago in (1, 0):
        batch = make_batch(
            prefix=f"w{ago}",
            start=clock.recent(ago),
            count=20,
            spacing=timedelta(seconds=1),
            seed=ago,
        )
        send(env.client, "fraud", batch)
    report = scheduler.tick()
    assert report.computed == 1
    assert list(by_window(windows(env.client, "fraud"))) == [iso(clock.recent(1))]


def test_first_fingerprints_of_many_windows_equal_each_window_s_own(
    env: Env, clock: SettledClock
) -> None:
    """The scan's grouped first checkpoints (one statement per run of consecutive windows)
    equal the fingerprint read window by window, for windows with predictions, an empty one,
    and two runs apart."""
    create_model(env.client, "fraud", window="5m", grace="0s")
    send(
        env.client,
        "fraud",
        make_batch(
            prefix="p", start=clock.recent(9), count=60, spacing=timedelta(seconds=40), seed=3
        ),
    )
    model_id = env.model_id("fraud")
    starts = [clock.recent(k) for k in (9, 8, 7, 4, 3)] + [clock.recent(12)]
    since = datetime.now(UTC) - timedelta(hours=1)
    with env.session_factory() as session:
        grouped = first_fingerprints(
            session, model_id=model_id, length=300, starts=starts, since=since
        )
        single = {
            start: fingerprint(
                session, model_id=model_id, start=start, end=start + FIVE_MINUTES, since=since
            )
            for start in starts
        }
    assert grouped == single
    assert grouped[clock.recent(12)].count == 0
    assert all(grouped[clock.recent(k)].count > 0 for k in (9, 8, 7, 4, 3))


def _due_starts(env: Env, name: str, limit: int) -> list[datetime]:
    """The starts of the due windows of model ``name`` a plan lists now, at most ``limit``."""
    with env.session_factory() as session:
        model = session.get(Model, env.model_id(name))
        assert model is not None
        return [
            w.start for w in due_windows(session, model=model, now=datetime.now(UTC), limit=limit)
        ]


def test_a_plan_lists_at_most_its_bound_the_head_of_the_scheduler_order(
    env: Env, clock: SettledClock
) -> None:
    period = {
        "kind": "fixed",
        "start": iso(_recent_start(clock, 6)),
        "end": iso(_recent_start(clock, 5)),
    }
    create_model(env.client, "trailing", window="5m", grace="0s")
    create_model(env.client, "fixed", window="5m", grace="0s", reference=period)
    for name in ("trailing", "fixed"):
        for ago in range(6, 1, -1):
            batch = make_batch(
                prefix=f"{name}-{ago}",
                start=_recent_start(clock, ago),
                count=20,
                spacing=timedelta(seconds=10),
                seed=ago,
            )
            send(env.client, name, batch)
        _scan(env, env.model_id(name))
    every = [_recent_start(clock, ago) for ago in range(6, 1, -1)]
    assert _due_starts(env, "trailing", 100) == every
    assert _due_starts(env, "fixed", 100) == every
    # trailing: the oldest; fixed: the reference period's window, then the newest
    assert _due_starts(env, "trailing", 2) == every[:2]
    assert _due_starts(env, "fixed", 2) == [every[0], every[-1]]
    assert _due_starts(env, "fixed", 3) == [every[0], every[-2], every[-1]]


def test_windows_beyond_a_plan_bound_are_computed_by_the_next_plans(
    env: Env, monkeypatch: pytest.MonkeyPatch, clock: SettledClock
) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s")
    for ago in range(6, 1, -1):
        batch = make_batch(
            prefix=f"w{ago}",
            start=_recent_start(clock, ago),
            count=20,
            spacing=timedelta(seconds=10),
            seed=ago,
        )
        send(env.client, "fraud", batch)
    monkeypatch.setattr("calmon.scheduler.runner.MAX_DUE_WINDOWS", 2)
    listed: list[list[datetime]] = []
    real = due_windows

    def recording(*args: Any, **kwargs: Any) -> list[DueWindow]:
        found = real(*args, **kwargs)
        listed.append([w.start for w in found])
        return found

    monkeypatch.setattr(runner, "due_windows", recording)
    report = env.scheduler().tick()
    assert report.computed == 5
    assert max(len(starts) for starts in listed) == 2
    every = [_recent_start(clock, ago) for ago in range(6, 1, -1)]
    # each plan lists the oldest windows left, so a trailing reference's windows come first (a
    # window whose computation a plan did not finish may be listed again by the next)
    assert list(dict.fromkeys(start for starts in listed for start in starts)) == every
    assert list(by_window(windows(env.client, "fraud"))) == [iso(start) for start in every]
    assert env.scheduler().tick().computed == 0
