"""Waiting for the simulated windows (real API and scheduler in-process) and the summary."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.db import migrate
from app.db.session import create_db_engine
from app.scheduler.runner import WindowScheduler
from app.settings import Settings
from app.simulation.report import (
    WaitTimeoutError,
    fetch_records,
    format_summary,
    is_complete,
    reference_size,
    wait_for_windows,
)
from app.simulation.sender import SendTotals, request_json, send_labels, send_windows
from app.simulation.stream import PHASES, WindowData, WindowPlan, generate_window, plan_windows

PER_WINDOW = 400


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    value = Settings(
        database_url=f"sqlite:///{tmp_path / 'calmon.db'}",
        scheduler_scan_margin=5.0,
        retention_days=0,
    )
    engine = create_db_engine(value)
    migrate.upgrade(engine)
    engine.dispose()
    return value


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def scheduler(settings: Settings) -> Iterator[WindowScheduler]:
    """A scheduler on the same database; its ticks run when the test says."""
    running = WindowScheduler(settings, instance="simulate-test")
    yield running
    running.shutdown()


def _plans() -> list[WindowPlan]:
    return plan_windows(
        phases=[PHASES["stable"], PHASES["prior"]],
        window="5m",
        windows_per_phase=2,
        per_window=PER_WINDOW,
        now=datetime.now(UTC),
    )


def _ticks(scheduler: WindowScheduler, computed: list[int]) -> Callable[[float], None]:
    """A ``sleep`` for :func:`wait_for_windows` that runs a scheduler tick instead."""

    def tick(_seconds: float) -> None:
        computed.append(scheduler.tick().computed)

    return tick


def _create(api: TestClient, plans: list[WindowPlan]) -> None:
    config = {
        "window": "5m",
        "grace": "0s",
        "reference": {
            "kind": "fixed",
            "start": plans[0].start.isoformat(),
            "end": plans[1].end.isoformat(),
        },
    }
    status, _ = request_json(api, "PUT", "/v1/models/sim", body=orjson.dumps(config))
    assert status == 201


def test_windows_computed_early_are_brought_up_to_date(
    api: TestClient, scheduler: WindowScheduler
) -> None:
    plans = _plans()
    _create(api, plans)

    def compute_first(data: WindowData, _totals: SendTotals) -> None:
        # the first window is computed while the reference period holds half its data
        if data.plan.index == 0:
            assert scheduler.tick().computed == 1

    send_windows(
        api,
        model="sim",
        windows=(generate_window(p, seed=1) for p in plans),
        batch_size=150,
        concurrency=1,
        on_window=compute_first,
    )
    early = fetch_records(api, model="sim", start=plans[0].start, end=plans[-1].end)
    assert list(early) == [plans[0].start]
    assert early[plans[0].start]["reference"]["n"] == PER_WINDOW
    assert not is_complete(early[plans[0].start], plans[0], reference_size(plans))

    ticks: list[int] = []
    records = wait_for_windows(
        api, model="sim", plans=plans, timeout=60, poll=0, sleep=_ticks(scheduler, ticks)
    )
    assert ticks == [4]  # the stale first window and the three others, in one tick
    assert list(records) == [p.start for p in plans]
    for plan in plans:
        record = records[plan.start]
        assert is_complete(record, plan, 2 * PER_WINDOW)
        assert record["n"] == PER_WINDOW
        assert record["reference"]["n"] == 2 * PER_WINDOW


def test_wait_gives_up_at_the_deadline_and_asks_again_meanwhile(api: TestClient) -> None:
    plans = _plans()
    _create(api, plans)
    send_windows(
        api,
        model="sim",
        windows=(generate_window(p, seed=2) for p in plans),
        batch_size=1000,
        concurrency=1,
    )
    recomputes: list[str] = []

    def seen(request: httpx.Request) -> None:
        if request.url.path.endswith("/recompute"):
            recomputes.append(request.url.params["start"])

    api.event_hooks["request"].append(seen)
    clock = itertools.count(0.0, 4.0)  # each poll takes 4 s; re-ask every 10 s; give up at 30 s
    with pytest.raises(
        WaitTimeoutError, match="0 of 4 windows computed after waiting 30 s"
    ) as caught:
        wait_for_windows(
            api,
            model="sim",
            plans=plans,
            timeout=30,
            rerequest=10,
            clock=lambda: float(next(clock)),
            sleep=lambda _s: None,
        )
    first = f"{plans[0].start:%Y-%m-%dT%H:%M:%S}Z"
    assert recomputes == [first, first, first]  # at 0, 12 and 24 s
    assert caught.value.records == {}


def test_no_wait_reads_once(api: TestClient) -> None:
    plans = _plans()
    _create(api, plans)
    assert wait_for_windows(api, model="sim", plans=plans, timeout=0) == {}


def _text(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def test_summary_lists_every_planned_window(api: TestClient, scheduler: WindowScheduler) -> None:
    plans = _plans()
    _create(api, plans)
    send_windows(
        api,
        model="sim",
        windows=(generate_window(p, seed=3) for p in plans[:3]),
        batch_size=1000,
        concurrency=1,
    )
    records = wait_for_windows(
        api,
        model="sim",
        plans=plans[:3],
        timeout=60,
        poll=0,
        sleep=_ticks(scheduler, []),
    )
    # seed 3 leaves the third window (π = 0.008) without a positive: AP is undefined there
    assert records[plans[2].start]["n_pos"] == 0
    lines = format_summary(plans, records).splitlines()
    assert lines[0].split()[:4] == ["window", "start", "(UTC)", "phase"]
    assert len(lines) == 1 + len(plans) + 1
    for plan, line in zip(plans[:3], lines[1:4], strict=True):
        record = records[plan.start]
        fields = line.split()
        assert fields[:3] == [f"{plan.start:%Y-%m-%d}", f"{plan.start:%H:%M}", plan.phase.name]
        assert fields[3] == str(record["n"])
        assert fields[4] == f"{record['prior']:.4f}"
        assert fields[5] == _text(record["regular"]["average_precision"], ".3f")
        assert fields[6] == _text(record["calibrated"]["reference"]["average_precision"], ".3f")
        split = record["split"]["average_precision"]
        expected = []
        for part in ("prior", "likelihood"):
            bounds = split[f"{part}_interval"]
            interval = ["[-]"] if bounds is None else [f"[{bounds[0]:+.3f},", f"{bounds[1]:+.3f}]"]
            expected += [_text(split[part], "+.3f"), *interval]
        assert fields[7:-1] == expected
        estimated = record["estimated"]
        assert fields[-1] == _text(estimated and estimated["positive_class_ratio"], ".4f")
    assert lines[4].split()[2:] == ["prior", "not", "computed"]
    reference = records[plans[0].start]["reference"]
    assert lines[-1] == (
        f"reference {reference['start']} to {reference['end']}: n {2 * PER_WINDOW},"
        f" prior {reference['prior']:.4f}, AP {reference['regular']['average_precision']:.3f}"
    )


def test_late_labels_keep_the_estimate_beside_the_measured_values(
    api: TestClient, scheduler: WindowScheduler
) -> None:
    """Windows after the reference period are sent without labels: their records first hold
    only the label-free estimate; once the labels land they hold the measured values too, and
    the same estimate."""
    plans = _plans()
    _create(api, plans)
    windows = [generate_window(p, seed=5) for p in plans]
    late = [data for data in windows if data.plan.phase.name != "stable"]
    send_windows(
        api,
        model="sim",
        windows=windows,
        batch_size=150,
        concurrency=1,
        labelled=lambda data: data.plan.phase.name == "stable",
    )
    before = wait_for_windows(
        api, model="sim", plans=plans, timeout=60, poll=0, sleep=_ticks(scheduler, [])
    )
    for data in late:
        record = before[data.plan.start]
        assert (record["n"], record["unlabelled"]) == (0, PER_WINDOW)
        assert record["prior"] is None
        assert record["estimated"]["n"] == PER_WINDOW
    with pytest.raises(WaitTimeoutError):
        wait_for_windows(api, model="sim", plans=plans, timeout=0.01, poll=0, labelled=True)
    assert send_labels(api, model="sim", windows=late, batch_size=150) == len(late) * PER_WINDOW
    after = wait_for_windows(
        api,
        model="sim",
        plans=plans,
        timeout=60,
        poll=0,
        sleep=_ticks(scheduler, []),
        labelled=True,
    )
    for data in late:
        record = after[data.plan.start]
        assert (record["n"], record["unlabelled"]) == (PER_WINDOW, 0)
        assert record["n_pos"] == data.n_pos
        assert record["estimated"] == before[data.plan.start]["estimated"]
    summary = format_summary(plans, after).splitlines()
    estimated = after[plans[-1].start]["estimated"]["positive_class_ratio"]
    assert summary[len(plans)].split()[-1] == f"{estimated:.4f}"
