"""What to do after a shift: the recalibration map of a window
(``GET /v1/models/{model}/calibration``); the ``advice`` of a window record (an advised
threshold for the model's objective at the window's class ratio) is the metric engine's
(:func:`calmon.metrics.advice.window_advice`). Why and how: ``docs/reference/acting.md``.

Both rest on one assumption, label shift: the window's P(score | y) is the reference's. The
window's class ratio comes from its labels when it has enough of them (``measured``), else
from the label-free estimate, only where that estimate's label-shift check holds
(``estimated``, :func:`calmon.metrics.advice.window_prior`); otherwise there is no advice and
the record says why.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy.orm import Session

from calmon.db.models import Model
from calmon.db.window_rows import tracked_segments
from calmon.metrics.advice import window_prior as window_prior
from calmon.metrics.recalibration import calibration_map, too_small
from calmon.services.errors import ConflictError, NotFoundError
from calmon.services.stored_windows import stored_record
from calmon.services.windows.reference_cache import ReferenceCache
from calmon.services.windows.references import references_for
from calmon.timeline import iso, window_length, window_start


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
    record = stored_record(session, model_id=model.id, start=start, segment=segment)
    if record is None:
        raise NotFoundError(
            "window_not_found",
            f"no computed window of segment {segment!r} starts at {iso(start)}",
            [{"field": "window"}],
        )
    prior, source, reason = window_prior(
        result=record, unlabelled=record["unlabelled"], estimated=record["estimated"]
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
    levels = None if reference is None else reference.data.label_shift
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
