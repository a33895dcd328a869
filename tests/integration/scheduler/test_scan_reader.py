"""The change scan with a reading session (SQLite's scheduler): it reads the change record,
the states and the fingerprints there, and holds the write lock only for its writes; a state
changed between the two (read in the reader's older snapshot) is left as it is. The reads
check runs on SQLite and PostgreSQL (same result on both)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, event, select
from sqlalchemy.orm import Session

from calmon.db.models import Model, WindowState
from calmon.db.session import READ_ONLY, create_session_factory
from calmon.services.windows.planning import ScanResult, scan_model
from tests.integration.scheduler.helpers import (
    MARGIN,
    Env,
    SettledClock,
    create_model,
    make_batch,
    send,
)

FIVE_MINUTES = timedelta(minutes=5)


@contextmanager
def statements(session: Session) -> Iterator[list[str]]:
    """The SQL statements run in the block on the engine of ``session`` by connections that
    may write (not those of reading sessions)."""
    seen: list[str] = []

    def record(conn: Connection, _cursor: Any, statement: str, *_args: Any) -> None:
        if not conn.get_execution_options().get(READ_ONLY):
            seen.append(statement)

    engine = session.get_bind()
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _scan(env: Env, model_id: int, *, reader: Session) -> tuple[ScanResult, list[str]]:
    with env.session_factory() as session:
        model = session.get(Model, model_id)
        assert model is not None
        session.commit()
        now = datetime.now(UTC)
        with statements(session) as seen:
            result = scan_model(
                session, model=model, now=now, margin=timedelta(seconds=MARGIN), reader=reader
            )
            session.commit()
    return result, seen


def _three_windows(env: Env, name: str) -> int:
    create_model(env.client, name, window="5m", grace="0s")
    send(
        env.client,
        name,
        make_batch(
            prefix=name, start=env.clock.recent(4), count=90, spacing=timedelta(seconds=10), seed=3
        ),
    )
    return env.model_id(name)


def test_the_scan_reads_predictions_only_through_the_reader(env: Env, clock: SettledClock) -> None:
    model_id = _three_windows(env, "fraud")
    readers = create_session_factory(env.session_factory.kw["bind"], reads_only=True)
    with readers() as reader:
        result, written = _scan(env, model_id, reader=reader)
    assert result == ScanResult(new=3, changed=0)
    assert sorted(env.states(model_id)) == [clock.recent(4), clock.recent(3), clock.recent(2)]
    assert written, "the scan wrote nothing"
    assert not [s for s in written if "FROM predictions" in s or "window_changes.starts_at" in s]
    # predictions added to one window: the next scan sees its change
    send(
        env.client,
        "fraud",
        make_batch(
            prefix="more", start=clock.recent(3), count=5, spacing=timedelta(seconds=1), seed=4
        ),
    )
    with readers() as reader:
        again, _ = _scan(env, model_id, reader=reader)
    assert again == ScanResult(new=0, changed=1)
    assert env.states(model_id)[clock.recent(3)].version == 2


@pytest.mark.parametrize("migrated_url", ["sqlite"], indirect=True)
def test_a_recompute_request_between_the_reads_and_the_writes_is_kept(
    env: Env, clock: SettledClock
) -> None:
    """SQLite only: the scan's reader there is a separate snapshot (on PostgreSQL the scan
    reads in its own transaction)."""
    model_id = _three_windows(env, "fraud")
    readers = create_session_factory(env.session_factory.kw["bind"], reads_only=True)
    with readers() as reader:
        _scan(env, model_id, reader=reader)
    send(
        env.client,
        "fraud",
        make_batch(
            prefix="more", start=clock.recent(3), count=5, spacing=timedelta(seconds=1), seed=4
        ),
    )
    with readers() as reader:
        # the reader's snapshot is taken before the request commits
        reader.scalars(select(WindowState).where(WindowState.model_id == model_id)).all()
        response = env.client.post(
            "/v1/models/fraud/recompute",
            params={"start": clock.recent(3).isoformat(), "end": clock.recent(2).isoformat()},
        )
        assert response.status_code == 202, response.text
        requested = env.states(model_id)[clock.recent(3)]
        result, _ = _scan(env, model_id, reader=reader)
    assert result.changed == 0
    state = env.states(model_id)[clock.recent(3)]
    assert (state.version, state.checkpoint_at) == (requested.version, requested.checkpoint_at)
    assert state.requested_at is not None
