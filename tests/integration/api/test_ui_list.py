"""What the model list is given at many segments (SQLite, PostgreSQL): each model's ``*``
record, the alert states of its current latest windows (each said once, its segments counted),
how many current segment windows it has and the newest ``computed_at`` -- read from
``window_results_latest`` and the alert states stored with the records -- are what reading
every stored record and judging the latest ones gives (the list as it was built before the
table existed), also once records are kept between loads (``WindowAlerts``) and windows are
recomputed, added, removed or expired, and the rendered page is the same."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from calmon.api.routes.ui import WindowAlerts
from calmon.db.models import Model, ModelSegment, WindowResult
from calmon.db.session import create_db_engine, create_session_factory
from calmon.names import ALL_SEGMENTS
from calmon.records import WindowRecord
from calmon.services.retention import expire_windows_batch
from calmon.services.stored_windows import QUIET_SEGMENT_WINDOWS
from calmon.services.windows.record import record_alerts
from calmon.settings import Settings
from calmon.ui.pages import ModelSummary, index_page
from calmon.ui.verdict import alerts, group_alerts
from harness.records import make_record

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


def _row(
    model_id: int, segment: str, start: datetime, record: dict[str, Any], *, judged: bool = False
) -> dict[str, Any]:
    """A stored window; ``judged``: with its alert states, as the scheduler stores them (rows
    without stand for those stored before the states were)."""
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
        "alerts": record_alerts(cast(WindowRecord, record)) if judged else None,
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
            judged = position % 2 == 0
            older = _record(name, alerting=True)
            rows.append(_row(many, name, LATEST - LENGTH, older, judged=judged))
            latest = _record(name, alerting=_alerting(position))
            rows.append(_row(many, name, LATEST, latest, judged=judged))
        for position in range(SEGMENTS, SEGMENTS + 3):  # gone quiet: shown nowhere
            name = f"s{position:03d}"
            tracked.append(
                {"model_id": many, "name": name, "position": position, "first_seen_at": LATEST}
            )
            quiet = LATEST - (QUIET_SEGMENT_WINDOWS + 1) * LENGTH
            rows.append(_row(many, name, quiet, _record(name, alerting=True), judged=True))
        rows.append(
            _row(few, ALL_SEGMENTS, LATEST, _record(ALL_SEGMENTS, alerting=True), judged=True)
        )
        for position, name in enumerate(["a", "b"]):
            tracked.append(
                {"model_id": few, "name": name, "position": position, "first_seen_at": LATEST}
            )
            rows.append(_row(few, name, LATEST, _record(name, alerting=False), judged=True))
        session.execute(insert(ModelSegment), tracked)
        session.execute(insert(WindowResult), rows)
        session.commit()
    yield factory
    engine.dispose()


#: what the list shows of a model: its ``*`` record, alert states, segments and newest
#: ``computed_at``
Listed = tuple[WindowRecord | None, list[str], int, datetime]


def _from_records(session: Session) -> dict[str, Listed]:
    """The list's facts from every stored record, read now: each tracked pair's latest
    window found in Python, quiet segments left out, every latest record judged."""
    models = {m.id: m for m in session.scalars(select(Model))}
    tracked = {
        (model_id, name)
        for model_id, name, position in session.execute(
            select(ModelSegment.model_id, ModelSegment.name, ModelSegment.position)
        )
        if position < models[model_id].max_segments
    }
    latest: dict[tuple[int, str], WindowResult] = {}
    for row in session.scalars(select(WindowResult)):
        pair = (row.model_id, row.segment)
        if row.segment != ALL_SEGMENTS and pair not in tracked:
            continue
        if pair not in latest or row.starts_at > latest[pair].starts_at:
            latest[pair] = row
    out: dict[str, Listed] = {}
    for model_id, model in models.items():
        windows = sorted(
            (w for (m, _), w in latest.items() if m == model_id),
            key=lambda w: (w.segment != ALL_SEGMENTS, w.segment),
        )
        star = next((w for w in windows if w.segment == ALL_SEGMENTS), None)
        if star is not None:
            length = star.ends_at - star.starts_at
            before = star.starts_at - QUIET_SEGMENT_WINDOWS * length
            windows = [w for w in windows if w.segment == ALL_SEGMENTS or w.starts_at >= before]
        if not windows:
            continue
        texts = group_alerts([(w.segment, alerts(cast(WindowRecord, w.record))) for w in windows])
        out[model.name] = (
            None if star is None else cast(WindowRecord, star.record),
            texts,
            sum(1 for w in windows if w.segment != ALL_SEGMENTS),
            max(w.computed_at for w in windows),
        )
    return out


def _listed(cache: WindowAlerts, factory: sessionmaker[Session]) -> dict[str, Listed]:
    reads = create_session_factory(factory.kw["bind"], reads_only=True)
    with reads() as session:
        return {
            model: (latest.star, latest.alerts, latest.segments, latest.computed)
            for model, latest in cache.latest_by_model(session).items()
            if latest.computed is not None
        }


def _now(factory: sessionmaker[Session]) -> dict[str, Listed]:
    with factory() as session:
        return _from_records(session)


def _page(listed: dict[str, Listed]) -> str:
    """The model list's page of ``listed``."""
    return index_page(
        [
            ModelSummary(
                name=name,
                window="5m",
                score_kind="probability",
                latest=star,
                alerts=texts,
                segments=segments,
            )
            for name, (star, texts, segments, _) in sorted(listed.items())
        ],
        logout=False,
    )


def test_the_list_gives_every_segments_alerts_as_the_records_say(
    sessions: sessionmaker[Session],
) -> None:
    cache = WindowAlerts()
    first = _listed(cache, sessions)
    assert first == _now(sessions)
    assert _page(first) == _page(_now(sessions))
    star, texts, segments, computed = first["many"]
    assert star is not None
    assert alerts(star) == []
    assert segments == SEGMENTS  # the three quiet segments left out
    assert computed == LATEST + LENGTH
    # the list says the shift once, its segments counted
    shifted = [f"s{p:03d}" for p in range(SEGMENTS) if _alerting(p)]
    (said,) = texts
    assert said.startswith(SHIFTED)
    named = ", ".join(shifted[:3])
    assert said.endswith(
        f", in {len(shifted)} of {SEGMENTS} segments: {named} and {len(shifted) - 3} more"
    )
    few_star, few_texts, few_segments, _ = first["few"]
    assert few_star is not None
    assert alerts(few_star)
    assert [text.startswith(SHIFTED) for text in few_texts] == [True]
    assert few_segments == 2
    assert _listed(cache, sessions) == first  # from what was kept


def _recompute(session: Session, model_id: int, start: datetime, alerting: set[str]) -> None:
    """Replace every stored segment of the window at ``start`` as a computation does (its
    rows deleted, then the new ones inserted with their alert states), ``alerting`` the
    segments whose new record alerts; segment s003 is no longer in it."""
    segments = session.scalars(
        select(WindowResult.segment).where(
            WindowResult.model_id == model_id, WindowResult.starts_at == start
        )
    ).all()
    session.execute(
        delete(WindowResult).where(
            WindowResult.model_id == model_id, WindowResult.starts_at == start
        )
    )
    rows = [
        _row(model_id, name, start, _record(name, alerting=name in alerting), judged=True)
        for name in segments
        if name != "s003"
    ]
    for row in rows:
        row["computed_at"] = LATEST + 3 * LENGTH
    session.execute(insert(WindowResult), rows)


def test_recomputed_added_removed_and_expired_windows_show_at_the_next_load(
    sessions: sessionmaker[Session],
) -> None:
    cache = WindowAlerts()
    _listed(cache, sessions)
    later = LATEST + 2 * LENGTH
    with sessions() as session:
        many = session.query(Model.id).filter(Model.name == "many").scalar()
        few = session.query(Model.id).filter(Model.name == "few").scalar()
        # the latest window of "many" recomputed: s001 and s002 alert now, s007 is quiet,
        # s003 is gone from it (its older, alerting window is its latest again)
        _recompute(session, many, LATEST, {"s001", "s002"})
        # s009's record rewritten in place, without alert states: judged from the record
        session.execute(
            update(WindowResult)
            .where(
                WindowResult.model_id == many,
                WindowResult.segment == "s009",
                WindowResult.starts_at == LATEST,
            )
            .values(computed_at=later, record=_record("s009", alerting=True), alerts=None)
        )
        # s057 gets a newer window; s107's latest window is removed
        session.execute(
            insert(WindowResult),
            [_row(many, "s057", LATEST + LENGTH, _record("s057", alerting=False), judged=True)],
        )
        session.execute(
            delete(WindowResult).where(
                WindowResult.model_id == many,
                WindowResult.segment == "s107",
                WindowResult.starts_at == LATEST,
            )
        )
        # "few" expires: every window ended by LATEST + LENGTH
        few_model = session.get_one(Model, few)
        assert expire_windows_batch(session, model=few_model, before=later, limit=10) == 1
        session.commit()
    listed = _listed(cache, sessions)
    expected = _now(sessions)
    assert listed == expected
    assert _page(listed) == _page(expected)
    assert "few" not in listed
    star, (said,), segments, computed = listed["many"]
    assert star is not None
    assert alerts(star) == []
    assert computed == LATEST + 3 * LENGTH
    assert segments == SEGMENTS
    # the recompute left two alerting; s003 and s107 fell back to their older, alerting
    # windows; s009 was rewritten alerting
    assert said.endswith(", in 5 of 300 segments: s001, s002, s003 and 2 more")
    with sessions() as session:
        assert _from_records(session) == expected


def test_expired_windows_leave_the_latest_windows(sessions: sessionmaker[Session]) -> None:
    """Retention removes the windows of "many" that ended by its latest one's start: each
    segment keeps its latest window, the quiet segments (whose only window expired) and the
    older windows leave the list's reads."""
    cache = WindowAlerts()
    before = _listed(cache, sessions)
    with sessions() as session:
        many = session.get_one(Model, session.query(Model.id).filter(Model.name == "many").scalar())
        expired = expire_windows_batch(session, model=many, before=LATEST, limit=100)
        session.commit()
    assert expired == 2  # the older windows' start and the quiet segments' one
    after = _listed(cache, sessions)
    assert after == _now(sessions) == before


def test_a_small_cache_drops_its_oldest_windows_and_reads_them_again(
    sessions: sessionmaker[Session],
) -> None:
    cache = WindowAlerts(entries=50)
    expected = _now(sessions)
    assert _listed(cache, sessions) == expected
    assert _listed(cache, sessions) == expected
