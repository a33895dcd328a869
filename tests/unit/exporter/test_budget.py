"""The series budget: which windows a snapshot exports, and that it never exceeds the budget."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from calmon.exporter.snapshot import (
    PER_MODEL_SERIES,
    QUIET_SEGMENT_WINDOWS,
    Candidate,
    build_snapshot,
    select_windows,
    window_series_bound,
)
from harness.records import (
    LENGTH,
    START,
    key,
    make_record,
    per_window_series,
    window,
)

OMITTED = "calmon_exporter_segments_omitted"


@pytest.mark.parametrize("probability", [True, False])
@pytest.mark.parametrize("pi0", range(6))
def test_the_bound_of_a_window_is_the_contract_count(pi0: int, probability: bool) -> None:
    assert window_series_bound(pi0=pi0, probability=probability) == per_window_series(
        configured_pi0=pi0, probability=probability
    )


def _candidate(model: str, segment: str, position: int, series: int, ago: int = 0) -> Candidate:
    return Candidate(
        model_id=hash(model) % 1000,
        model=model,
        segment=segment,
        position=position,
        start=START - ago * LENGTH,
        end=START + LENGTH - ago * LENGTH,
        series=series,
    )


def _models(spec: dict[str, tuple[int, int]]) -> list[Candidate]:
    """model -> (series of one window, tracked segments): a * window and the segments."""
    out = []
    for model, (series, segments) in spec.items():
        out.append(_candidate(model, "*", -1, series))
        out += [_candidate(model, f"s{p}", p, series) for p in range(segments)]
    return out


def _chosen(candidates: list[Candidate], max_series: int) -> tuple[list[str], dict[str, int]]:
    selection = select_windows(candidates, max_series=max_series)
    return [f"{c.model}/{c.segment}" for c in selection.windows], selection.omitted


def test_segments_are_taken_in_rounds_of_tracked_position_across_models() -> None:
    candidates = _models({"b": (20, 2), "a": (10, 3), "c": (10, 0)})
    stars = 20 + 10 + 10 + 3 * PER_MODEL_SERIES
    assert _chosen(candidates, stars) == (["a/*", "b/*", "c/*"], {"a": 3, "b": 2, "c": 0})
    assert _chosen(candidates, stars + 10) == (
        ["a/*", "b/*", "c/*", "a/s0"],
        {"a": 2, "b": 2, "c": 0},
    )
    # b's first segment does not fit, a's second does: b stops, a goes on
    assert _chosen(candidates, stars + 29) == (
        ["a/*", "b/*", "c/*", "a/s0", "a/s1"],
        {"a": 1, "b": 2, "c": 0},
    )
    assert _chosen(candidates, stars + 30) == (
        ["a/*", "b/*", "c/*", "a/s0", "b/s0"],
        {"a": 2, "b": 1, "c": 0},
    )
    everything = stars + 3 * 10 + 2 * 20
    assert _chosen(candidates, everything)[1] == {"a": 0, "b": 0, "c": 0}
    # the last round holds a's third segment only
    assert _chosen(candidates, everything - 1)[1] == {"a": 1, "b": 0, "c": 0}


def test_the_order_of_the_candidates_does_not_matter() -> None:
    candidates = _models({"b": (20, 4), "a": (10, 5)})
    for budget in (0, 70, 100, 150):
        assert _chosen(candidates, budget) == _chosen(candidates[::-1], budget)


def test_star_windows_are_kept_whatever_the_budget() -> None:
    candidates = _models({"a": (100, 2), "b": (100, 1)})
    assert _chosen(candidates, 0) == (["a/*", "b/*"], {"a": 2, "b": 1})


def test_quiet_segments_are_neither_chosen_nor_counted_nor_charged() -> None:
    candidates = [
        _candidate("a", "*", -1, 10),
        _candidate("a", "gone", 0, 10, ago=QUIET_SEGMENT_WINDOWS + 1),
        _candidate("a", "live", 1, 10, ago=QUIET_SEGMENT_WINDOWS),
        _candidate("a", "later", 2, 10),
    ]
    assert _chosen(candidates, 10 + PER_MODEL_SERIES + 10) == (["a/*", "a/live"], {"a": 1})


def test_the_snapshot_holds_the_chosen_windows_and_the_omitted_counts() -> None:
    windows = [window("m", make_record(segment=s, pi0=(0.5,))) for s in ("*", "x", "y")]
    one = per_window_series(configured_pi0=1)
    snapshot = build_snapshot(windows[:2], max_series=10**6, omitted={"m": 1})
    series = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in snapshot.families
        for sample in family.samples
    }
    assert series[key(OMITTED, model="m")] == 1
    assert snapshot.series == len(series) == 2 * one + 1 + 1
    assert {dict(labels).get("segment") for _, labels in series} == {"*", "x", None}


def test_a_window_with_more_series_than_its_bound_is_dropped_at_the_budget() -> None:
    # the model's pi0 list was shortened after x was computed: x holds more series than the
    # bound its model's configuration gives, and the budget still holds
    star = window("m", make_record(segment="*", pi0=()))
    wide = window("m", make_record(segment="x", pi0=(0.1, 0.2, 0.3)))
    narrow = window("m", make_record(segment="y", pi0=()))
    bound = per_window_series(configured_pi0=0)
    budget = 2 * bound + PER_MODEL_SERIES
    snapshot = build_snapshot([star, wide, narrow], max_series=budget, omitted={"m": 0})
    assert snapshot.series <= budget
    segments = {
        sample.labels.get("segment") for family in snapshot.families for sample in family.samples
    }
    # y comes after x in m's order, so it is left out with it
    assert segments == {"*", None}
    omitted = [s for f in snapshot.families if f.name == OMITTED for s in f.samples]
    assert [s.value for s in omitted] == [2]
    assert snapshot.windows == 1


def test_without_a_budget_every_window_and_no_omitted_series() -> None:
    windows = [window("m", make_record(segment=s)) for s in ("*", "x")]
    snapshot = build_snapshot(windows)
    assert OMITTED not in {f.name for f in snapshot.families}
    assert snapshot.windows == 2


def test_candidates_keep_their_window_when_chosen() -> None:
    candidate = _candidate("a", "*", -1, 5)
    moved = replace(candidate, start=candidate.start - timedelta(days=1))
    assert select_windows([moved], max_series=0).windows == (moved,)
