"""What the model list is given at many segments (SQLite, PostgreSQL): each model's ``*``
record, the alert states of every current segment's latest record and the newest
``computed_at``, as read from every latest window's record, also once the records are kept
between loads (``WindowAlerts``) and windows are recomputed, added or removed."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, insert, update
from sqlalchemy.orm import Session, sessionmaker

from bench.harness.records import make_record
from calmon.api.routes.ui import WindowAlerts, _latest_by_model
from calmon.db.models import Model, ModelSegment, WindowResult
from calmon.db.session import create_db_engine, create_session_factory
from calmon.names import ALL_SEGMENTS
from calmon.records import WindowRecord
from calmon.settings import Settings
from calmon.ui.verdict import alerts

LENGTH = timedelta(minutes=5)
LATEST = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SEGMENTS = 300
#: make_record's window: its ratio (0.05) moved up from a reference of 0.02
SHIFTED = "prior shift: class ratio went up"


def _record(segment: str, *, alerting: bool) -> dict[str, Any]:
    record = copy.deepcopy(make_record(segment=segment, pi0=(0.1,)))
    if not alerting:
        record["reference"]["prior"] = record["prior"]
    return record


def _row(model_id: int, segment: str, start: datetime, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "model_id": model_id,
        "segment": segment,
        "starts_at": start,
        "ends_at": start + LENGTH,
        "computed_at": start + LENGTH,
        "computed_by": "test",
        "version": 1,
        "n": 10,
        "n_pos": 1,
        "unlabelled": 0,
        "prior": 0.05,
        "record": record,
    }


def _model(session: Session, name: str) -> int:
    model = Model(
        name=name,
        score_kind="probability",
        window="5m",
        threshold=0.5,
        pi0=[0.1],
        reference_kind="trailing",
        reference_windows=7,
        grace_seconds=0,
        max_segments=1000,
        created_at=LATEST,
        updated_at=LATEST,
    )
    session.add(model)
    session.flush()
    return model.id


def _alerting(position: int) -> bool:
    return position % 50 == 7


@pytest.fixture
def sessions(migrated_url: str) -> Iterator[sessionmaker[Session]]:
    """A database holding "many" (300 segments, six alerting; each with an older window too)
    and "few" (an alerting ``*`` and two quiet segments)."""
    engine = create_db_engine(Settings(database_url=migrated_url))
    factory = create_session_factory(engine)
    with factory() as session:
        many, few = _model(session, "many"), _model(session, "few")
        tracked, rows = [], []
        rows.append(_row(many, ALL_SEGMENTS, LATEST, _record(ALL_SEGMENTS, alerting=False)))
        for position in range(SEGMENTS):
            name = f"s{position:03d}"
            tracked.append(
                {"model_id": many, "name": name, "position": position, "first_seen_at": LATEST}
            )
            rows.append(_row(many, name, LATEST - LENGTH, _record(name, alerting=True)))
            rows.append(_row(many, name, LATEST, _record(name, alerting=_alerting(position))))
        rows.append(_row(few, ALL_SEGMENTS, LATEST, _record(ALL_SEGMENTS, alerting=True)))
        for position, name in enumerate(["a", "b"]):
            tracked.append(
                {"model_id": few, "name": name, "position": position, "first_seen_at": LATEST}
            )
            rows.append(_row(few, name, LATEST, _record(name, alerting=False)))
        session.execute(insert(ModelSegment), tracked)
        session.execute(insert(WindowResult), rows)
        session.commit()
    yield factory
    engine.dispose()


Windows = list[tuple[str, tuple[str, ...]]]


def _expected(session: Session) -> dict[str, tuple[WindowRecord | None, Windows, datetime]]:
    """From every latest window's record, read now."""
    out = {}
    for model, windows in _latest_by_model(session).items():
        star = next((w.record for w in windows if w.segment == ALL_SEGMENTS), None)
        texts = [(w.segment, tuple(alerts(w.record))) for w in windows]
        out[model] = (star, texts, max(w.computed_at for w in windows))
    return out


def _listed(
    cache: WindowAlerts, factory: sessionmaker[Session]
) -> dict[str, tuple[WindowRecord | None, Windows, datetime]]:
    reads = create_session_factory(factory.kw["bind"], reads_only=True)
    with reads() as session:
        return {
            model: (latest.star, latest.windows, latest.computed)
            for model, latest in cache.latest_by_model(session).items()
            if latest.computed is not None
        }


def _now(
    factory: sessionmaker[Session],
) -> dict[str, tuple[WindowRecord | None, Windows, datetime]]:
    with factory() as session:
        return _expected(session)


def test_the_list_gives_every_segments_alerts_as_the_records_say(
    sessions: sessionmaker[Session],
) -> None:
    cache = WindowAlerts()
    first = _listed(cache, sessions)
    assert first == _now(sessions)
    star, texts, computed = first["many"]
    assert star is not None
    assert alerts(star) == []
    shifted = [f"s{p:03d}" for p in range(SEGMENTS) if _alerting(p)]
    assert [segment for segment, said in texts if said] == shifted
    assert all(said[0].startswith(SHIFTED) for _, said in texts if said)
    assert computed == LATEST + LENGTH
    assert [(segment, len(said)) for segment, said in first["few"][1]] == [
        (ALL_SEGMENTS, 1),
        ("a", 0),
        ("b", 0),
    ]
    # the list says the shift once, its segments counted
    reads = create_session_factory(sessions.kw["bind"], reads_only=True)
    with reads() as session:
        (said,) = cache.latest_by_model(session)["many"].alerts
    assert said.startswith(SHIFTED)
    named = ", ".join(shifted[:3])
    assert said.endswith(
        f", in {len(shifted)} of {SEGMENTS} segments: {named} and {len(shifted) - 3} more"
    )
    assert _listed(cache, sessions) == first  # from what was kept


def test_recomputed_added_and_removed_windows_show_at_the_next_load(
    sessions: sessionmaker[Session],
) -> None:
    cache = WindowAlerts()
    _listed(cache, sessions)
    later = LATEST + 2 * LENGTH
    with sessions() as session:
        many = session.query(Model.id).filter(Model.name == "many").scalar()
        # s007 recomputed quiet, s001 recomputed alerting, s057 gets a newer window
        for name, alerting in (("s007", False), ("s001", True)):
            session.execute(
                update(WindowResult)
                .where(
                    WindowResult.model_id == many,
                    WindowResult.segment == name,
                    WindowResult.starts_at == LATEST,
                )
                .values(computed_at=later, record=_record(name, alerting=alerting))
            )
        session.execute(
            insert(WindowResult),
            [_row(many, "s057", LATEST + LENGTH, _record("s057", alerting=False))],
        )
        # s107's latest window removed: its older, alerting one is the latest again
        session.execute(
            delete(WindowResult).where(
                WindowResult.model_id == many,
                WindowResult.segment == "s107",
                WindowResult.starts_at == LATEST,
            )
        )
        session.commit()
    listed = _listed(cache, sessions)
    assert listed == _now(sessions)
    texts = dict(listed["many"][1])
    assert texts["s001"]
    assert not texts["s007"]
    assert not texts["s057"]
    assert texts["s107"]
    assert listed["many"][2] == later


def test_a_small_cache_drops_its_oldest_windows_and_reads_them_again(
    sessions: sessionmaker[Session],
) -> None:
    cache = WindowAlerts(entries=50)
    expected = _now(sessions)
    assert _listed(cache, sessions) == expected
    assert _listed(cache, sessions) == expected
