"""Waiting for the simulated windows (real API and scheduler in-process) and the summary."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from calmon_client import Api
from fastapi.testclient import TestClient

from calmon.api.app import create_app
from calmon.scheduler.runner import WindowScheduler
from calmon.settings import Settings
from calmon.simulation.population import truth_document
from calmon.simulation.report import (
    MixedWindowsError,
    WaitTimeoutError,
    _ratio_moved,
    fetch_records,
    format_summary,
    format_verdicts,
    is_complete,
    reference_size,
    wait_for_windows,
)
from calmon.simulation.sender import SendTotals, send_labels, send_windows
from calmon.simulation.stream import (
    PHASES,
    SCORE_MAP,
    WindowData,
    WindowPlan,
    generate_window,
    plan_windows,
)
from tests.support.databases import upgraded

PER_WINDOW = 400


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=upgraded(f"sqlite:///{tmp_path / 'calmon.db'}"),
        scheduler_scan_margin=5.0,
        retention_days=0,
    )


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    """The real API, through the client's :class:`Api`."""
    with TestClient(create_app(settings)) as client:
        yield Api(client=client)


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


def _create(api: Api, plans: list[WindowPlan]) -> None:
    config = {
        "window": "5m",
        "grace": "0s",
        "reference": {
            "kind": "fixed",
            "start": plans[0].start.isoformat(),
            "end": plans[1].end.isoformat(),
        },
    }
    status, _ = api.request("PUT", "/v1/models/sim", content=orjson.dumps(config))
    assert status == 201


def _send(
    api: Api,
    plans: list[WindowPlan],
    *,
    seed: int,
    batch_size: int = 1000,
    **options: Any,
) -> None:
    """The windows of ``plans`` generated with ``seed``, sent to "sim" in batches of
    ``batch_size``, one request at a time."""
    send_windows(
        api,
        model="sim",
        windows=(generate_window(p, seed=seed) for p in plans),
        batch_size=batch_size,
        concurrency=1,
        **options,
    )


def test_windows_computed_early_are_brought_up_to_date(
    api: Api, scheduler: WindowScheduler
) -> None:
    plans = _plans()
    _create(api, plans)

    def compute_first(data: WindowData, _totals: SendTotals) -> None:
        # the first window is computed while the reference period holds half its data
        if data.plan.index == 0:
            assert scheduler.tick().computed == 1

    _send(api, plans, seed=1, batch_size=150, on_window=compute_first)
    early: dict[datetime, Any] = fetch_records(
        api, model="sim", start=plans[0].start, end=plans[-1].end
    )
    assert list(early) == [plans[0].start]
    assert early[plans[0].start]["reference"]["n"] == PER_WINDOW
    assert not is_complete(early[plans[0].start], plans[0], reference_size(plans))

    ticks: list[int] = []
    records: dict[datetime, Any] = wait_for_windows(
        api, model="sim", plans=plans, timeout=60, poll=0, sleep=_ticks(scheduler, ticks)
    )
    assert ticks == [4]  # the stale first window and the three others, in one tick
    assert list(records) == [p.start for p in plans]
    for plan in plans:
        record = records[plan.start]
        assert is_complete(record, plan, 2 * PER_WINDOW)
        assert record["n"] == PER_WINDOW
        assert record["reference"]["n"] == 2 * PER_WINDOW


def test_wait_gives_up_at_the_deadline_and_asks_again_meanwhile(api: Api) -> None:
    plans = _plans()
    _create(api, plans)
    _send(api, plans, seed=2)
    recomputes: list[str] = []

    def seen(request: httpx.Request) -> None:
        if request.url.path.endswith("/recompute"):
            recomputes.append(request.url.params["start"])

    api.http.event_hooks["request"].append(seen)
    # each poll takes 4 s; re-ask after 10 s, then 20 s more, ...; give up at 40 s
    clock = itertools.count(0.0, 4.0)
    with pytest.raises(
        WaitTimeoutError, match="0 of 4 windows computed after waiting 40 s"
    ) as caught:
        wait_for_windows(
            api,
            model="sim",
            plans=plans,
            timeout=40,
            rerequest=10,
            clock=lambda: float(next(clock)),
            sleep=lambda _s: None,
        )
    first = f"{plans[0].start:%Y-%m-%dT%H:%M:%S}Z"
    assert recomputes == [first, first, first]  # at 0, 12 and 32 s: the pause doubles
    assert caught.value.records == {}


def test_no_wait_reads_once(api: Api) -> None:
    plans = _plans()
    _create(api, plans)
    assert wait_for_windows(api, model="sim", plans=plans, timeout=0) == {}


def _text(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def test_summary_lists_every_planned_window(api: Api, scheduler: WindowScheduler) -> None:
    plans = _plans()
    _create(api, plans)
    _send(api, plans[:3], seed=3)
    records: dict[datetime, Any] = wait_for_windows(
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
        assert fields[7 : 7 + len(expected)] == expected
        assert fields[7 + len(expected) :] == [str(record["unlabelled"]), *_estimate(record)]
    assert lines[4].split()[2:] == ["prior", "not", "computed"]
    reference = records[plans[0].start]["reference"]
    assert lines[-1] == (
        f"reference {reference['start']} to {reference['end']}: n {2 * PER_WINDOW},"
        f" prior {reference['prior']:.4f}, AP {reference['regular']['average_precision']:.3f}"
    )


def test_late_labels_keep_the_estimate_beside_the_measured_values(
    api: Api, scheduler: WindowScheduler
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
    before: dict[datetime, Any] = wait_for_windows(
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
    after: dict[datetime, Any] = wait_for_windows(
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
    assert summary[len(plans)].split()[-3:] == _estimate(after[plans[-1].start])


def test_a_second_stream_in_the_same_windows_stops_the_wait_at_once(
    api: Api, scheduler: WindowScheduler
) -> None:
    plans = _plans()
    _create(api, plans)
    for seed in (1, 2):  # two runs, other ids, same windows
        _send(api, plans, seed=seed)
    scheduler.tick()
    slept: list[float] = []
    with pytest.raises(MixedWindowsError, match="4 of 4 windows hold more predictions") as caught:
        wait_for_windows(api, model="sim", plans=plans, timeout=60, sleep=slept.append)
    assert slept == []
    assert isinstance(caught.value, WaitTimeoutError)
    assert all(r["n"] == 2 * PER_WINDOW for r in caught.value.records.values())


def test_an_existing_model_name_gives_the_first_free_suffix(api: Api) -> None:
    from calmon.commands.simulate import _free_name

    assert _free_name(api, "sim") == "sim"
    _create(api, _plans())
    assert _free_name(api, "sim") == "sim-2"
    status, _ = api.request("PUT", "/v1/models/sim-2", content=b"{}")
    assert status == 201
    assert _free_name(api, "sim") == "sim-3"
    long = "m" * 63
    status, _ = api.request("PUT", f"/v1/models/{long}", content=b"{}")
    assert status == 201
    assert _free_name(api, long) == "m" * 61 + "-2"


def test_the_class_ratio_moves_beyond_three_standard_errors() -> None:
    # 0.05 against 0.05 +- 3 se of the difference (se = 0.00218 at n = 20,000 each)
    assert not _ratio_moved(1000, 20_000, 1000, 20_000)
    assert not _ratio_moved(1130, 20_000, 1000, 20_000)
    assert _ratio_moved(1140, 20_000, 1000, 20_000)
    assert _ratio_moved(160, 20_000, 1000, 20_000)
    assert not _ratio_moved(0, 0, 1000, 20_000)


def _verdict_plans() -> list[WindowPlan]:
    return plan_windows(
        phases=[PHASES["stable"], PHASES["prior"], PHASES["likelihood"]],
        window="1h",
        windows_per_phase=2,
        per_window=20_000,
        now=datetime(2026, 11, 1, 14, 30, tzinfo=UTC),
    )


def _verdict_record(n_pos: int, likelihood: float, bounds: list[float] | None) -> Any:
    """A window record with the fields the verdicts read."""
    return {
        "n": 20_000,
        "n_pos": n_pos,
        "unlabelled": 0,
        "reference": {"n": 40_000, "n_pos": 2_000, "prior": 0.05},
        "split": {
            "average_precision": {
                "total": likelihood,
                "prior": 0.0,
                "likelihood": likelihood,
                "prior_interval": None,
                "likelihood_interval": bounds,
            }
        },
        "estimated": None,
    }


def test_verdicts_say_in_words_what_moved_beside_the_truth() -> None:
    plans = _verdict_plans()
    truth = truth_document(
        plans=plans,
        positives=[1000] * len(plans),
        model="sim",
        window="1h",
        seed=1,
        threshold=0.5,
        score_map=SCORE_MAP,
    )
    true_drift = truth["windows"][4]["average_precision_change"]["likelihood"]
    records = {
        plans[0].start: _verdict_record(1000, 0.0, [-0.05, 0.05]),
        plans[1].start: _verdict_record(1000, 0.0, [-0.05, 0.05]),
        plans[2].start: _verdict_record(150, 0.004, [-0.02, 0.03]),
        plans[3].start: _verdict_record(170, 0.0, [-0.04, 0.03]),
        plans[4].start: _verdict_record(1010, -0.24, [-0.26, -0.22]),
        plans[5].start: _verdict_record(990, -0.226, [-0.25, -0.20]),
    }
    assert format_verdicts(plans, records, truth) == [
        "prior: class ratio x0.16 (0.0500 -> 0.0080, true 0.050 -> 0.008); likelihood part of AP"
        " +0.002 [-0.030, +0.030] (true +0.000): the class ratio moved; the model did not change",
        "likelihood: class ratio x1.00 (0.0500 -> 0.0500, true 0.050 -> 0.050); likelihood part"
        f" of AP -0.233 [-0.255, -0.210] (true {true_drift:+.3f}): the model got worse; the class"
        " ratio did not move",
    ]
    assert -0.24 < true_drift < -0.22
    # both at once; no interval; nothing computed
    records[plans[4].start]["n_pos"] = records[plans[5].start]["n_pos"] = 3000
    for plan in plans[2:4]:
        records[plan.start]["split"]["average_precision"]["likelihood_interval"] = None
    del records[plans[5].start]
    lines = format_verdicts(plans, records, truth)
    assert lines[0].endswith(
        "[-] (true +0.000): the class ratio moved; no interval of the likelihood part to tell"
        " whether the model changed"
    )
    assert lines[1].startswith("likelihood: class ratio x3.00 (0.0500 -> 0.1500,")
    assert lines[1].endswith(": both: the class ratio moved and the model got worse")
    assert format_verdicts(plans, {}, truth) == [
        "prior: not computed, no verdict",
        "likelihood: not computed, no verdict",
    ]


def _estimate(record: Any) -> list[str]:
    """The summary's last tokens for a record's estimate: ratio, interval, verdict."""
    estimated = record["estimated"]
    if estimated is None:
        return ["-"]
    lower, upper = estimated["positive_class_ratio_interval"]
    return [
        f"{estimated['positive_class_ratio']:.4f}",
        f"[{lower:.4f},{upper:.4f}]",
        estimated["verdict"],
    ]


def test_verdicts_before_the_labels_land_use_the_estimate() -> None:
    plans = _verdict_plans()[:4]
    truth = truth_document(
        plans=plans,
        positives=[1000] * 4,
        model="sim",
        window="1h",
        seed=1,
        threshold=0.5,
        score_map=SCORE_MAP,
    )
    records = {plan.start: _verdict_record(1000, 0.0, None) for plan in plans}
    for plan, estimate in zip(plans[2:], (0.007, 0.009), strict=True):
        records[plan.start].update(n=0, n_pos=0, unlabelled=20_000, split=None)
        records[plan.start]["estimated"] = {
            "positive_class_ratio": estimate,
            "label_shift": {"p_value": 0.3, "holds": True, "method": "cvm_mixture_bootstrap"},
        }
    assert format_verdicts(plans, records, truth) == [
        "prior: no labels yet; estimated class ratio x0.16 (0.0500 -> 0.0080, true 0.050 ->"
        " 0.008); scores consistent with a class-ratio change; a fall may also be positives"
        " scoring lower, which scores alone cannot tell; the likelihood part needs labels"
    ]
    for plan in plans[2:]:
        records[plan.start]["estimated"]["positive_class_ratio"] = 0.1
    assert format_verdicts(plans, records, truth)[0].endswith(
        "; scores consistent with a class-ratio change; a rise may also be negatives scoring"
        " like positives, which scores alone cannot tell; the likelihood part needs labels"
    )
    records[plans[3].start]["estimated"]["label_shift"]["holds"] = False
    assert format_verdicts(plans, records, truth) == [
        "prior: no labels yet; scores changed in a way a class-ratio change does not explain"
        " (label-shift check rejects in 1 of 2 windows): the model or its inputs changed,"
        " labels needed (true 0.050 -> 0.008)"
    ]


def test_no_recompute_is_asked_again_while_windows_complete(
    api: Api, scheduler: WindowScheduler
) -> None:
    """On a slow server every poll sees one more window done: asking again would only make it
    compute windows twice."""
    plans = _plans()
    _create(api, plans)
    _send(api, plans[:2], seed=4)
    assert scheduler.tick().computed == 2
    pending = list(plans[2:])
    recomputes: list[str] = []

    def seen(request: httpx.Request) -> None:
        if request.url.path.endswith("/recompute"):
            recomputes.append(request.url.params["start"])

    def next_window(_seconds: float) -> None:
        if pending:
            _send(api, [pending.pop(0)], seed=4)
        scheduler.tick()

    api.http.event_hooks["request"].append(seen)
    clock = itertools.count(0.0, 8.0)  # each poll takes 8 s; re-ask after 10 s without progress
    records = wait_for_windows(
        api,
        model="sim",
        plans=plans,
        timeout=60,
        rerequest=10,
        clock=lambda: float(next(clock)),
        sleep=next_window,
    )
    assert list(records) == [p.start for p in plans]
    assert recomputes == [f"{plans[0].start:%Y-%m-%dT%H:%M:%S}Z"]
