"""``window_results_latest`` follows ``window_results`` in the writing transaction (SQLite,
PostgreSQL): an older window leaves a pair's row alone, deleting the latest falls back to the
one before and deleting the last removes the row, an update is read again, a segment tracked
later gets its position, a model's deletion takes its rows; the upgrade to 0010 fills the
table and judges the latest records; and on PostgreSQL two repeatable-read transactions that
touch one pair conflict instead of one keeping a row the other made stale."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import Engine, delete, insert, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from calmon.db import migrate
from calmon.db.models import Model, ModelSegment, WindowLatest, WindowResult
from calmon.db.session import create_db_engine, create_session_factory
from calmon.db.sqlstate import aborted_for_concurrency
from calmon.names import ALL_SEGMENTS
from calmon.records import WindowRecord
from calmon.services.windows.record import record_alerts
from calmon.settings import Settings
from calmon.ui.verdict import alerts
from harness.records import make_record

LENGTH = timedelta(minutes=5)
START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _model(session: Session, name: str = "m") -> int:
    model = Model(
        name=name,
        score_kind="probability",
        window="5m",
        threshold=0.5,
        pi0=[],
        reference_kind="fixed",
        reference_windows=None,
        grace_seconds=0,
        max_segments=10,
        created_at=START,
        updated_at=START,
    )
    session.add(model)
    session.flush()
    return model.id


def _row(model_id: int, segment: str, windows_ago: int, *, computed: int = 0) -> dict[str, Any]:
    start = START - windows_ago * LENGTH
    return {
        "model_id": model_id,
        "segment": segment,
        "starts_at": start,
        "ends_at": start + LENGTH,
        "computed_at": START + computed * LENGTH,
        "computed_by": "test",
        "version": 1,
        "n": 10,
        "n_pos": 1,
        "unlabelled": 0,
        "prior": 0.1,
        "record": {},
        "alerts": f'["{segment} {windows_ago}"]',
    }


def _latest(session: Session) -> dict[str, tuple[datetime, datetime, str | None, int | None]]:
    rows = session.execute(
        select(
            WindowLatest.segment,
            WindowLatest.starts_at,
            WindowLatest.computed_at,
            WindowLatest.alerts,
            WindowLatest.position,
        )
    )
    return {segment: (start, computed, said, pos) for segment, start, computed, said, pos in rows}


@pytest.fixture
def sessions(migrated_url: str) -> Iterator[sessionmaker[Session]]:
    engine = create_db_engine(Settings(database_url=migrated_url))
    yield create_session_factory(engine)
    engine.dispose()


def test_the_table_follows_inserts_deletes_and_updates(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        model_id = _model(session)
        session.execute(
            insert(ModelSegment),
            [{"model_id": model_id, "name": "a", "position": 0, "first_seen_at": START}],
        )
        session.execute(insert(WindowResult), [_row(model_id, ALL_SEGMENTS, 1)])
        session.execute(insert(WindowResult), [_row(model_id, "a", 2), _row(model_id, "a", 1)])
        session.execute(insert(WindowResult), [_row(model_id, ALL_SEGMENTS, 3)])  # older
        session.commit()
        assert _latest(session) == {
            ALL_SEGMENTS: (START - LENGTH, START, '["* 1"]', None),
            "a": (START - LENGTH, START, '["a 1"]', 0),
        }
        # a recompute of the latest window: deleted, then stored again later
        session.execute(delete(WindowResult).where(WindowResult.starts_at == START - LENGTH))
        assert _latest(session) == {
            ALL_SEGMENTS: (START - 3 * LENGTH, START, '["* 3"]', None),
            "a": (START - 2 * LENGTH, START, '["a 2"]', 0),
        }
        session.execute(insert(WindowResult), [_row(model_id, ALL_SEGMENTS, 1, computed=2)])
        session.commit()
        assert _latest(session)[ALL_SEGMENTS] == (
            START - LENGTH,
            START + 2 * LENGTH,
            '["* 1"]',
            None,
        )
        # an update of the latest row is read again
        session.execute(
            update(WindowResult)
            .where(WindowResult.segment == "a")
            .values(computed_at=START + 5 * LENGTH, alerts=None)
        )
        assert _latest(session)["a"] == (START - 2 * LENGTH, START + 5 * LENGTH, None, 0)
        # the last window of a pair removed: its row goes
        session.execute(delete(WindowResult).where(WindowResult.segment == "a"))
        session.commit()
        assert set(_latest(session)) == {ALL_SEGMENTS}
        # a segment's windows stored before it is tracked: its position comes with tracking
        session.execute(insert(WindowResult), [_row(model_id, "b", 0)])
        assert _latest(session)["b"][3] is None
        session.execute(
            insert(ModelSegment),
            [{"model_id": model_id, "name": "b", "position": 1, "first_seen_at": START}],
        )
        assert _latest(session)["b"][3] == 1
        session.commit()


def test_a_deleted_model_takes_its_rows(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        kept, gone = _model(session, "kept"), _model(session, "gone")
        session.execute(
            insert(WindowResult),
            [_row(kept, ALL_SEGMENTS, 0), _row(gone, ALL_SEGMENTS, 0), _row(gone, "x", 1)],
        )
        session.commit()
        session.execute(delete(Model).where(Model.id == gone))
        session.commit()
        assert session.scalars(select(WindowLatest.model_id)).all() == [kept]


def test_the_upgrade_fills_the_table_and_judges_the_latest_records(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'calmon.db'}"
    engine = create_db_engine(Settings(database_url=url))
    try:
        _upgrade_and_check(engine)
    finally:
        engine.dispose()


def test_the_upgrade_fills_the_table_on_postgresql(postgres_database: str) -> None:
    engine = create_db_engine(Settings(database_url=postgres_database))
    try:
        _upgrade_and_check(engine)
    finally:
        engine.dispose()


def _upgrade_and_check(engine: Engine) -> None:
    migrate.upgrade(engine, "0009")
    alerting = cast(WindowRecord, make_record(segment=ALL_SEGMENTS, pi0=(0.1,)))
    quiet = json.loads(json.dumps(alerting))
    quiet["reference"]["prior"] = quiet["prior"]
    assert alerts(alerting)
    assert not alerts(quiet)
    with engine.begin() as conn:
        conn.execute(
            text(
                'INSERT INTO models (id, name, score_kind, "window", threshold, pi0,'
                " reference_kind, reference_windows, grace_seconds, max_segments, created_at,"
                " updated_at) VALUES (1, 'm', 'probability', '5m', 0.5, '[0.1]', 'trailing', 7,"
                " 0, 10, :now, :now)"
            ),
            {"now": START},
        )
        conn.execute(
            text(
                "INSERT INTO model_segments (model_id, name, position, first_seen_at)"
                " VALUES (1, 'a', 0, :now)"
            ),
            {"now": START},
        )
        for segment, ago, record in (
            (ALL_SEGMENTS, 2, quiet),
            (ALL_SEGMENTS, 1, alerting),
            ("a", 3, alerting),
            ("a", 2, quiet),
        ):
            start = START - ago * LENGTH
            conn.execute(
                text(
                    "INSERT INTO window_results (model_id, segment, starts_at, ends_at,"
                    " computed_at, computed_by, version, n, n_pos, unlabelled, prior, record)"
                    " VALUES (1, :segment, :start, :end, :end, 'test', 1, 10, 1, 0, 0.1,"
                    " :record)"
                ),
                {
                    "segment": segment,
                    "start": start.replace(tzinfo=None)
                    if engine.dialect.name == "sqlite"
                    else start,
                    "end": (start + LENGTH).replace(tzinfo=None)
                    if engine.dialect.name == "sqlite"
                    else start + LENGTH,
                    "record": json.dumps(record),
                },
            )
    migrate.upgrade(engine)
    with create_session_factory(engine)() as session:
        latest = _latest(session)
        stored = dict(
            session.execute(
                select(WindowResult.starts_at, WindowResult.alerts).where(
                    WindowResult.segment == ALL_SEGMENTS
                )
            ).all()
        )
    assert latest == {
        ALL_SEGMENTS: (START - LENGTH, START, record_alerts(alerting), None),
        "a": (START - 2 * LENGTH, START - LENGTH, "[]", 0),
    }
    # older rows keep NULL: judged by their reader if they become the latest again
    assert stored == {START - LENGTH: record_alerts(alerting), START - 2 * LENGTH: None}


def test_two_transactions_touching_one_pair_conflict(postgres_database: str) -> None:
    """Two repeatable-read transactions (as two schedulers compute two windows of one model)
    each store a window of the same pair: the second to write fails with a serialisation
    failure, even when its window is the older one, instead of keeping a row computed from a
    snapshot that misses the other's window."""
    engine = create_db_engine(Settings(database_url=postgres_database))
    try:
        migrate.upgrade(engine)
        sessions = create_session_factory(engine)
        with sessions() as session:
            model_id = _model(session)
            session.execute(insert(WindowResult), [_row(model_id, ALL_SEGMENTS, 5)])
            session.commit()
        first, second = sessions(), sessions()
        try:
            for session in (first, second):
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
                session.execute(select(WindowLatest.starts_at)).all()  # the snapshot
            first.execute(insert(WindowResult), [_row(model_id, ALL_SEGMENTS, 1)])
            first.commit()
            with pytest.raises(OperationalError) as failed:
                second.execute(insert(WindowResult), [_row(model_id, ALL_SEGMENTS, 3)])
            assert aborted_for_concurrency(failed.value)
            second.rollback()
        finally:
            first.close()
            second.close()
        with sessions() as session:
            assert _latest(session)[ALL_SEGMENTS][0] == START - LENGTH
    finally:
        engine.dispose()
