"""What to do after a shift: the ``advice`` of a window record (an advised threshold for the
model's objective at the window's class ratio) and the recalibration map of a window
(``GET /v1/models/{model}/calibration``). Why and how: ``docs/acting.md``.

Both rest on one assumption, label shift: the window's P(score | y) is the reference's. The
window's class ratio comes from its labels when it has enough of them (``measured``), else
from the label-free estimate, only where that estimate's label-shift check holds
(``estimated``); otherwise there is no advice and the record says why.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, NoReturn

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Model, WindowResult
from app.metrics.advice import advise, class_shift_p_value
from app.metrics.prepared import PreparedSet
from app.metrics.recalibration import calibration_map, too_small
from app.services.errors import ConflictError, NotFoundError
from app.services.reference_cache import Reference, ReferenceCache
from app.services.references import references_for
from app.services.window_rows import tracked_segments
from app.timeline import iso, window_length, window_start

#: A window's own prior is used when at least this share of its scored predictions is
#: labelled, with at least :data:`MIN_CLASS_ROWS` labelled rows of each class.
MIN_LABELLED_SHARE: Final = 0.9
MIN_CLASS_ROWS: Final = 30
#: The measured path's assumption check fails below this p-value (per-class KS, Bonferroni).
ALPHA: Final = 0.01
ASSUMPTION_METHOD: Final = "ks_by_class"


def window_prior(
    *, result: dict[str, Any], unlabelled: int, estimated: dict[str, Any] | None
) -> tuple[float | None, str | None, str | None]:
    """(prior, source, reason): the window's class ratio and where it comes from
    (``measured`` or ``estimated``), or (None, None, why there is none)."""
    n, n_pos = int(result["n"]), int(result["n_pos"])
    scored = n + unlabelled
    if scored > 0 and n >= MIN_LABELLED_SHARE * scored and min(n_pos, n - n_pos) >= MIN_CLASS_ROWS:
        return float(result["prior"]), "measured", None
    labels = (
        f"{n} of {scored} predictions labelled ({n_pos} positive); the measured ratio needs "
        f"{MIN_LABELLED_SHARE:.0%} labelled and {MIN_CLASS_ROWS} of each class"
    )
    if estimated is None:
        return None, None, f"{labels}, and there is no label-free estimate"
    check = estimated.get("label_shift")
    if not isinstance(check, dict) or check.get("holds") is not True:
        state = (
            "has no label-shift check"
            if not isinstance(check, dict)
            else "could not be run"
            if check.get("holds") is None
            else "does not hold"
        )
        return None, None, f"{labels}, and the label-free estimate's label-shift check {state}"
    ratio = estimated.get("positive_class_ratio")
    if ratio is None:
        return None, None, f"{labels}, and the label-free estimate has no ratio"
    return float(ratio), "estimated", None


def window_advice(
    *,
    model: Model,
    prepared: PreparedSet,
    result: dict[str, Any],
    unlabelled: int,
    reference: Reference | None,
    estimated: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """The ``advice`` of a window record; None when the model has no objective.

    ``threshold`` and ``expected`` are null with a ``reason`` when there is no advice.
    ``assumption`` says whether label shift was checked and held: from the window's labels
    (``ks_by_class``) on the measured path, from the label-free check on the estimated one.
    ``expected_intervals`` is always null (``docs/acting.md``)."""
    if model.objective is None:
        return None
    out: dict[str, Any] = {
        "objective": model.objective,
        "configured_threshold": model.threshold,
        "prior": None,
        "prior_source": None,
        "threshold": None,
        "expected": None,
        "expected_intervals": None,
        "assumption": None,
        "reason": None,
    }
    if reference is None or reference.ranking.n_pos == 0 or reference.ranking.n_neg == 0:
        out["reason"] = "the reference has no labelled rows of both classes"
        return out
    prior, source, reason = window_prior(result=result, unlabelled=unlabelled, estimated=estimated)
    out["prior"], out["prior_source"] = prior, source
    if prior is None:
        out["reason"] = reason
        return out
    if source == "measured":
        p_value = class_shift_p_value(reference.ranking, prepared.pos_sorted, prepared.neg_sorted)
        out["assumption"] = {
            "holds": p_value >= ALPHA,
            "p_value": p_value,
            "method": ASSUMPTION_METHOD,
        }
    else:
        check = (estimated or {})["label_shift"]
        out["assumption"] = {
            "holds": True,
            "p_value": check.get("p_value"),
            "method": check.get("method"),
        }
    if not 0.0 < prior < 1.0:
        out["reason"] = f"the window's class ratio is {prior:g}: no threshold separates classes"
        return out
    advice = advise(reference.ranking, prior=prior, objective=model.objective)
    if advice is None:
        out["reason"] = "no threshold meets the objective at this class ratio"
        return out
    out["threshold"] = advice.threshold
    out["expected"] = {
        "precision": advice.precision,
        "recall": advice.recall,
        "alert_rate": advice.alert_rate,
        "cost": advice.cost,
    }
    return out


def calibration_of(
    session: Session, *, model: Model, segment: str, moment: datetime, cache: ReferenceCache
) -> dict[str, Any]:
    """The recalibration map of the window of ``model`` holding ``moment``, for ``segment``:
    the reference's isotonic calibration moved to the window's class ratio (measured, or
    estimated where the label-shift check holds, as for the advice), from the reference the
    window was computed with (built again, or taken from ``cache``).

    Raises :class:`NotFoundError` when the window has no stored record for the segment, and
    :class:`ConflictError` (``calibration_unavailable``) when there is no class ratio to move
    to, no reference with both classes, or too small a one."""
    start = window_start(moment, model.window)
    record = session.scalar(
        select(WindowResult.record).where(
            WindowResult.model_id == model.id,
            WindowResult.starts_at == start,
            WindowResult.segment == segment,
        )
    )
    if record is None:
        raise NotFoundError(
            "window_not_found",
            f"no computed window of segment {segment!r} starts at {iso(start)}",
            [{"field": "window"}],
        )
    prior, source, reason = window_prior(
        result=record, unlabelled=int(record["unlabelled"]), estimated=record.get("estimated")
    )
    if prior is None or not 0.0 < prior < 1.0:
        _unavailable(reason or f"the window's class ratio is {prior}")
    references = references_for(
        session,
        model=model,
        window_start=start,
        segments=tracked_segments(session, model=model),
        cache=cache,
    )
    reference = references.get(segment)
    levels = None if reference is None else reference.label_shift
    if levels is None:
        _unavailable("the reference has no labelled rows of both classes")
    small = too_small(levels)
    if small is not None:
        _unavailable(small)
    fitted = calibration_map(levels, prior=prior, score_kind=model.score_kind)
    return {
        "model": model.name,
        "segment": segment,
        "start": iso(start),
        "end": iso(start + window_length(model.window)),
        "prior": prior,
        "prior_source": source,
        "reference_prior": levels.prior,
        "method": fitted.method,
        "knots": fitted.knots.tolist(),
    }


def _unavailable(reason: str) -> NoReturn:
    raise ConflictError("calibration_unavailable", f"no calibration map: {reason}")
