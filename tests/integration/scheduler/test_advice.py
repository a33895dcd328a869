"""Advice in window records, computed by the scheduler: measured at the window's class ratio
under a prior shift, marked as resting on a broken assumption under a likelihood drift; without
labels, at the label-free estimate where its label-shift check holds, withheld with a reason
where it does not, and where a window of this size could not hold the target. SQLite and
PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from calmon.metrics.advice import PRECISION_TOLERANCE, advise
from calmon.metrics.label_free import label_shift_reference
from calmon.metrics.ranking import rank
from calmon.metrics.recalibration import MAX_KNOTS, calibration_map
from tests.integration.scheduler.helpers import (
    Batch,
    Env,
    SettledClock,
    by_window,
    create_model,
    iso,
    make_batch,
    send,
    windows,
)

TARGET = 0.6
PER_WINDOW = 3000


def _start(clock: SettledClock, index: int) -> datetime:
    """Start of the index-th of six consecutive closed 5-minute windows (0 = oldest)."""
    return clock.recent(7 - index)


def _window(
    clock: SettledClock, index: int, *, prior: float, shift: float = 1.5, unlabelled: float = 0.0
) -> Batch:
    return make_batch(
        prefix=f"w{index}",
        start=_start(clock, index),
        count=PER_WINDOW,
        spacing=timedelta(seconds=0.1),
        seed=100 + index,
        prior=prior,
        shift=shift,
        unlabelled=unlabelled,
    )


def test_advice_follows_the_prior_and_flags_a_likelihood_drift(
    env: Env, clock: SettledClock
) -> None:
    create_model(
        env.client,
        "fraud",
        window="5m",
        grace="0s",
        reference={"kind": "fixed", "start": iso(_start(clock, 0)), "end": iso(_start(clock, 2))},
        objective={"target_precision": TARGET},
    )
    batches = [
        _window(clock, 0, prior=0.3),
        _window(clock, 1, prior=0.3),
        _window(clock, 2, prior=0.1),
        _window(clock, 3, prior=0.3, shift=0.5),
        _window(clock, 4, prior=0.1, unlabelled=0.5),
        _window(clock, 5, prior=0.3, shift=3.5, unlabelled=0.5),
    ]
    for batch in batches:
        send(env.client, "fraud", batch)
    assert env.scheduler().tick().computed == 6
    stars = by_window(windows(env.client, "fraud"))
    scores = np.concatenate([b.scores for b in batches[:2]])
    labels = np.concatenate([b.labels for b in batches[:2]])

    stable, shifted = stars[iso(_start(clock, 1))]["advice"], stars[iso(_start(clock, 2))]["advice"]
    chosen = {}
    for advice, batch in ((stable, batches[1]), (shifted, batches[2])):
        assert advice["prior_source"] == "measured"
        assert advice["prior"] == float(batch.labels.mean())
        assert advice["assumption"]["method"] == "ks_by_class"
        assert advice["assumption"]["holds"] is True
        assert advice["configured_threshold"] == 0.5
        expected = advise(
            rank(scores, labels), prior=advice["prior"], objective={"target_precision": TARGET}
        )
        assert expected is not None
        chosen[id(advice)] = expected.threshold
    assert stable["reason"] is None
    assert stable["threshold"] == chosen[id(stable)]
    assert stable["expected"]["precision"] >= TARGET
    assert stable["expected"]["cost"] is None
    intervals = stable["expected_intervals"]
    for name in ("precision", "recall", "alert_rate"):
        assert intervals[name][0] <= stable["expected"][name] <= intervals[name][1]
    assert intervals["precision"][0] >= TARGET - PRECISION_TOLERANCE
    assert intervals["cost"] is None
    # fewer positives: a higher threshold keeps the precision, but flags too few of a 3000-row
    # window's predictions for its precision to hold the target: withheld, saying so
    assert chosen[id(shifted)] > stable["threshold"]
    assert shifted["threshold"] is None
    assert shifted["expected_intervals"] is None
    assert shifted["reason"].startswith("the target would not hold on a window of this size")
    assert f"{chosen[id(shifted)]:.4g}" in shifted["reason"]
    assert f"of a window's {PER_WINDOW} predictions" in shifted["reason"]

    drifted = stars[iso(_start(clock, 3))]["advice"]
    assert drifted["prior_source"] == "measured"
    assert drifted["assumption"]["holds"] is False
    assert drifted["assumption"]["p_value"] < 1e-6

    # half the labels missing: the label-free estimate, its label-shift check holding
    record = stars[iso(_start(clock, 4))]
    estimated = record["advice"]
    assert record["estimated"]["label_shift"]["holds"] is True
    assert estimated["prior_source"] == "estimated"
    assert estimated["prior"] == record["estimated"]["positive_class_ratio"]
    assert estimated["assumption"] == {**record["estimated"]["label_shift"], "holds": True}
    assert estimated["threshold"] is None
    assert estimated["reason"].startswith("the target would not hold on a window of this size")
    # half the labels missing and the positives' scores moved: the check fails, no advice
    record = stars[iso(_start(clock, 5))]
    withheld = record["advice"]
    assert record["estimated"]["label_shift"]["holds"] is False
    assert withheld["threshold"] is None
    assert withheld["prior_source"] is None
    assert "label-shift check does not hold" in withheld["reason"]


def test_calibration_route_serves_the_map_at_the_window_prior(
    env: Env, clock: SettledClock
) -> None:
    create_model(
        env.client,
        "fraud",
        window="5m",
        grace="0s",
        reference={"kind": "fixed", "start": iso(_start(clock, 0)), "end": iso(_start(clock, 2))},
    )
    batches = [
        _window(clock, 0, prior=0.3),
        _window(clock, 1, prior=0.3),
        _window(clock, 2, prior=0.1),
        _window(clock, 4, prior=0.1, unlabelled=0.5),
        _window(clock, 5, prior=0.3, shift=3.5, unlabelled=0.5),
    ]
    for batch in batches:
        send(env.client, "fraud", batch)
    assert env.scheduler().tick().computed == 5
    response = env.client.get(
        "/v1/models/fraud/calibration",
        params={"window": iso(_start(clock, 2) + timedelta(seconds=7))},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["start"], body["segment"], body["method"]) == (
        iso(_start(clock, 2)),
        "*",
        "isotonic",
    )
    assert body["prior"] == float(batches[2].labels.mean())
    assert body["prior_source"] == "measured"
    scores = np.concatenate([b.scores for b in batches[:2]])
    labels = np.concatenate([b.labels for b in batches[:2]])
    levels = label_shift_reference(rank(scores, labels))
    assert levels is not None
    assert body["reference_prior"] == levels.prior
    expected = calibration_map(levels, prior=body["prior"], score_kind="probability")
    assert np.array_equal(np.array(body["knots"]), expected.knots)
    assert 2 <= len(body["knots"]) <= MAX_KNOTS
    # moved to a lower class ratio: every probability is below the reference's
    at_reference = calibration_map(levels, prior=levels.prior, score_kind="probability")
    inner = (expected.knots[:, 1] > 0) & (expected.knots[:, 1] < 1)
    assert np.all(expected.knots[inner, 1] < at_reference.knots[inner, 1])

    missing = env.client.get(
        "/v1/models/fraud/calibration", params={"window": iso(_start(clock, 3))}
    )
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "window_not_found"
    estimated = env.client.get(
        "/v1/models/fraud/calibration", params={"window": iso(_start(clock, 4))}
    )
    assert estimated.status_code == 200, estimated.text
    assert estimated.json()["prior_source"] == "estimated"
    unlabelled = env.client.get(
        "/v1/models/fraud/calibration", params={"window": iso(_start(clock, 5))}
    )
    assert unlabelled.status_code == 409
    assert unlabelled.json()["error"]["code"] == "calibration_unavailable"
    assert "label-shift check" in unlabelled.json()["error"]["message"]
    no_window = env.client.get("/v1/models/fraud/calibration")
    assert no_window.status_code == 422
    unknown = env.client.get(
        "/v1/models/nope/calibration", params={"window": iso(_start(clock, 2))}
    )
    assert unknown.status_code == 404
