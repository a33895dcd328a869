"""The pooled decision of a window: the trailing windows pooled back until they hold enough
positives, split against the reference (``docs/metrics.md``, "Decisions at few positives").

What is pooled is read from what each computed window already stores: its positives count
(``window_results.n_pos``) chooses how far back to go, and its sorted scores
(``window_scores``) are merged, never its prediction rows. A window that alone holds enough
positives is its own decision: its split is reused, nothing more is read or resampled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.arrays import FloatArray
from app.db.models import Model, WindowResult, WindowScores
from app.metrics.decision import DECISION_METRIC, decide, decision_from_split
from app.metrics.prepared import PreparedSet
from app.services.reference_cache import Reference, ReferenceCache
from app.services.references import Pool, decode_scores, references_for
from app.timeline import iso, window_length

#: the decision's defaults: positives to pool, and how far back at most
DEFAULT_MIN_POSITIVES: Final = 100
DEFAULT_MAX_SPAN: Final = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class DecisionSettings:
    """A model's ``decision`` setting: pool trailing windows until ``min_positives`` positives,
    over at most ``max_span`` (the window included)."""

    min_positives: int = DEFAULT_MIN_POSITIVES
    max_span: timedelta = DEFAULT_MAX_SPAN


@dataclass(frozen=True, slots=True)
class TrailingPool:
    """The trailing windows a segment's decision pools besides its window, oldest first: their
    start, count, sorted scores, and the reference the pooled set is compared with."""

    start: datetime
    windows: int
    positives: list[FloatArray]
    negatives: list[FloatArray]
    reference: Reference | None


def settings_of(model: Model) -> DecisionSettings:
    """The model's decision setting, defaults filled in."""
    stored: dict[str, Any] = model.decision or {}
    span = stored.get("max_span_seconds")
    return DecisionSettings(
        min_positives=int(stored.get("min_positives", DEFAULT_MIN_POSITIVES)),
        max_span=DEFAULT_MAX_SPAN if span is None else timedelta(seconds=int(span)),
    )


def _pooled_starts(
    session: Session,
    *,
    model: Model,
    segment: str,
    start: datetime,
    window_positives: int,
    settings: DecisionSettings,
) -> list[datetime]:
    """Starts of the computed windows of ``segment`` before ``start`` to pool, newest first:
    back until they and the window hold ``min_positives`` positives, within ``max_span``."""
    if window_positives >= settings.min_positives:
        return []
    earliest = start + window_length(model.window) - settings.max_span
    rows = session.execute(
        select(WindowResult.starts_at, WindowResult.n_pos)
        .where(
            WindowResult.model_id == model.id,
            WindowResult.segment == segment,
            WindowResult.starts_at < start,
            WindowResult.starts_at >= earliest,
        )
        .order_by(WindowResult.starts_at.desc())
    )
    starts: list[datetime] = []
    positives = window_positives
    for starts_at, n_pos in rows:
        starts.append(starts_at)
        positives += int(n_pos)
        if positives >= settings.min_positives:
            break
    return starts


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
    window (None: the window alone, it holds enough positives or has no computed window
    before it). For a trailing reference the pooled set is compared with the reference of its
    oldest window (the windows before it), so that it is not part of its own reference."""
    starts = _pooled_starts(
        session,
        model=model,
        segment=segment,
        start=start,
        window_positives=window_positives,
        settings=settings_of(model),
    )
    if not starts:
        return None
    stored = session.execute(
        select(WindowScores.positives, WindowScores.negatives).where(
            WindowScores.model_id == model.id,
            WindowScores.segment == segment,
            WindowScores.starts_at.in_(starts),
        )
    ).all()
    reference = None
    if model.reference_kind == "trailing":
        reference = references_for(
            session, model=model, window_start=min(starts), segments=segments, cache=cache
        ).get(segment)
    return TrailingPool(
        start=min(starts),
        windows=len(starts),
        positives=[decode_scores(pos) for pos, _ in stored],
        negatives=[decode_scores(neg) for _, neg in stored],
        reference=reference,
    )


def window_decision(
    *,
    model: Model,
    start: datetime,
    prepared: PreparedSet,
    split: dict[str, Any] | None,
    reference: Reference | None,
    trailing: TrailingPool | None,
    seed: int,
) -> dict[str, Any]:
    """The ``decision`` of a window's record: the window's own split of DECISION_METRIC when
    it is pooled alone (``trailing`` None), else the split of the pooled set against the
    pooled reference (the window's for a fixed reference)."""
    if trailing is None:
        usable = reference if reference is not None and reference.n > 0 else None
        decision = decision_from_split(
            n=prepared.ranking.n_pos + prepared.ranking.n_neg,
            n_pos=prepared.ranking.n_pos,
            reference_n=0 if usable is None else usable.n,
            reference_n_pos=0 if usable is None else usable.ranking.n_pos,
            parts=None if split is None else split.get(DECISION_METRIC),
        )
        return {"windows": 1, "start": iso(start), **decision}
    pool_reference = trailing.reference if model.reference_kind == "trailing" else reference
    pool = Pool(
        np.sort(np.concatenate([prepared.pos_sorted, *trailing.positives])),
        threshold=model.threshold,
        score_kind=model.score_kind,
    )
    for negatives in (prepared.neg_sorted, *trailing.negatives):
        pool.add_negatives(negatives)
    usable = pool_reference if pool_reference is not None and pool_reference.n > 0 else None
    decision = decide(
        pool.ranking(),
        pool.sums,
        None if usable is None else usable.ranking,
        None if usable is None else usable.sums,
        threshold=model.threshold,
        score_kind=model.score_kind,
        seed=seed,
    )
    return {"windows": trailing.windows + 1, "start": iso(trailing.start), **decision}
