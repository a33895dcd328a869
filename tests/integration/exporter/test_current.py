"""A budgeted refresh chooses, from the few windows :func:`load_current` reads, exactly what it
would choose from every model's and segment's latest window read into Python
(:func:`load_candidates` and :func:`current_windows`), at every budget (SQLite, PostgreSQL).

The stored windows are written directly: several models with different series bounds, many
segments each, several windows per segment (only the latest counts), segments gone quiet
(their latest window more than ``QUIET_SEGMENT_WINDOWS`` windows before the model's ``*``
window, and one exactly that many), a segment beyond ``max_segments``, a tracked segment
without any window, and a model with segment windows but no ``*`` window.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from calmon.db.models import Model, ModelSegment, WindowResult
from calmon.db.session import create_db_engine, create_session_factory
from calmon.exporter.snapshot import (
    QUIET_SEGMENT_WINDOWS,
    load_candidates,
    load_current,
    select_windows,
    window_series_bound,
)
from calmon.names import ALL_SEGMENTS
from calmon.settings import Settings

LENGTH = timedelta(minutes=5)
LATEST = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SEGMENTS = 40


def _model(session: Session, name: str, *, pi0: list[float], max_segments: int) -> int:
    model = Model(
        name=name,
        score_kind="probability",
        window="5m",
        threshold=0.5,
        pi0=pi0,
        reference_kind="trailing",
        reference_windows=7,
        grace_seconds=0,
        max_segments=max_segments,
        created_at=LATEST,
        updated_at=LATEST,
    )
    session.add(model)
    session.flush()
    return model.id


def _windows(model_id: int, segment: str, starts: list[datetime]) -> list[dict[str, Any]]:
    return [
        {
            "model_id": model_id,
            "segment": segment,
            "starts_at": start,
            "ends_at": start + LENGTH,
            "computed_at": LATEST,
            "computed_by": "test",
            "version": 1,
            "n": 10,
            "n_pos": 1,
            "unlabelled": 0,
            "prior": 0.1,
            "record": {},
        }
        for start in starts
    ]


def _ago(windows: int) -> datetime:
    return LATEST - windows * LENGTH


def _store(session: Session) -> None:
    rows: list[dict[str, Any]] = []
    tracked: list[dict[str, Any]] = []
    for index, (name, pi0) in enumerate([("alpha", [0.1]), ("beta", []), ("gamma", [0.1, 0.2])]):
        model_id = _model(session, name, pi0=pi0, max_segments=SEGMENTS - 2)
        rows += _windows(model_id, ALL_SEGMENTS, [_ago(index + 3), _ago(index)])
        for position in range(SEGMENTS):
            segment = f"s{position:02d}"
            tracked.append(
                {
                    "model_id": model_id,
                    "name": segment,
                    "position": position,
                    "first_seen_at": LATEST,
                }
            )
            if position % 11 == 5:
                continue  # tracked, never computed
            quiet = QUIET_SEGMENT_WINDOWS + (position % 3)  # 7: current; 8, 9: quiet
            latest = _ago(index + (quiet if position % 4 == 1 else position % 3))
            rows += _windows(model_id, segment, [latest - 10 * LENGTH, latest])
    starless = _model(session, "delta", pi0=[0.3], max_segments=10)
    for position in range(12):
        tracked.append(
            {
                "model_id": starless,
                "name": f"s{position:02d}",
                "position": position,
                "first_seen_at": LATEST,
            }
        )
        rows += _windows(starless, f"s{position:02d}", [_ago(20 * position)])
    session.execute(insert(ModelSegment), tracked)
    session.execute(insert(WindowResult), rows)
    session.commit()


@pytest.fixture
def session(migrated_url: str) -> Iterator[Session]:
    engine = create_db_engine(Settings(database_url=migrated_url))
    with create_session_factory(engine)() as session:
        _store(session)
    with create_session_factory(engine, reads_only=True)() as session:
        yield session
    engine.dispose()


def test_the_budgeted_read_chooses_what_reading_every_window_chooses(session: Session) -> None:
    bound = window_series_bound(pi0=1, probability=True)
    cheapest = window_series_bound(pi0=0, probability=True)
    every = load_candidates(session)
    assert len(every) == 3 * (1 + SEGMENTS - 2 - 3) + 10  # 38 tracked, 3 never computed
    budgets = [0, 4 * bound, 6 * bound, 11 * bound, 30 * bound, 60 * bound, 10**9]
    chosen = []
    for budget in budgets:
        expected = select_windows(every, max_series=budget)
        current = load_current(session, max_series=budget)
        assert len(current.candidates) <= 3 + 4 * (budget // cheapest), budget
        got = select_windows(current.candidates, max_series=budget, segments=current.segments)
        assert got == expected, budget
        chosen.append(len(got.windows))
    # the budgets span everything from the star windows alone to every current window
    everything = select_windows(every, max_series=10**9)
    assert chosen[0] == 3
    assert chosen == sorted(chosen)
    assert chosen[-2] < chosen[-1] == len(everything.windows)
    assert sum(everything.omitted.values()) == 0
    quiet = {c.segment for c in every if c.model == "alpha"} - {
        w.segment for w in everything.windows if w.model == "alpha"
    }
    assert quiet  # some segments are quiet, and left out without being counted
