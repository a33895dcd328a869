"""/metrics serves the latest computed window of each model and segment (SQLite, PostgreSQL).

Windows are computed by a real scheduler tick from predictions sent through the API; the
expected series are read off the window records the API serves, by the contract's rules
(``harness.records.expected_series``), and compared with a real scrape.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Collection, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event, text

from calmon.api.app import create_app
from calmon.commands.serve import lifespan_hooks
from calmon.exporter.refresh import WindowExporter
from calmon.exporter.snapshot import QUIET_SEGMENT_WINDOWS, load_latest_windows
from calmon.scheduler.runner import WindowScheduler
from calmon.settings import Settings
from harness.contract import SERIES
from harness.processes import wait_for
from harness.records import Key, estimated_series, expected_series, key, per_window_series
from tests.integration.scheduler.helpers import (
    Env,
    SetClock,
    SettledClock,
    create_model,
    iso,
    make_batch,
    send,
    windows,
)
from tests.support.clients import ClientFactory

#: every series the exporter owns (window series and the per-model overflow)
WINDOW_SERIES = {name for name, labels in SERIES.items() if labels >= {"model", "segment"}} | {
    "calmon_segments_overflow_predictions"
}
FRAUD = {"window": "5m", "grace": "0s", "pi0": [0.01, 0.5], "max_segments": 2}
ADS = {"score_kind": "score", "window": "5m", "grace": "0s", "pi0": [0.2]}


def scrape(client: TestClient, names: Collection[str] = WINDOW_SERIES) -> dict[Key, float]:
    """The samples of the series ``names`` (the window series) in one scrape of /metrics."""
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        key(sample.name, **sample.labels): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name in names
    }


def _send_window(clock: SettledClock, client: TestClient, ago: int, seed: int) -> None:
    """300 predictions of "fraud" (segments a, b, c cycled) and 200 of "ads" in the window
    that started ``ago`` windows ago."""
    fraud = make_batch(
        prefix=f"f{ago}",
        start=clock.recent(ago),
        count=300,
        spacing=timedelta(seconds=1),
        seed=seed,
        segments=["a", "b", "c"],
    )
    send(client, "fraud", fraud)
    ads = make_batch(
        prefix=f"a{ago}",
        start=clock.recent(ago),
        count=200,
        spacing=timedelta(seconds=1.5),
        seed=seed,
    )
    send(client, "ads", ads)


def _populate(env: Env) -> WindowScheduler:
    """Two computed windows of each model; fraud tracks segments a and b (c is beyond its
    max_segments of 2). Returns the scheduler (the leader) that computed them."""
    create_model(env.client, "fraud", **FRAUD)
    create_model(env.client, "ads", **ADS)
    for seed, ago in enumerate((3, 2)):
        _send_window(env.clock, env.client, ago, seed)
    scheduler = env.scheduler()
    report = scheduler.tick()
    assert (report.computed, report.failed) == (4, 0)
    return scheduler


def _latest(client: TestClient, model: str) -> dict[str, dict[str, Any]]:
    """The latest record of each segment of ``model``, through the window API."""
    latest: dict[str, dict[str, Any]] = {}
    for record in windows(client, model):
        if record["segment"] not in latest or record["start"] > latest[record["segment"]]["start"]:
            latest[record["segment"]] = record
    return latest


def _expected(client: TestClient, segments: dict[str, set[str]]) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for model, names in segments.items():
        latest = _latest(client, model)
        assert set(latest) >= names
        for name in names:
            out |= expected_series(model, latest[name])
    return out


def _exporter(client: TestClient) -> WindowExporter:
    exporter: WindowExporter = client.app.state.window_exporter  # type: ignore[attr-defined]
    return exporter


def _wait_loaded(exporter: WindowExporter) -> None:
    """Wait for the timer's first refresh, so that it does not run inside a measurement."""
    wait_for(
        "the exporter's first refresh",
        lambda: exporter.collector.snapshot.loaded_at != 0.0,
        timeout=10,
        interval=0.05,
    )


@pytest.fixture
def quiet_client(make_client: ClientFactory) -> TestClient:
    """An API whose exporter refreshed once at start and then only when asked."""
    client = make_client(scheduler_interval=3600)
    _wait_loaded(_exporter(client))
    return client


#: series of a window's advice (docs/reference/acting.md): threshold, four expected values, check
ADVICE = 6


def test_metrics_are_the_latest_window_of_each_model_and_segment(
    env: Env, quiet_client: TestClient, clock: SettledClock
) -> None:
    _populate(env)
    exporter = _exporter(quiet_client)
    snapshot = exporter.refresh()
    assert snapshot is not None
    scraped = scrape(quiet_client)
    expected = _expected(env.client, {"fraud": {"*", "a", "b"}, "ads": {"*"}})
    assert scraped == expected
    # the latest window, not the first; tracked segments only; c counted as overflow
    starts = {v for (name, _), v in scraped.items() if name.endswith("start_timestamp_seconds")}
    assert starts == {clock.recent(2).timestamp()}
    assert {dict(labels)["segment"] for _, labels in scraped if "segment" in dict(labels)} == {
        "*",
        "a",
        "b",
    }
    assert scraped[key("calmon_segments_overflow_predictions", model="fraud")] == 100
    assert scraped[key("calmon_segments_overflow_predictions", model="ads")] == 0
    assert scraped[key("calmon_window_predictions", model="fraud", segment="a")] == 100
    # models x segments x metrics x pi0 variants: fraud has 2 configured priors and 3
    # segments, ads (a score model) 1 prior and segment * only
    # AP calibrated at fraud's π0 = 0.01 has no interval (its prior is below MIN_AP_PRIOR,
    # docs/reference/intervals.md): two bounds fewer in each of fraud's three windows; the parts of
    # AP's change have none either (fewer than MIN_AP_PART_POSITIVES): four fewer in every window;
    # neither model has an objective: no advice series (ADVICE fewer in every window); every
    # prediction is labelled, so the labels measure each window's ratio and no window has a
    # label-free estimate (its series fewer in every window)
    # the pooled decision's 13 series of each of the 4 windows count as their records define
    # them: always its pooled windows, predictions, positives and ratio with its bounds; its
    # parts and their bounds where it has a reference and 100 positives (none here); the
    # positives' shift p-value where both sets have positives
    # the two reference info series of each window count as their records define them (a
    # decision whose pooled windows reach back to the first has no reference)
    infos = sum(1 for name, _ in expected if name.endswith("reference_info"))
    defined = sum(
        1
        for name, _ in expected
        if name.startswith("calmon_decision_") and name != "calmon_decision_reference_info"
    )
    count = (
        3
        * (
            per_window_series(configured_pi0=2)
            - 2
            - 4
            - ADVICE
            - estimated_series(configured_pi0=2)
        )
        + 1
        + per_window_series(configured_pi0=1, probability=False)
        - 4
        - ADVICE
        - estimated_series(configured_pi0=1)
        + 1
        - 4 * 13
        + defined
        - 4 * 2
        + infos
    )
    assert 4 * 6 <= defined < 4 * 12
    assert 4 <= infos <= 4 * 2  # every window has a reference here
    for record in _latest(env.client, "fraud").values():
        assert record["intervals"]["calibrated"]["0.01"]["average_precision"] is None
    for model in ("fraud", "ads"):
        for record in _latest(env.client, model).values():
            parts = record["split"]["average_precision"]
            assert parts["prior_interval"] is None
            assert parts["likelihood_interval"] is None
    assert not [name for name, _ in scraped if name.startswith("calmon_estimated_")]
    assert len(scraped) == count
    # and one calmon_exporter_segments_omitted per model, at 0 (the default budget holds all)
    assert snapshot.series == count + 2
    assert snapshot.windows == 4


def test_the_latest_windows_of_one_model_are_those_of_all_models_for_it(env: Env) -> None:
    _populate(env)
    fraud_id = env.model_id("fraud")
    with env.session_factory() as session:
        every = load_latest_windows(session)
        fraud = load_latest_windows(session, model_id=fraud_id)
    assert {w.model for w in every} == {"fraud", "ads"}
    assert [(w.segment, w.start) for w in fraud] == [
        (w.segment, w.start) for w in every if w.model == "fraud"
    ]
    assert {w.segment for w in fraud} == {"*", "a", "b"}


def test_a_scrape_reads_memory_and_a_refresh_reads_the_exported_records_only(
    env: Env, quiet_client: TestClient
) -> None:
    _populate(env)
    exporter = _exporter(quiet_client)
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    engine = quiet_client.app.state.engine  # type: ignore[attr-defined]
    event.listen(engine, "before_cursor_execute", record)
    try:
        assert exporter.refresh() is not None
        selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        # the models' configurations, their latest * windows, their current segment windows
        # (those the budget could pay for) without records, then the records of the windows
        # the budget exports (four here), by primary key
        assert len(selects) == 4, statements
        assert ["record" in s for s in selects] == [False, False, False, True]
        assert all("FROM window_results" in s for s in selects[1:])
        assert selects[3].count("(?, ?, ?)") + selects[3].count("_3)s)") == 4, selects[3]
        statements.clear()
        first = scrape(quiet_client)
        for _ in range(3):
            assert scrape(quiet_client) == first
        assert statements == []
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert len(first) > 0


def test_history_does_not_change_what_is_read(
    env: Env, quiet_client: TestClient, clock: SettledClock
) -> None:
    scheduler = _populate(env)
    exporter = _exporter(quiet_client)
    before = exporter.refresh()
    assert before is not None
    _send_window(clock, env.client, 1, seed=7)
    assert scheduler.tick().computed == 2
    after = exporter.refresh()
    assert after is not None
    assert after.windows == before.windows == 4
    scraped = scrape(quiet_client)
    assert scraped == _expected(env.client, {"fraud": {"*", "a", "b"}, "ads": {"*"}})
    starts = {v for (name, _), v in scraped.items() if name.endswith("start_timestamp_seconds")}
    assert starts == {clock.recent(1).timestamp()}


def test_lowering_max_segments_drops_the_segments_beyond_it(
    env: Env, quiet_client: TestClient
) -> None:
    _populate(env)
    response = env.client.put("/v1/models/fraud", json={**FRAUD, "max_segments": 1})
    assert response.status_code == 200, response.text
    assert _exporter(quiet_client).refresh() is not None
    segments = {
        dict(labels)["segment"]
        for _, labels in scrape(quiet_client)
        if dict(labels).get("model") == "fraud" and "segment" in dict(labels)
    }
    assert segments == {"*", "a"}


def test_a_failed_refresh_keeps_the_last_snapshot(
    env: Env, quiet_client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    _populate(env)
    exporter = _exporter(quiet_client)
    assert exporter.refresh() is not None
    served = scrape(quiet_client)
    with env.session_factory() as session:
        session.execute(text("ALTER TABLE window_results RENAME TO window_results_away"))
        session.commit()
    try:
        with caplog.at_level(logging.WARNING, logger="calmon.exporter.refresh"):
            assert exporter.refresh() is None
            assert exporter.refresh() is None
        assert scrape(quiet_client) == served
        warnings = [r for r in caplog.records if r.name == "calmon.exporter.refresh"]
        assert len(warnings) == 1, "one warning per run of failures"
    finally:
        with env.session_factory() as session:
            session.execute(text("ALTER TABLE window_results_away RENAME TO window_results"))
            session.commit()
    assert exporter.refresh() is not None
    assert scrape(quiet_client) == served


def test_a_refresh_is_stamped_by_the_exporter_clock(env: Env) -> None:
    _populate(env)
    clock = SetClock(at=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC))
    exporter = WindowExporter(clock=clock)
    exporter.bind(env.session_factory, settings=env.settings)
    snapshot = exporter.refresh()
    assert snapshot is not None
    assert snapshot.windows == 4
    assert snapshot.loaded_at == clock.at.timestamp()
    assert exporter.collector.snapshot is snapshot


def test_api_processes_refresh_on_their_timer(env: Env, make_client: ClientFactory) -> None:
    client = make_client(scheduler_interval=0.2)
    _wait_loaded(_exporter(client))
    assert scrape(client) == {}
    _populate(env)
    expected = _expected(env.client, {"fraud": {"*", "a", "b"}, "ads": {"*"}})
    wait_for("the timer to refresh the series", lambda: scrape(client) == expected, timeout=10)


@pytest.fixture
def serve_client(env: Env, clock: SettledClock) -> Iterator[TestClient]:
    """The app as `calmon serve` builds it: exporter and scheduler in the process, on the
    test's scheduler clock."""
    settings = Settings(
        database_url=env.url, scheduler_interval=0.3, scheduler_scan_margin=5, retention_days=0
    )
    with TestClient(
        create_app(settings, lifespan_hooks=lifespan_hooks(settings, clock=clock))
    ) as client:
        yield client


def test_serve_refreshes_after_each_scheduler_tick(
    env: Env, serve_client: TestClient, clock: SettledClock
) -> None:
    create_model(serve_client, "fraud", **FRAUD)
    create_model(serve_client, "ads", **ADS)

    def latest_start() -> float | None:
        scraped = scrape(serve_client)
        return scraped.get(key("calmon_window_start_timestamp_seconds", model="fraud", segment="*"))

    def exported(start: datetime) -> Callable[[], bool]:
        return lambda: latest_start() == start.timestamp()

    for seed, ago in enumerate((3, 2, 1)):
        _send_window(clock, serve_client, ago, seed)
        wait_for(
            f"window {iso(clock.recent(ago))} exported", exported(clock.recent(ago)), timeout=20
        )
    # a tick may have stored windows it has not exported yet: compare once it is over
    wait_for(
        "every stored window exported",
        lambda: (
            scrape(serve_client)
            == _expected(serve_client, {"fraud": {"*", "a", "b"}, "ads": {"*"}})
        ),
        timeout=20,
        interval=0.2,
    )


def test_serve_exports_during_a_long_back_fill(env: Env, clock: SettledClock) -> None:
    """A tick ends only once no window is due: during a back-fill the exporter's own timer
    shows each window computed so far, long before the tick ends."""
    create_model(env.client, "fraud", **FRAUD)
    create_model(env.client, "ads", **ADS)
    for seed, ago in enumerate(range(6, 0, -1)):
        _send_window(clock, env.client, ago, seed)
    settings = Settings(
        database_url=env.url, scheduler_interval=0.3, scheduler_scan_margin=5, retention_days=0
    )
    slow = lambda: time.sleep(1.0)  # noqa: E731 - each window's commit waits a second
    hooks = lifespan_hooks(settings, clock=clock, before_commit=slow)
    with TestClient(create_app(settings, lifespan_hooks=hooks)) as client:
        wait_for(
            "a window of the back-fill exported",
            lambda: (
                key("calmon_window_start_timestamp_seconds", model="fraud", segment="*")
                in scrape(client)
            ),
            timeout=30,
            interval=0.1,
        )
        computed = len(windows(client, "fraud", segment="*"))
        assert computed < 6, "the series appeared only once the back-fill was over"


def test_promtool_check_metrics_passes_on_the_real_output(
    env: Env, quiet_client: TestClient, promtool: str
) -> None:
    _populate(env)
    assert _exporter(quiet_client).refresh() is not None
    body = quiet_client.get("/metrics").text
    assert "calmon_f1_change_upper{" in body
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=body,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", result.stdout


def test_a_segment_gone_quiet_leaves_the_export(
    env: Env, quiet_client: TestClient, clock: SettledClock
) -> None:
    create_model(env.client, "fraud", window="5m", grace="0s", max_segments=3)
    old = 2 + QUIET_SEGMENT_WINDOWS + 1
    plan: list[tuple[int, list[str | None]]] = [(old, ["gone", "kept"]), (2, ["kept"])]
    for ago, segments in plan:
        batch = make_batch(
            prefix=f"q{ago}",
            start=clock.recent(ago),
            count=120,
            spacing=timedelta(seconds=2),
            seed=ago,
            segments=segments,
        )
        send(env.client, "fraud", batch)
    assert env.scheduler().tick().computed == 2
    assert {r["segment"] for r in windows(env.client, "fraud")} == {"*", "gone", "kept"}
    exporter = _exporter(quiet_client)
    assert exporter.refresh() is not None
    exported = {dict(labels).get("segment") for _, labels in scrape(quiet_client)}
    assert exported == {"*", "kept", None}  # None: the per-model overflow series
