"""Segments: '*' plus the first max_segments named segments seen, a stable set; predictions
of segments beyond the cap count in '*' and in the overflow report. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import select

from calmon.db.models import ModelSegment
from calmon.scheduler import instruments
from tests.integration.scheduler.helpers import (
    FIVE_MINUTES,
    Batch,
    Env,
    SettledClock,
    create_model,
    iso,
    make_batch,
    send,
    windows,
)


def _start(clock: SettledClock, index: int) -> datetime:
    return clock.recent(4 - index)


def _send_segment(env: Env, window: int, segment: str | None, count: int, seed: int) -> Batch:
    batch = make_batch(
        prefix=f"w{window}-{segment}",
        start=_start(env.clock, window) + timedelta(seconds=seed),
        count=count,
        spacing=timedelta(seconds=2),
        seed=seed,
        segments=[segment],
    )
    send(env.client, "fraud", batch)
    return batch


def _records(env: Env, window: int) -> dict[str, dict[str, object]]:
    start = _start(env.clock, window)
    return {
        r["segment"]: r
        for r in windows(env.client, "fraud", start=start.isoformat())
        if r["start"] == iso(start)
    }


def _recompute(env: Env, window: int) -> None:
    start = _start(env.clock, window)
    period = {"start": start.isoformat(), "end": (start + FIVE_MINUTES).isoformat()}
    assert env.client.post("/v1/models/fraud/recompute", params=period).status_code == 202


def _cap(env: Env, max_segments: int) -> None:
    config = {"window": "5m", "grace": "0s", "max_segments": max_segments}
    assert env.client.put("/v1/models/fraud", json=config).status_code == 200


def _tracked(env: Env) -> list[tuple[str, int]]:
    """The model's tracked segments and their positions, in order."""
    with env.session_factory() as session:
        rows = session.execute(
            select(ModelSegment.name, ModelSegment.position)
            .where(ModelSegment.model_id == env.model_id("fraud"))
            .order_by(ModelSegment.position)
        ).all()
    return [(name, position) for name, position in rows]


def test_segments_beyond_the_cap_count_in_all_and_in_the_overflow(
    env: Env, clock: SettledClock
) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s", max_segments=2)
    # First seen in this order: a, b, then c (beyond the cap); some without a segment.
    sent = {
        name: _send_segment(env, 0, name, count, seed)
        for name, count, seed in (("a", 30, 1), ("b", 20, 2), ("c", 25, 3), (None, 10, 4))
    }
    before = instruments.SEGMENTS_OVERFLOW.labels("fraud")._value.get()
    scheduler = env.scheduler()
    assert scheduler.tick().computed == 1
    records = _records(env, 0)
    assert sorted(records) == ["*", "a", "b"]
    labelled = {name: int(np.count_nonzero(b.labels >= 0)) for name, b in sent.items()}
    assert records["*"]["n"] == sum(labelled.values())
    assert records["a"]["n"] == labelled["a"]
    assert records["b"]["n"] == labelled["b"]
    assert records["*"]["segments_overflow"] == {"segments": 1, "predictions": 25}
    assert records["a"]["segments_overflow"] is None
    assert instruments.SEGMENTS_OVERFLOW.labels("fraud")._value.get() == before + 25

    # A recomputation counts only what the window gained beyond the cap.
    _recompute(env, 0)
    assert scheduler.tick().computed == 1
    assert instruments.SEGMENTS_OVERFLOW.labels("fraud")._value.get() == before + 25
    late = make_batch(
        prefix="late-c",
        start=_start(clock, 0) + timedelta(seconds=100),
        count=4,
        spacing=timedelta(seconds=2),
        seed=8,
        segments=["c"],
    )
    send(env.client, "fraud", late)
    assert scheduler.tick().computed == 1
    assert _records(env, 0)["*"]["segments_overflow"] == {"segments": 1, "predictions": 29}
    assert instruments.SEGMENTS_OVERFLOW.labels("fraud")._value.get() == before + 29

    # Later windows keep the same set, whatever they hold.
    for name, count, seed in (("d", 15, 5), ("c", 5, 6), ("a", 12, 7)):
        _send_segment(env, 1, name, count, seed)
    assert scheduler.tick().computed == 1
    records = _records(env, 1)
    assert sorted(records) == ["*", "a"]
    assert records["*"]["segments_overflow"] == {"segments": 2, "predictions": 20}
    assert _tracked(env) == [("a", 0), ("b", 1)]

    # A larger cap tracks the next segments seen, after the existing ones.
    _cap(env, 3)
    _recompute(env, 1)
    assert scheduler.tick().computed == 1
    records = _records(env, 1)
    assert sorted(records) == ["*", "a", "d"]
    assert records["*"]["segments_overflow"] == {"segments": 1, "predictions": 5}
    assert records["d"]["n"] == 15
    assert [name for name, _ in _tracked(env)] == ["a", "b", "d"]

    # A smaller cap computes fewer segments; the set itself stays.
    _cap(env, 1)
    _recompute(env, 0)
    assert scheduler.tick().computed == 1
    records = _records(env, 0)
    assert sorted(records) == ["*", "a"]
    assert records["*"]["segments_overflow"] == {"segments": 2, "predictions": 49}
