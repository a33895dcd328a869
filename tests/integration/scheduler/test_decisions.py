"""Pooled decisions: each window's ``decision`` pools the windows back to the model's
``decision.min_positives`` from what they stored, and equals the decision of the pooled rows
computed directly; a trailing reference is the one before the pooled windows; the setting is
validated like the model's other settings. SQLite and PostgreSQL."""

from __future__ import annotations

import zlib
from datetime import datetime, timedelta

import numpy as np
import pytest

from calmon.metrics.decision import decide
from calmon.metrics.evaluation import set_sums
from calmon.metrics.ranking import rank_sorted
from tests.integration.scheduler.helpers import (
    Batch,
    Env,
    SettledClock,
    by_window,
    create_model,
    iso,
    make_batch,
    send,
    send_labels,
    windows,
)

FIVE_MINUTES = timedelta(minutes=5)


def _start(clock: SettledClock, index: int) -> datetime:
    """Start of the index-th of six consecutive closed 5-minute windows (0 = oldest)."""
    return clock.recent(7 - index)


def _expected(
    clock: SettledClock, model: str, window: int, pooled: Batch, reference: Batch
) -> dict[str, object]:
    """The decision of ``pooled`` against ``reference`` computed from their rows."""
    sets, negatives = [], []
    for part in (pooled, reference):
        scores, labels = part.labelled()
        pos, neg = np.sort(scores[labels == 1]), np.sort(scores[labels == 0])
        negatives.append(neg)
        sets.append(
            (rank_sorted(pos, neg), set_sums(pos, neg, threshold=0.5, score_kind="probability"))
        )
    seed = zlib.crc32(f"{model}|*|{iso(_start(clock, window))}".encode())
    return decide(
        *sets[0],
        *sets[1],
        threshold=0.5,
        score_kind="probability",
        seed=seed,
        negatives=negatives[:1],
    )


def _check(actual: dict[str, object], expected: dict[str, object]) -> None:
    for key, value in expected.items():
        if isinstance(value, dict):
            assert isinstance(actual[key], dict), key
            _check(actual[key], value)  # type: ignore[arg-type]
        elif isinstance(value, str) or value is None:
            assert actual[key] == value, key
        else:
            assert actual[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("kind", ["fixed", "trailing"])
def test_a_decision_pools_back_to_enough_positives_from_the_stored_windows(
    env: Env, kind: str, clock: SettledClock
) -> None:
    reference: dict[str, object] = (
        {"kind": "fixed", "start": iso(_start(clock, 0)), "end": iso(_start(clock, 2))}
        if kind == "fixed"
        else {"kind": "trailing", "windows": 2}
    )
    create_model(
        env.client,
        "cards",
        window="5m",
        grace="0s",
        reference=reference,
        decision={"min_positives": 40, "max_span": "20m", "min_span": "0s"},
    )
    model = env.client.get("/v1/models/cards").json()
    assert model["decision"] == {"min_positives": 40, "max_span": "20m", "min_span": "0s"}
    batch = make_batch(
        prefix="p",
        start=_start(clock, 0),
        count=6 * 60,
        spacing=timedelta(seconds=5),
        seed=3,
        prior=0.25,
    )
    # the windows before the last are computed first, so that all of them are stored when the
    # last one's decision pools (windows of a fixed reference are computed in any order)
    scheduler = env.scheduler()
    send(env.client, "cards", batch.where(_start(clock, 0), _start(clock, 5)))
    assert scheduler.tick().computed == 5
    send(env.client, "cards", batch.where(_start(clock, 5), _start(clock, 6)))
    assert scheduler.tick().computed == 1
    stars = by_window(windows(env.client, "cards"))
    positives = [
        int(batch.where(_start(clock, i), _start(clock, i) + FIVE_MINUTES).labelled()[1].sum())
        for i in range(6)
    ]
    assert all(p < 40 for p in positives)
    decision = stars[iso(_start(clock, 5))]["decision"]
    first = 5
    while sum(positives[first:]) < 40 and 5 - first + 1 < 4:
        first -= 1
    assert 1 < decision["windows"] == 5 - first + 1
    assert decision["start"] == iso(_start(clock, first))
    assert decision["n_pos"] == sum(positives[first:])
    pooled = batch.where(_start(clock, first), _start(clock, 6))
    ref = (
        batch.where(_start(clock, 0), _start(clock, 2))
        if kind == "fixed"
        else batch.where(_start(clock, first - 2), _start(clock, first))
    )
    _check(decision, _expected(clock, "cards", 5, pooled, ref))
    # the first window has no reference yet when trailing: a decision without parts
    first_decision = stars[iso(_start(clock, 0))]["decision"]
    assert first_decision["windows"] == 1
    if kind == "trailing":
        assert first_decision["verdict"] == "not_enough_data"
        assert first_decision["likelihood_interval"] is None


def test_a_window_with_enough_positives_is_its_own_decision(env: Env, clock: SettledClock) -> None:
    """Whatever the minimum span (here the default), it pools only a window that lacks
    positives."""
    create_model(
        env.client,
        "ads",
        window="5m",
        grace="0s",
        reference={"kind": "trailing"},
        decision={"min_positives": 100, "max_span": "7d"},
    )
    batch = make_batch(
        prefix="q",
        start=_start(clock, 0),
        count=2 * 300,
        spacing=timedelta(seconds=1),
        seed=4,
        prior=0.4,
    )
    send(env.client, "ads", batch)
    assert env.scheduler().tick().computed == 2
    record = by_window(windows(env.client, "ads"))[iso(_start(clock, 1))]
    decision = record["decision"]
    assert (decision["windows"], decision["n"], decision["n_pos"]) == (
        1,
        record["n"],
        record["n_pos"],
    )
    split = record["split"]["average_precision"]
    assert decision["likelihood_part"] == split["likelihood"]
    assert decision["likelihood_interval"] == split["likelihood_interval"]
    assert decision["prior_interval"] == split["prior_interval"]


@pytest.mark.parametrize(
    "decision",
    [
        {"min_positives": 0},
        {"min_positives": 100, "max_span": "1m"},
        {"max_span": "91d"},
        {"max_span": "7 days"},
        {"min_span": "91d"},
        {"min_span": "20 hours"},
        {"min_positives": "100"},
        {"other": 1},
    ],
)
def test_a_bad_decision_setting_is_refused_and_stores_nothing(
    env: Env, decision: dict[str, object]
) -> None:
    response = env.client.put("/v1/models/bad", json={"window": "5m", "decision": decision})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    assert env.client.get("/v1/models/bad").status_code == 404


@pytest.mark.parametrize(("min_span", "max_span", "pooled"), [("15m", "30m", 3), ("1h", "20m", 4)])
def test_a_pool_spans_at_least_the_minimum_span_and_at_most_the_maximum(
    env: Env, clock: SettledClock, min_span: str, max_span: str, pooled: int
) -> None:
    """The last window, which holds enough positives with the one before it, pools at least
    ``min_span`` (three 5-minute windows for 15 minutes) but never beyond ``max_span``, which
    wins (four windows for 20 minutes, under a minimum of an hour)."""
    create_model(
        env.client,
        "cards",
        window="5m",
        grace="0s",
        reference={"kind": "trailing", "windows": 1},
        decision={"min_positives": 20, "max_span": max_span, "min_span": min_span},
    )
    assert env.client.get("/v1/models/cards").json()["decision"]["min_span"] == min_span
    batch = make_batch(
        prefix="s",
        start=_start(clock, 0),
        count=6 * 60,
        spacing=timedelta(seconds=5),
        seed=3,
        prior=0.25,
    )
    send(env.client, "cards", batch)
    assert env.scheduler().tick().computed == 6
    stars = by_window(windows(env.client, "cards"))
    positives = [
        int(batch.where(_start(clock, i), _start(clock, i) + FIVE_MINUTES).labelled()[1].sum())
        for i in range(6)
    ]
    assert positives[5] < 20 <= positives[4] + positives[5]
    decision = stars[iso(_start(clock, 5))]["decision"]
    assert (decision["windows"], decision["start"]) == (pooled, iso(_start(clock, 6 - pooled)))
    assert decision["n_pos"] == sum(positives[6 - pooled :])


def _fixed_model(env: Env, clock: SettledClock) -> Batch:
    """Model ``cards`` with a fixed reference on windows 0 and 1, pooling back to 40 positives
    within 20 minutes (the positives alone deciding); and the six windows' predictions to send
    to it (not sent)."""
    create_model(
        env.client,
        "cards",
        window="5m",
        grace="0s",
        reference={"kind": "fixed", "start": iso(_start(clock, 0)), "end": iso(_start(clock, 2))},
        decision={"min_positives": 40, "max_span": "20m", "min_span": "0s"},
    )
    return make_batch(
        prefix="p",
        start=_start(clock, 0),
        count=6 * 60,
        spacing=timedelta(seconds=5),
        seed=3,
        prior=0.25,
    )


def test_a_back_fill_computed_newest_first_pools_the_windows_not_computed_yet(
    env: Env, clock: SettledClock
) -> None:
    """Under a fixed reference a back-fill computes the newest window first: its decision
    reads the older windows' rows, and is the decision of the pooled rows all the same."""
    batch = _fixed_model(env, clock)
    send(env.client, "cards", batch)
    assert env.scheduler().tick().computed == 6
    stars = by_window(windows(env.client, "cards"))
    positives = [
        int(batch.where(_start(clock, i), _start(clock, i) + FIVE_MINUTES).labelled()[1].sum())
        for i in range(6)
    ]
    for window in range(2, 6):
        first = window
        # back to 40 positives, within 20 minutes, not into the reference period (0 and 1)
        while sum(positives[first : window + 1]) < 40 and window - first + 1 < 4 and first > 2:
            first -= 1
        decision = stars[iso(_start(clock, window))]["decision"]
        assert (decision["windows"], decision["start"]) == (
            window - first + 1,
            iso(_start(clock, first)),
        )
        pooled = batch.where(_start(clock, first), _start(clock, window) + FIVE_MINUTES)
        _check(
            decision,
            _expected(
                clock, "cards", window, pooled, batch.where(_start(clock, 0), _start(clock, 2))
            ),
        )


def test_labels_that_land_late_are_pooled_by_the_windows_recomputed_before_them(
    env: Env, clock: SettledClock
) -> None:
    """Windows first computed without labels are all recomputed when the labels land, the
    newest first under a fixed reference: its decision pools the older windows' labelled rows,
    not the unlabelled results they still store, and is the decision of the pooled rows."""
    batch = _fixed_model(env, clock)
    reference, later = (
        batch.where(_start(clock, 0), _start(clock, 2)),
        batch.where(_start(clock, 2), _start(clock, 6)),
    )
    send(env.client, "cards", reference)
    unlabelled = [{key: v for key, v in item.items() if key != "label"} for item in later.items]
    response = env.client.post("/v1/models/cards/predictions", json={"predictions": unlabelled})
    assert response.status_code == 200, response.text
    scheduler = env.scheduler()
    assert scheduler.tick().computed == 6
    before = by_window(windows(env.client, "cards"))[iso(_start(clock, 5))]["decision"]
    assert before["n_pos"] == 0
    send_labels(env.client, "cards", {item["id"]: item["label"] for item in later.items})
    assert scheduler.tick().computed == 4
    stars = by_window(windows(env.client, "cards"))
    positives = [
        int(batch.where(_start(clock, i), _start(clock, i) + FIVE_MINUTES).labelled()[1].sum())
        for i in range(6)
    ]
    first = 5
    while sum(positives[first:]) < 40 and 5 - first + 1 < 4 and first > 2:
        first -= 1
    decision = stars[iso(_start(clock, 5))]["decision"]
    assert (decision["windows"], decision["start"]) == (6 - first, iso(_start(clock, first)))
    assert decision["n_pos"] == sum(positives[first:])
    assert decision["n"] == len(batch.where(_start(clock, first), _start(clock, 6)).items)
    pooled = batch.where(_start(clock, first), _start(clock, 6))
    _check(decision, _expected(clock, "cards", 5, pooled, reference))


def test_a_window_after_a_fixed_reference_period_pools_no_window_of_the_period(
    env: Env, clock: SettledClock
) -> None:
    """The first windows after a fixed reference period pool back only to its end, however
    many positives they lack: a pooled window never shares rows with the reference it is
    compared with. Windows inside the period pool as before."""
    create_model(
        env.client,
        "cards",
        window="5m",
        grace="0s",
        reference={"kind": "fixed", "start": iso(_start(clock, 0)), "end": iso(_start(clock, 3))},
        decision={"min_positives": 10_000, "max_span": "30m"},
    )
    batch = make_batch(
        prefix="f",
        start=_start(clock, 0),
        count=6 * 60,
        spacing=timedelta(seconds=5),
        seed=5,
        prior=0.25,
    )
    scheduler = env.scheduler()
    send(env.client, "cards", batch.where(_start(clock, 0), _start(clock, 5)))
    assert scheduler.tick().computed == 5
    send(env.client, "cards", batch.where(_start(clock, 5), _start(clock, 6)))
    assert scheduler.tick().computed == 1
    stars = by_window(windows(env.client, "cards"))
    reference = batch.where(_start(clock, 0), _start(clock, 3))
    for window in (3, 4, 5):
        decision = stars[iso(_start(clock, window))]["decision"]
        assert (decision["windows"], decision["start"]) == (window - 2, iso(_start(clock, 3)))
        pooled = batch.where(_start(clock, 3), _start(clock, window) + FIVE_MINUTES)
        assert decision["n"] == pooled.labelled()[1].size
        if window > 3:
            _check(decision, _expected(clock, "cards", window, pooled, reference))
    # inside the period the pool reaches back as far as max_span allows
    inside = stars[iso(_start(clock, 2))]["decision"]
    assert (inside["windows"], inside["start"]) == (3, iso(_start(clock, 0)))
