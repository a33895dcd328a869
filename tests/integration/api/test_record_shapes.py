"""Records of an older shape are not served but computed again (SQLite, PostgreSQL): a window
whose stored record is older than ``RECORD_VERSION`` reads as a window not computed yet in the
window API, the exporter's snapshot, the web view (the model list's alert column too, which
reads the alert states stored with the latest windows) and the calibration route, and a
scheduler that starts leading requests it and computes it again, after which it is served."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from calmon.db.models import WindowLatest, WindowResult, WindowState
from calmon.exporter.snapshot import load_snapshot
from calmon.names import ALL_SEGMENTS
from calmon.records import RECORD_VERSION, WINDOW_RECORD
from tests.integration.scheduler.helpers import (
    Env,
    SettledClock,
    create_model,
    iso,
    make_batch,
    send,
    windows,
)

#: the alert of the latest window: its class ratio (0.4) moved up from the older one's (0.1)
SHIFTED = "prior shift: class ratio went up"


def _exported_starts(env: Env) -> dict[str, float]:
    """Per segment of "fraud", the start of the window the exporter's snapshot shows."""
    with env.session_factory() as session:
        snapshot = load_snapshot(session, max_series=100_000)
    return {
        sample.labels["segment"]: sample.value
        for family in snapshot.families
        if family.name == "calmon_window_start_timestamp_seconds"
        for sample in family.samples
        if sample.labels["model"] == "fraud"
    }


def _state_column(env: Env) -> str:
    """The model list's alert column of "fraud" (its only model), as HTML."""
    listing = env.client.get("/ui")
    assert listing.status_code == 200
    (state,) = re.findall(r'<td class="text state">(.*?)</td></tr>', listing.text)
    return str(state)


def _outdate(env: Env, model_id: int, start: Any) -> None:
    """Store the window's records as a record of the shape before ``decision`` existed: its
    version one less and its ``decision`` key gone."""
    with env.session_factory() as session:
        for segment, record in session.execute(
            select(WindowResult.segment, WindowResult.record).where(
                WindowResult.model_id == model_id, WindowResult.starts_at == start
            )
        ).all():
            old = {key: value for key, value in record.items() if key != "decision"}
            session.execute(
                update(WindowResult)
                .where(
                    WindowResult.model_id == model_id,
                    WindowResult.starts_at == start,
                    WindowResult.segment == segment,
                )
                .values(record=old, record_version=RECORD_VERSION - 1)
            )
        session.commit()


def test_an_older_record_is_not_served_until_it_is_computed_again(
    env: Env, clock: SettledClock
) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s")
    older, latest = clock.recent(3), clock.recent(2)
    for ago, start, prior in ((3, older, 0.1), (2, latest, 0.4)):
        batch = make_batch(
            prefix=f"w{ago}",
            start=start,
            count=400,
            spacing=timedelta(seconds=0.7),
            seed=ago,
            prior=prior,
            segments=["a", None],
        )
        send(env.client, "fraud", batch)
    first = env.scheduler()
    assert first.tick().computed == 2
    served = windows(env.client, "fraud")
    assert [(r["start"], r["segment"]) for r in served] == [
        (iso(start), segment) for start in (older, latest) for segment in (ALL_SEGMENTS, "a")
    ]
    assert _exported_starts(env) == {ALL_SEGMENTS: latest.timestamp(), "a": latest.timestamp()}
    model_id = env.model_id("fraud")
    with env.session_factory() as session:
        stored = session.execute(select(WindowLatest.segment, WindowLatest.alerts)).all()
    assert sorted(segment for segment, said in stored if said and SHIFTED in said) == [
        ALL_SEGMENTS,
        "a",
    ]
    _outdate(env, model_id, latest)

    # the latest window reads as not computed: in the API, the exporter, the web view
    assert [(r["start"], r["segment"]) for r in windows(env.client, "fraud")] == [
        (iso(older), ALL_SEGMENTS),
        (iso(older), "a"),
    ]
    assert [r["start"] for r in windows(env.client, "fraud", segment="a")] == [iso(older)]
    assert _exported_starts(env) == {}
    listing = env.client.get("/ui")
    assert listing.status_code == 200
    assert "no window computed yet" in listing.text
    # the alert states stored with the latest windows are not shown either
    assert _state_column(env) == '<span class="ok">no alert</span>'
    page = env.client.get("/ui/models/fraud")
    assert page.status_code == 200
    assert iso(older) in page.text
    assert iso(latest) not in page.text
    calibration = env.client.get(
        "/v1/models/fraud/calibration", params={"window": iso(latest + timedelta(seconds=7))}
    )
    assert calibration.status_code == 404
    assert calibration.json()["error"]["code"] == "window_not_found"

    # the scheduler that already leads does not look again; the next to lead requests the
    # window and computes it again
    assert first.tick().computed == 0
    assert [r["start"] for r in windows(env.client, "fraud", segment="*")] == [iso(older)]
    with env.session_factory() as session:
        state = session.get_one(WindowState, (model_id, latest))
        version = state.version
    first.shutdown()
    restarted = env.scheduler()
    assert restarted.tick().computed == 1
    with env.session_factory() as session:
        assert session.get_one(WindowState, (model_id, latest)).version == version + 1
        assert set(
            session.scalars(
                select(WindowResult.record_version).where(WindowResult.model_id == model_id)
            )
        ) == {RECORD_VERSION}
    served = windows(env.client, "fraud")
    assert [(r["start"], r["segment"]) for r in served] == [
        (iso(start), segment) for start in (older, latest) for segment in (ALL_SEGMENTS, "a")
    ]
    for record in served:
        WINDOW_RECORD.validate_python(record)
        assert record["decision"]["windows"] >= 1
    assert _exported_starts(env) == {ALL_SEGMENTS: latest.timestamp(), "a": latest.timestamp()}
    page = env.client.get("/ui/models/fraud")
    assert iso(latest) in page.text
    assert "no window computed yet" not in env.client.get("/ui").text
    assert SHIFTED in _state_column(env)
    calibration = env.client.get(
        "/v1/models/fraud/calibration", params={"window": iso(latest + timedelta(seconds=7))}
    )
    assert calibration.status_code != 404
