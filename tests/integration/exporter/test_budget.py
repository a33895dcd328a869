"""``CALMON_METRICS_MAX_SERIES`` bounds a scrape of /metrics (SQLite, PostgreSQL).

A model with more tracked segments than the budget holds exports its ``*`` window whole, its
segments in tracked position order while their series fit, and counts the rest in
``calmon_exporter_segments_omitted{model}``; the window API still serves every segment. The
budget is set from the contract's own count of a window's series
(``harness.records.per_window_series``), not from the exporter's.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from calmon.db.models import ModelSegment
from harness.records import expected_series, key, per_window_series
from tests.integration.exporter.test_exporter import (
    WINDOW_SERIES,
    _exporter,
    _wait_loaded,
    scrape,
)
from tests.integration.scheduler.helpers import Env, create_model, make_batch, send, windows
from tests.support.clients import ClientFactory

OMITTED = "calmon_exporter_segments_omitted"
#: the exporter's series: window series, the per-model overflow and omitted-segments gauges
EXPORTER_SERIES = WINDOW_SERIES | {OMITTED}
SEGMENTS = ("west", "east", "north", "south", "centre", "islands")
WIDE = {"window": "5m", "grace": "0s", "pi0": [0.5], "max_segments": len(SEGMENTS)}
NARROW = {"score_kind": "score", "window": "5m", "grace": "0s", "pi0": [0.2]}
#: series of one window of each model, every value defined (an upper bound of the real ones)
WIDE_WINDOW = per_window_series(configured_pi0=1)
NARROW_WINDOW = per_window_series(configured_pi0=1, probability=False)
#: per model: calmon_segments_overflow_predictions and calmon_exporter_segments_omitted
PER_MODEL = 2


def _populate(env: Env) -> list[str]:
    """One computed window of "wide" (six tracked segments) and of "narrow" (``*`` only);
    returns wide's segments in tracked position order."""
    create_model(env.client, "wide", **WIDE)
    create_model(env.client, "narrow", **NARROW)
    start = env.clock.recent(2)
    segments: list[str | None] = [*SEGMENTS]
    wide = make_batch(
        prefix="w",
        start=start,
        count=600,
        spacing=timedelta(seconds=0.4),
        seed=1,
        segments=segments,
    )
    send(env.client, "wide", wide)
    narrow = make_batch(prefix="n", start=start, count=200, spacing=timedelta(seconds=1), seed=2)
    send(env.client, "narrow", narrow)
    report = env.scheduler().tick()
    assert (report.computed, report.failed) == (2, 0)
    with env.session_factory() as session:
        ordered = session.scalars(
            select(ModelSegment.name)
            .where(ModelSegment.model_id == env.model_id("wide"))
            .order_by(ModelSegment.position)
        ).all()
    assert sorted(ordered) == sorted(SEGMENTS)
    return list(ordered)


def _client(make_client: ClientFactory, max_series: int) -> TestClient:
    client = make_client(scheduler_interval=3600, metrics_max_series=max_series)
    _wait_loaded(_exporter(client))
    return client


def _latest(client: TestClient, model: str) -> dict[str, dict[str, object]]:
    return {str(record["segment"]): record for record in windows(client, model)}


@pytest.mark.parametrize("fitting", [2, 1])
def test_segments_beyond_the_budget_are_left_out_and_counted(
    env: Env, make_client: ClientFactory, fitting: int
) -> None:
    ordered = _populate(env)
    # both * windows, `fitting` of wide's segments and the per-model gauges; one series short
    # of one more segment
    budget = (1 + fitting) * WIDE_WINDOW + NARROW_WINDOW + 2 * PER_MODEL
    client = _client(make_client, budget + WIDE_WINDOW - 1)
    assert _exporter(client).refresh() is not None
    scraped = scrape(client, EXPORTER_SERIES)
    assert len(scraped) <= budget + WIDE_WINDOW - 1
    wide = _latest(env.client, "wide")
    narrow = _latest(env.client, "narrow")
    # the window API still has every segment
    assert set(wide) == {"*", *SEGMENTS}
    exported = {
        dict(labels)["segment"]
        for _, labels in scraped
        if dict(labels).get("model") == "wide" and "segment" in dict(labels)
    }
    assert exported == {"*", *ordered[:fitting]}
    expected = expected_series("narrow", narrow["*"])
    for segment in ("*", *ordered[:fitting]):
        expected |= expected_series("wide", wide[segment])
    expected[key(OMITTED, model="wide")] = len(SEGMENTS) - fitting
    expected[key(OMITTED, model="narrow")] = 0
    assert scraped == expected


def test_the_star_windows_are_exported_whatever_the_budget(
    env: Env, make_client: ClientFactory
) -> None:
    _populate(env)
    client = _client(make_client, 1)
    assert _exporter(client).refresh() is not None
    scraped = scrape(client, EXPORTER_SERIES)
    expected = expected_series("wide", _latest(env.client, "wide")["*"])
    expected |= expected_series("narrow", _latest(env.client, "narrow")["*"])
    expected[key(OMITTED, model="wide")] = len(SEGMENTS)
    expected[key(OMITTED, model="narrow")] = 0
    assert scraped == expected


def test_a_budget_that_holds_everything_omits_nothing(env: Env, make_client: ClientFactory) -> None:
    ordered = _populate(env)
    budget = (1 + len(SEGMENTS)) * WIDE_WINDOW + NARROW_WINDOW + 2 * PER_MODEL
    client = _client(make_client, budget)
    assert _exporter(client).refresh() is not None
    scraped = scrape(client, EXPORTER_SERIES)
    segments = {dict(labels).get("segment") for _, labels in scraped}
    assert segments == {"*", *ordered, None}
    assert scraped[key(OMITTED, model="wide")] == 0
    assert scraped[key(OMITTED, model="narrow")] == 0
