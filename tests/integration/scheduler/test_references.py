"""Reference sets: pooled rankings equal the rankings of the pooled rows; trailing and fixed
references hold the right predictions; no split before a reference exists; a fixed reference
is built once per data version. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from calmon.catalogue import SPLIT_METRICS
from calmon.db.models import Model, WindowState
from calmon.metrics import Pool, evaluate
from calmon.metrics.evaluation import evaluate_ranked
from calmon.metrics.prepared import pi0_key
from calmon.metrics.ranking import RankingAccumulator, rank
from calmon.metrics.split import PART_INTERVAL_METRICS, ap_parts_published
from calmon.services.windows.planning import (
    FIXED_REFRESH_WINDOWS,
    refresh_for_fixed_reference,
    scan_model,
)
from tests.integration.scheduler.helpers import (
    Batch,
    Env,
    SettledClock,
    by_window,
    create_model,
    floor,
    iso,
    make_batch,
    send,
    send_labels,
    windows,
)

FIVE_MINUTES = timedelta(minutes=5)
#: a scan margin no test outlasts: the change records of the period stay, and with them the key
#: of its reference (a record a scan deletes changes it)
KEPT_RECORDS = 3600.0
REGULAR = ("precision", "recall", "f1", "roc_auc", "average_precision", "pr_gain_auc", "brier")


def _start(clock: SettledClock, index: int) -> datetime:
    """Start of the index-th of six consecutive closed 5-minute windows (0 = oldest)."""
    return clock.recent(7 - index)


def _six_windows(env: Env, model: str, *, segments: list[str | None] | None = None) -> Batch:
    batch = make_batch(
        prefix="p",
        start=_start(env.clock, 0),
        count=6 * 60,
        spacing=timedelta(seconds=5),
        seed=11,
        segments=segments,
    )
    send(env.client, model, batch)
    return batch


def _pooled(
    clock: SettledClock, batch: Batch, first: int, last: int, segment: str | None = None
) -> Batch:
    return batch.where(_start(clock, first), _start(clock, last) + FIVE_MINUTES, segment)


def _assert_regular(actual: dict[str, Any], part: Batch) -> None:
    scores, labels = part.labelled()
    expected = evaluate(scores, labels, threshold=0.5, score_kind="probability")["regular"]
    for name in REGULAR:
        assert actual[name] == pytest.approx(expected[name], abs=1e-9), name


@pytest.mark.parametrize("score_kind", ["probability", "score"])
def test_a_ranking_accumulated_by_parts_equals_the_ranking_of_the_pooled_rows(
    score_kind: str,
) -> None:
    rng = np.random.default_rng(5)
    parts = []
    for size in (500, 0, 1, 2000, 37):
        labels = (rng.random(size) < 0.05).astype(np.int8)
        scores = np.round(rng.random(size) * 0.6 + 0.3 * labels, 2).astype(np.float64)  # ties
        parts.append((scores, labels))
    scores = np.concatenate([s for s, _ in parts])
    labels = np.concatenate([y for _, y in parts])
    positives = np.sort(scores[labels == 1])
    accumulator = RankingAccumulator(positives)
    pool = Pool(positives, threshold=0.5, score_kind=score_kind)
    for part_scores, part_labels in parts:
        negatives = np.sort(part_scores[part_labels == 0])
        accumulator.add_negatives(negatives)
        pool.add_negatives(negatives)
    pooled = accumulator.ranking()
    direct = rank(scores, labels)
    for name in ("thresholds", "pos", "neg_tied", "neg_above"):
        np.testing.assert_array_equal(getattr(pooled, name), getattr(direct, name))
    assert (pooled.neg_below, pooled.n_pos, pooled.n_neg) == (
        direct.neg_below,
        direct.n_pos,
        direct.n_neg,
    )
    got = evaluate_ranked(
        pool.ranking(), pool.sums, threshold=0.5, pi0=(0.2,), score_kind=score_kind
    )
    want = evaluate(scores, labels, threshold=0.5, pi0=(0.2,), score_kind=score_kind)  # type: ignore[arg-type]
    assert set(got["regular"]) == set(want["regular"])
    for name, value in want["regular"].items():
        assert got["regular"][name] == pytest.approx(value, rel=1e-12, abs=1e-12), name
    assert got["calibrated"]["0.2"] == pytest.approx(want["calibrated"]["0.2"], rel=1e-12)


def test_trailing_reference_pools_the_previous_computed_windows(
    env: Env, clock: SettledClock
) -> None:
    create_model(
        env.client,
        "fraud",
        window="5m",
        grace="0s",
        pi0=[0.1],
        reference={"kind": "trailing", "windows": 3},
    )
    batch = _six_windows(env, "fraud", segments=["a", "b"])
    assert env.scheduler().tick().computed == 6
    records = windows(env.client, "fraud")
    stars = by_window(records)
    assert len(stars) == 6

    first = stars[iso(_start(clock, 0))]
    assert first["reference"] is None
    assert first["split"] is None
    assert first["calibrated"]["reference"] is None
    assert first["intervals"]["calibrated"]["reference"] is None
    assert set(first["calibrated"]) == {"reference", "0.1"}

    second = stars[iso(_start(clock, 1))]
    assert second["reference"]["windows"] == 1
    assert (second["reference"]["start"], second["reference"]["end"]) == (
        iso(_start(clock, 0)),
        iso(_start(clock, 1)),
    )
    _assert_regular(second["reference"]["regular"], _pooled(clock, batch, 0, 0))

    last = stars[iso(_start(clock, 5))]
    reference = last["reference"]
    pooled = _pooled(clock, batch, 2, 4)
    _, pooled_labels = pooled.labelled()
    assert reference["kind"] == "trailing"
    assert reference["windows"] == 3
    assert (reference["start"], reference["end"]) == (iso(_start(clock, 2)), iso(_start(clock, 5)))
    assert (reference["n"], reference["n_pos"]) == (pooled_labels.size, int(pooled_labels.sum()))
    assert reference["prior"] == pytest.approx(pooled_labels.mean(), abs=1e-15)
    _assert_regular(reference["regular"], pooled)

    # The window calibrated at the reference prior, and the split against the reference: the
    # mean of both orders, the reference calibrated at the window's prior from the pooled rows.
    scores, labels = batch.where(_start(clock, 5), _start(clock, 5) + FIVE_MINUTES).labelled()
    own = evaluate(
        scores, labels, threshold=0.5, pi0=[reference["prior"]], score_kind="probability"
    )
    at_reference = own["calibrated"][pi0_key(reference["prior"])]
    assert last["calibrated"]["reference"] == pytest.approx(at_reference, abs=1e-12)
    pooled_scores, _ = pooled.labelled()
    ref_at_window = evaluate(
        pooled_scores,
        pooled_labels,
        threshold=0.5,
        pi0=[last["prior"]],
        score_kind="probability",
    )["calibrated"][pi0_key(last["prior"])]
    for name in SPLIT_METRICS:
        part = last["split"][name]
        a, b = last["regular"][name], at_reference[name]
        c, d = ref_at_window[name], reference["regular"][name]
        assert part["total"] == pytest.approx(a - d, abs=1e-12)
        assert part["prior"] == pytest.approx(0.5 * ((a - b) + (c - d)), abs=1e-12)
        assert part["likelihood"] == pytest.approx(0.5 * ((b - d) + (a - c)), abs=1e-12)
        assert part["prior"] + part["likelihood"] == part["total"]
        published = name in PART_INTERVAL_METRICS and (
            name != "average_precision" or ap_parts_published(last["n_pos"], reference["n_pos"])
        )
        for bounds in (part["prior_interval"], part["likelihood_interval"]):
            if not published:
                assert bounds is None
                continue
            low, high = bounds
            assert low <= high
    assert last["intervals"]["calibrated"]["reference"]["average_precision"] is not None

    # A segment is compared with the same windows restricted to that segment.
    segment = by_window(records, "a")[iso(_start(clock, 5))]
    assert segment["reference"]["windows"] == 3
    _assert_regular(segment["reference"]["regular"], _pooled(clock, batch, 2, 4, "a"))


def _fixed_over_two_windows(env: Env, model: str) -> tuple[datetime, datetime]:
    """Create ``model`` with a fixed reference over parts of windows 1 and 2 (grace 0s);
    returns the period."""
    period_start = _start(env.clock, 1) + timedelta(minutes=2)
    period_end = _start(env.clock, 2) + timedelta(minutes=3)
    create_model(
        env.client,
        model,
        window="5m",
        grace="0s",
        reference={"kind": "fixed", "start": iso(period_start), "end": iso(period_end)},
    )
    return period_start, period_end


def test_fixed_reference_is_the_period_and_is_built_once_per_data_version(
    env: Env, clock: SettledClock
) -> None:
    period_start, period_end = _fixed_over_two_windows(env, "fraud")
    batch = _six_windows(env, "fraud")
    # one scan per tick: the refresh below must wait for the next tick, however slow the machine;
    # and no change record ages out during the test (that changes the key: one build more)
    scheduler = env.scheduler(scheduler_interval=600.0, scheduler_scan_margin=KEPT_RECORDS)
    assert scheduler.tick().computed == 6
    assert scheduler.cache.builds == 1
    stars = by_window(windows(env.client, "fraud"))
    period = batch.where(period_start, period_end)
    for record in stars.values():
        reference = record["reference"]
        assert reference["kind"] == "fixed"
        assert (reference["start"], reference["end"]) == (iso(period_start), iso(period_end))
        assert reference["windows"] is None
        assert reference["n"] == len(period.items)
        _assert_regular(reference["regular"], period)
        assert record["split"] is not None

    # A label changes inside the period: the next computation rebuilds the reference.
    index = next(i for i, item in enumerate(period.items) if item.get("label") == 0)
    send_labels(env.client, "fraud", {period.items[index]["id"]: 1})
    assert scheduler.tick().computed == 1  # the window holding that prediction
    assert scheduler.cache.builds == 2
    changed = iso(floor(period.ts[index], FIVE_MINUTES))
    n_pos = int(period.labelled()[1].sum()) + 1
    stars = by_window(windows(env.client, "fraud"))
    assert stars[changed]["reference"]["n_pos"] == n_pos

    # Then the windows outside the period, computed before the change, are refreshed once
    # (grace 0s: the period is quiet at once); the period's other window is left alone.
    outside = [iso(_start(clock, i)) for i in (0, 3, 4, 5)]
    for key in outside:
        assert stars[key]["reference"]["n_pos"] == n_pos - 1
    assert scheduler.tick().computed == len(outside)
    assert scheduler.cache.builds == 2
    stars = by_window(windows(env.client, "fraud"))
    for key in outside:
        assert stars[key]["reference"]["n_pos"] == n_pos
        assert stars[key]["split"] is not None
    (untouched,) = {iso(_start(clock, 1)), iso(_start(clock, 2))} - {changed}
    assert stars[untouched]["reference"]["n_pos"] == n_pos - 1
    assert scheduler.tick().computed == 0
    assert scheduler.cache.builds == 2


def test_a_fixed_reference_is_built_once_when_the_leader_scans_between_computations(
    env: Env,
) -> None:
    _fixed_over_two_windows(env, "fraud")
    _six_windows(env, "fraud")
    # An interval this short plans again, and the leader scans again, before every window.
    scheduler = env.scheduler(scheduler_interval=1e-6, scheduler_scan_margin=KEPT_RECORDS)
    assert scheduler.tick().computed == 6
    assert scheduler.cache.builds == 1
    states = env.states(env.model_id("fraud"))
    assert {(s.version, s.computed_version) for s in states.values()} == {(1, 1)}
    assert scheduler.tick().computed == 0
    assert scheduler.cache.builds == 1


def test_fixed_reference_refresh_waits_for_a_quiet_period_and_reaches_back_a_bounded_span(
    env: Env,
    clock: SettledClock,
) -> None:
    period_start, period_end = _start(clock, 1), _start(clock, 2)
    create_model(
        env.client,
        "fraud",
        window="5m",
        grace="10m",
        reference={"kind": "fixed", "start": iso(period_start), "end": iso(period_end)},
    )
    _six_windows(env, "fraud")
    model_id = env.model_id("fraud")
    with env.session_factory() as session:
        model = session.get(Model, model_id)
        assert model is not None
        # Mark every window computed at an old checkpoint, the period's window later.
        now = datetime.now(UTC)
        assert scan_model(session, model=model, now=now, margin=FIVE_MINUTES).new == 6
        early, late = now - timedelta(minutes=40), now - timedelta(minutes=20)
        for state in session.scalars(select(WindowState).where(WindowState.model_id == model_id)):
            state.computed_version = state.version
            state.checkpoint_at = late if state.starts_at == period_start else early
        session.commit()

        def refreshed(at: datetime) -> int:
            nested = session.begin_nested()
            try:
                return refresh_for_fixed_reference(session, model=model, now=at)
            finally:
                nested.rollback()

        # Quiet for 20 minutes, more than the grace: every window outside the period.
        assert refreshed(now) == 5
        # Not quiet for the grace yet: nothing.
        assert refreshed(late + timedelta(minutes=5)) == 0
        # Only the last FIXED_REFRESH_WINDOWS window lengths are reached.
        assert refreshed(_start(clock, 5) + FIXED_REFRESH_WINDOWS * FIVE_MINUTES) == 1
        # Once requested, the windows are pending: no second request.
        assert refresh_for_fixed_reference(session, model=model, now=now) == 5
        assert refresh_for_fixed_reference(session, model=model, now=now) == 0
        # A window of the period pending again: wait for it.
        for state in session.scalars(select(WindowState).where(WindowState.model_id == model_id)):
            state.computed_version = state.version
            if state.starts_at == period_start:
                state.computed_version -= 1
        session.flush()
        assert refresh_for_fixed_reference(session, model=model, now=now) == 0
        session.rollback()


def test_no_split_without_a_reference(env: Env, clock: SettledClock) -> None:
    create_model(
        env.client,
        "empty-period",
        window="5m",
        grace="0s",
        reference={"kind": "fixed", "start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"},
    )
    create_model(env.client, "unlabelled-before", window="5m", grace="0s")
    _six_windows(env, "empty-period")
    first = make_batch(
        prefix="u",
        start=_start(clock, 0),
        count=30,
        spacing=timedelta(seconds=5),
        seed=2,
        unlabelled=1.0,
    )
    second = make_batch(
        prefix="l", start=_start(clock, 1), count=30, spacing=timedelta(seconds=5), seed=3
    )
    send(env.client, "unlabelled-before", first)
    send(env.client, "unlabelled-before", second)
    env.scheduler().tick()
    for record in windows(env.client, "empty-period"):
        assert record["reference"]["n"] == 0
        assert record["reference"]["regular"]["roc_auc"] is None
        assert record["split"] is None
        assert record["calibrated"]["reference"] is None
        assert record["regular"]["roc_auc"] is not None
    records = by_window(windows(env.client, "unlabelled-before"))
    labelled = records[iso(_start(clock, 1))]
    # The only earlier window has no label yet: a reference of nothing, so no split.
    assert labelled["reference"]["n"] == 0
    assert labelled["reference"]["prior"] is None
    assert labelled["split"] is None
    assert labelled["calibrated"]["reference"] is None
    assert records[iso(_start(clock, 0))]["n"] == 0
    assert records[iso(_start(clock, 0))]["unlabelled"] == 30
