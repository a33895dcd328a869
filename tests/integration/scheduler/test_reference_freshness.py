"""A window is never computed from a reference older than its own snapshot.

A fixed reference is cached by its data version. Predictions that reach the period after a
reference was built, and before any scan sees them, must not be left out of the references
of the windows computed later, even when a window of the period is computed in between and
its checkpoint takes those predictions in (so that no scan ever bumps a version for them).
SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from calmon.db.models import Model
from calmon.services.windows.compute import compute_window
from calmon.services.windows.planning import scan_model
from calmon.services.windows.reference_cache import ReferenceCache
from tests.integration.scheduler.helpers import (
    FIVE_MINUTES,
    MARGIN,
    Env,
    by_window,
    create_model,
    iso,
    make_batch,
    send,
    send_labels,
    windows,
)


def _model(env: Env, name: str) -> Model:
    with env.session_factory() as session:
        return session.scalars(select(Model).where(Model.name == name)).one()


def _scan(env: Env, model: Model) -> None:
    with env.session_factory() as session:
        scan_model(session, model=model, now=env.clock.now(), margin=timedelta(seconds=MARGIN))
        session.commit()


def _compute(env: Env, model: Model, start: datetime, cache: ReferenceCache) -> None:
    with env.session_factory() as session:
        computed = compute_window(
            session,
            model=model,
            start=start,
            now=env.clock.now(),
            instance="test",
            cache=cache,
            margin=timedelta(seconds=MARGIN),
        )
        session.commit()
    assert computed is not None


def test_rows_reaching_the_period_after_a_build_reach_every_later_window(env: Env) -> None:
    """The reference is built while the period's second window is still arriving (its first
    half); the second half lands, that window is computed (its checkpoint holds the second
    half, so no scan will ever bump it), then a later unlabelled window is computed: both
    windows must pool the whole period."""
    first, second, later = (env.clock.recent(i) for i in (6, 5, 2))
    create_model(
        env.client,
        "late",
        window="5m",
        grace="0s",
        reference={"kind": "fixed", "start": iso(first), "end": iso(second + FIVE_MINUTES)},
    )
    spacing = timedelta(seconds=1)
    early = make_batch(prefix="a", start=first, count=450, spacing=spacing, seed=1)
    send(env.client, "late", early)  # all of the first window, half of the second
    unlabelled = make_batch(
        prefix="w", start=later, count=200, spacing=spacing, seed=2, unlabelled=1.0
    )
    send(env.client, "late", unlabelled)
    model = _model(env, "late")
    _scan(env, model)
    cache = ReferenceCache()
    _compute(env, model, first, cache)  # builds the reference from what has arrived
    assert cache.builds == 1

    rest = make_batch(
        prefix="b", start=second + FIVE_MINUTES / 2, count=150, spacing=spacing, seed=3
    )
    send(env.client, "late", rest)  # the rest of the second window, not scanned yet
    _compute(env, model, second, cache)
    _scan(env, model)
    _compute(env, model, later, cache)

    period = len(early.items) + len(rest.items)
    stars = by_window(windows(env.client, "late"))
    assert stars[iso(second)]["n"] == 150 + len(rest.items)
    assert stars[iso(second)]["reference"]["n"] == period
    assert stars[iso(later)]["unlabelled"] == len(unlabelled.items)
    assert stars[iso(later)]["reference"]["n"] == period


def test_labels_reaching_the_period_after_a_build_reach_every_later_window(env: Env) -> None:
    """The same with late labels: the period's second window arrives without its labels, the
    reference is built, the labels land and that window is computed (taking them in), then a
    later window is computed. Both must pool the period's labels, and the later window's
    label-free estimate must be the one a fresh build gives."""
    first, second, later = (env.clock.recent(i) for i in (6, 5, 2))
    create_model(
        env.client,
        "labels",
        window="5m",
        grace="0s",
        reference={"kind": "fixed", "start": iso(first), "end": iso(second + FIVE_MINUTES)},
    )
    spacing = timedelta(seconds=1)
    period = make_batch(prefix="p", start=first, count=600, spacing=spacing, seed=4)
    held = {item["id"]: item.pop("label") for item in period.items[300:]}
    send(env.client, "labels", period)
    unlabelled = make_batch(
        prefix="w", start=later, count=300, spacing=spacing, seed=5, prior=0.6, unlabelled=1.0
    )
    send(env.client, "labels", unlabelled)
    model = _model(env, "labels")
    _scan(env, model)
    cache = ReferenceCache()
    _compute(env, model, first, cache)
    send_labels(env.client, "labels", held)  # not scanned yet
    _compute(env, model, second, cache)
    _scan(env, model)
    _compute(env, model, later, cache)
    stars = by_window(windows(env.client, "labels"))
    for start in (second, later):
        assert stars[iso(start)]["reference"]["n"] == 600, start
    # a fresh build, in a new cache, gives the same estimate
    response = env.client.post(
        "/v1/models/labels/recompute",
        params={"start": iso(later), "end": iso(later + FIVE_MINUTES)},
    )
    assert response.status_code == 202, response.text
    _scan(env, model)
    _compute(env, model, later, ReferenceCache())
    again = by_window(windows(env.client, "labels"))[iso(later)]
    assert again["estimated"] == stars[iso(later)]["estimated"]
