"""Reading one window's rows: scores, labels and segment codes as sent, before and after the
model has tracked segments, on SQLite and PostgreSQL, without leaving settings behind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, func, select

from calmon.db.models import Model
from calmon.db.window_rows import NO_SEGMENT, UNTRACKED, _planner_settings, tracked_segments
from calmon.services.windows.rows import load_rows
from tests.integration.scheduler.helpers import Env, SettledClock, create_model, make_batch, send


def _sorted_rows(
    scores: np.ndarray, labels: np.ndarray, codes: np.ndarray
) -> list[tuple[float, int, int]]:
    return sorted(zip(scores.tolist(), labels.tolist(), codes.tolist(), strict=True))


def test_window_rows_carry_labels_and_segment_codes(env: Env, clock: SettledClock) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s", max_segments=2)
    start = clock.recent(1)
    batch = make_batch(
        prefix="rows",
        start=start,
        count=120,
        spacing=timedelta(seconds=2),
        seed=3,
        segments=["a", None, "b", "c"],
        unlabelled=0.25,
    )
    send(env.client, "fraud", batch)
    end = start + timedelta(minutes=5)
    assert set(batch.labels.tolist()) == {-1, 0, 1}

    def read(codes: dict[str | None, int]) -> None:
        with env.session_factory() as session:
            model = session.scalars(select(Model).where(Model.name == "fraud")).one()
            rows = load_rows(session, model=model, start=start, end=end)
            expected = np.array([codes[name] for name in batch.segments], dtype=np.int16)
            assert _sorted_rows(rows.scores, rows.labels, rows.segments) == _sorted_rows(
                batch.scores, batch.labels, expected
            )
            assert rows.labels.dtype == np.int8
            assert rows.segments.dtype == np.int16
            positives = load_rows(session, model=model, start=start, end=end, label=1)
            assert sorted(positives.scores.tolist()) == sorted(
                batch.scores[batch.labels == 1].tolist()
            )
            assert np.all(positives.labels == 1)

    # No tracked segment yet: every named segment reads as untracked.
    read({None: NO_SEGMENT, "a": UNTRACKED, "b": UNTRACKED, "c": UNTRACKED})
    assert env.scheduler().tick().computed == 1
    with env.session_factory() as session:
        model = session.scalars(select(Model).where(Model.name == "fraud")).one()
        tracked = {
            name: position for position, name in tracked_segments(session, model=model).items()
        }
    assert sorted(tracked) == ["a", "b"]
    read({None: NO_SEGMENT, "a": tracked["a"], "b": tracked["b"], "c": UNTRACKED})


@pytest.mark.parametrize("migrated_url", ["postgresql"], indirect=True)
def test_reading_a_window_leaves_the_session_settings_as_they_were(
    env: Env, clock: SettledClock
) -> None:
    """The read's planner settings (no sequential scan, no JIT) end with the read."""
    create_model(env.client, "fraud", window="5m", grace="0s")
    start = clock.recent(1)
    send(
        env.client,
        "fraud",
        make_batch(prefix="s", start=start, count=20, spacing=timedelta(seconds=5), seed=1),
    )
    with env.session_factory() as session:
        model = session.scalars(select(Model).where(Model.name == "fraud")).one()
        setting = func.current_setting
        before = session.execute(select(setting("enable_seqscan"), setting("jit"))).one()
        rows = load_rows(session, model=model, start=start, end=start + timedelta(minutes=5))
        assert rows.scores.size == 20
        after = session.execute(select(setting("enable_seqscan"), setting("jit"))).one()
        assert tuple(after) == tuple(before)
        assert before[0] == "on"
        with _planner_settings(session):
            during = session.execute(select(setting("enable_seqscan"), setting("jit"))).one()
        assert tuple(during) == ("off", "off")
        # The window's statement runs inside those settings: set, read, restore.
        statements: list[str] = []
        engine = session.get_bind()

        def seen(*args: Any) -> None:
            statements.append(args[2])

        event.listen(engine, "before_cursor_execute", seen)
        try:
            load_rows(session, model=model, start=start, end=start + timedelta(minutes=5))
        finally:
            event.remove(engine, "before_cursor_execute", seen)
        read = next(i for i, text in enumerate(statements) if "array_agg" in text)
        assert "set_config" in statements[read - 1]
        assert "set_config" in statements[read + 1]
