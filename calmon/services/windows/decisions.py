"""What the pooled decision of a window reads: the trailing windows pooled back until they
hold enough positives over a minimum span, and the reference they are compared with
(``docs/reference/metrics.md``, "Decisions at few positives"); the engine's evaluation of the
window decides (:func:`calmon.metrics.window_evaluation.evaluate_window`).

What is pooled is read from what each computed window already stores: its positives count
(``window_results.n_pos``) chooses how far back to go, and its sorted scores
(``window_scores``) are merged, never its prediction rows; only a window not computed yet (a
back-fill under a fixed reference computes the newest windows first) is read from its rows. A
window that alone holds enough positives is its own decision: its split is reused, nothing
more is read or resampled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import numpy as np
from sqlalchemy.orm import Session

from calmon.arrays import FloatArray
from calmon.db.models import Model
from calmon.db.pools import stored_positive_counts, stored_scores
from calmon.db.window_states import outdated_between
from calmon.names import ALL_SEGMENTS
from calmon.services.model_registry import (
    DEFAULT_DECISION_MIN_SPAN,
    DEFAULT_DECISION_POSITIVES,
    DEFAULT_DECISION_SPAN,
    decision_of,
    duration_seconds,
)
from calmon.services.windows.record import TrailingPool
from calmon.services.windows.reference_cache import ReferenceCache
from calmon.services.windows.references import decode_scores, references_for
from calmon.services.windows.rows import load_rows
from calmon.timeline import window_length

#: how far back the decision pools by default (DecisionConfig's default span)
DEFAULT_MAX_SPAN: Final = timedelta(seconds=duration_seconds(DEFAULT_DECISION_SPAN))
#: how far back a pool reaches at least by default (DecisionConfig's default minimum span)
DEFAULT_MIN_SPAN: Final = timedelta(seconds=duration_seconds(DEFAULT_DECISION_MIN_SPAN))


@dataclass(frozen=True, slots=True)
class DecisionSettings:
    """A model's ``decision`` setting: a window with fewer than ``min_positives`` positives
    pools trailing windows until they hold ``min_positives`` positives and span at least
    ``min_span``, over at most ``max_span`` (the window included)."""

    min_positives: int = DEFAULT_DECISION_POSITIVES
    max_span: timedelta = DEFAULT_MAX_SPAN
    min_span: timedelta = DEFAULT_MIN_SPAN


def settings_of(model: Model) -> DecisionSettings:
    """The model's decision setting, defaults filled in (read as the API shows it,
    :func:`~calmon.services.model_registry.decision_of`)."""
    config = decision_of(model.decision)
    return DecisionSettings(
        min_positives=config.min_positives,
        max_span=timedelta(seconds=duration_seconds(config.max_span)),
        min_span=timedelta(seconds=duration_seconds(config.min_span)),
    )


@dataclass(frozen=True, slots=True)
class _Part:
    """One window to pool: its start, positives, and whether its scores are stored."""

    start: datetime
    n_pos: int
    stored: bool


def pooling_bound(model: Model, *, start: datetime, earliest: datetime) -> datetime:
    """The earliest start a window pooled with the window starting at ``start`` may have,
    given ``earliest`` (from ``max_span``): for a window after a fixed reference period, no
    earlier than the period's end, so that no pooled window shares rows with the reference it
    is compared with (a drift that starts when the period ends would be diluted by the
    period's own rows). A window that starts inside the period is part of its reference
    anyway, and one before it pools only windows before it."""
    end = model.reference_end
    if model.reference_kind != "fixed" or end is None or start < end:
        return earliest
    return max(earliest, end)


def _pooled_parts(
    session: Session,
    *,
    model: Model,
    segment: str,
    position: int | None,
    start: datetime,
    window_positives: int,
    settings: DecisionSettings,
) -> tuple[list[_Part], dict[datetime, tuple[FloatArray, FloatArray]]]:
    """The windows of ``segment`` before ``start`` to pool, newest first: back until they and
    the window hold ``min_positives`` positives and span ``min_span``, within ``max_span``
    (which wins) and not into a fixed
    reference period (:func:`pooling_bound`); and the sorted classes of
    those among them not computed yet, or whose stored result is older than their rows (read
    from their rows: a back-fill, or the recompute after late labels, computes windows of a
    fixed reference newest first), by start. A window whose stored result is current counts
    with its stored positives; its scores are read later from ``window_scores``."""
    if window_positives >= settings.min_positives:
        return [], {}
    length = window_length(model.window)
    earliest = pooling_bound(model, start=start, earliest=start + length - settings.max_span)
    stored = stored_positive_counts(
        session, model_id=model.id, segment=segment, first=earliest, before=start
    )
    states = outdated_between(session, model_id=model.id, first=earliest, before=start)
    parts: list[_Part] = []
    rows: dict[datetime, tuple[FloatArray, FloatArray]] = {}
    positives = window_positives
    for starts_at in sorted(set(stored) | set(states), reverse=True):
        if starts_at in stored and not states.get(starts_at, False):
            parts.append(_Part(starts_at, int(stored[starts_at]), stored=True))
        else:
            classes = _window_classes(
                session, model=model, position=position, start=starts_at, end=starts_at + length
            )
            if classes[0].size + classes[1].size == 0:
                continue
            rows[starts_at] = classes
            parts.append(_Part(starts_at, int(classes[0].size), stored=False))
        positives += parts[-1].n_pos
        if positives >= settings.min_positives and start + length - starts_at >= settings.min_span:
            break
    return parts, rows


def _window_classes(
    session: Session, *, model: Model, position: int | None, start: datetime, end: datetime
) -> tuple[FloatArray, FloatArray]:
    """The sorted positives and negatives of a window not computed yet (of the tracked segment
    at ``position``, of every prediction for None)."""
    rows = load_rows(session, model=model, start=start, end=end)
    keep = rows.labels >= 0
    if position is not None:
        keep &= rows.segments == position
    labels, scores = rows.labels[keep], rows.scores[keep]
    return np.sort(scores[labels == 1]), np.sort(scores[labels == 0])


def trailing_pool(
    session: Session,
    *,
    model: Model,
    segment: str,
    segments: dict[int, str],
    start: datetime,
    window_positives: int,
    cache: ReferenceCache,
) -> TrailingPool | None:
    """What the decision of ``segment`` in the window starting at ``start`` pools besides the
    window (None: the window alone, it holds enough positives or has no window with
    predictions before it). For a trailing reference the pooled set is compared with the
    reference of its oldest window (the windows before it), so that it is not part of its
    own reference."""
    positions = {name: position for position, name in segments.items()}
    parts, rows = _pooled_parts(
        session,
        model=model,
        segment=segment,
        position=None if segment == ALL_SEGMENTS else positions[segment],
        start=start,
        window_positives=window_positives,
        settings=settings_of(model),
    )
    if not parts:
        return None
    stored_starts = [part.start for part in parts if part.stored]
    stored = (
        stored_scores(session, model_id=model.id, segment=segment, starts=stored_starts)
        if stored_starts
        else []
    )
    oldest = min(part.start for part in parts)
    reference = None
    if model.reference_kind == "trailing":
        reference = references_for(
            session, model=model, window_start=oldest, segments=segments, cache=cache
        ).get(segment)
    return TrailingPool(
        start=oldest,
        windows=len(parts),
        positives=[decode_scores(pos) for pos, _ in stored] + [pos for pos, _ in rows.values()],
        negatives=[decode_scores(neg) for _, neg in stored] + [neg for _, neg in rows.values()],
        reference=reference,
        reference_kind=model.reference_kind,
    )
