"""The order in which a scheduler tries due windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from calmon.db.models import Model
from calmon.scheduler.ordering import fair_order
from calmon.services.windows.planning import DueWindow

HOUR = timedelta(hours=1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _model(model_id: int, kind: str = "trailing") -> Model:
    model = Model(id=model_id, name=f"m{model_id}", reference_kind=kind)
    if kind == "fixed":
        model.reference_start = T0 + 2 * HOUR
        model.reference_end = T0 + 4 * HOUR
    return model


def _windows(*hours: int) -> list[DueWindow]:
    return [DueWindow(start=T0 + h * HOUR, end=T0 + (h + 1) * HOUR) for h in hours]


def test_models_take_turns_and_a_long_backfill_goes_last() -> None:
    big, small = _model(1), _model(2)
    order = fair_order([big, small], {1: _windows(*range(200)), 2: _windows(300)})
    assert [(m.id, w.start) for m, w in order[:3]] == [
        (1, T0),
        (2, T0 + 300 * HOUR),
        (1, T0 + HOUR),
    ]
    assert len(order) == 201


def test_trailing_models_go_oldest_first_fixed_ones_period_first_then_newest() -> None:
    trailing, fixed = _model(1), _model(2, "fixed")
    due = {1: _windows(5, 1, 3), 2: _windows(0, 1, 2, 3, 6, 7)}
    order = fair_order([trailing, fixed], due)
    assert [w.start for m, w in order if m is trailing] == [T0 + h * HOUR for h in (1, 3, 5)]
    assert [w.start for m, w in order if m is fixed] == [T0 + h * HOUR for h in (3, 2, 7, 6, 1, 0)]


def test_nothing_due_is_an_empty_order() -> None:
    assert fair_order([_model(1)], {}) == []
