"""Read stored window results page by page, and request the recomputation of a range.

The page order and cursors: ``docs/reference/scheduler.md`` ("The record"); what a recompute request
marks: ``docs/reference/scheduler.md`` ("Recompute").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from calmon.db.backend import bytewise, insert_ignoring_duplicates, window_start_seconds
from calmon.db.models import CURRENT_RECORD, Model, Prediction, WindowResult, WindowState
from calmon.services.windows.planning import request_windows
from calmon.timeline import EPOCH, window_length, window_start

#: the most windows a recompute request may cover (:func:`request_recompute`)
MAX_RECOMPUTE_WINDOWS: Final = 10_000
MAX_PAGE: Final = 1000


class TooManyWindowsError(ValueError):
    """A recompute range holds more than :data:`MAX_RECOMPUTE_WINDOWS` windows of its model;
    nothing was marked. The message says so, for people."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of window records and the cursor of the next page (None: no more)."""

    records: list[dict[str, Any]]
    next_cursor: str | None


def encode_cursor(start: datetime, segment: str) -> str:
    """An opaque cursor after the record of ``start`` and ``segment``."""
    return f"{int(start.timestamp())}:{segment}"


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (start, segment) of :func:`encode_cursor`; ValueError for anything else."""
    seconds, sep, segment = cursor.partition(":")
    if not sep or not seconds.lstrip("-").isdigit() or not segment:
        raise ValueError("not a cursor of this API")
    return datetime.fromtimestamp(int(seconds), tz=UTC), segment


def list_window_results(
    session: Session,
    *,
    model: Model,
    start: datetime | None,
    end: datetime | None,
    segment: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> Page:
    """Stored records of ``model``'s windows overlapping ``[start, end)``, oldest first and,
    within a window, segment ``*`` first then by name; at most ``limit`` after ``after``.
    Records of an older shape are left out, as windows not computed yet."""
    segment_order = bytewise(session, WindowResult.segment)
    query = select(WindowResult.starts_at, WindowResult.segment, WindowResult.record).where(
        WindowResult.model_id == model.id, CURRENT_RECORD
    )
    if start is not None:
        query = query.where(WindowResult.ends_at > start)
    if end is not None:
        query = query.where(WindowResult.starts_at < end)
    if segment is not None:
        query = query.where(WindowResult.segment == segment)
    if after is not None:
        after_start, after_segment = after
        query = query.where(
            or_(
                WindowResult.starts_at > after_start,
                and_(WindowResult.starts_at == after_start, segment_order > after_segment),
            )
        )
    rows = session.execute(
        query.order_by(WindowResult.starts_at, segment_order).limit(limit + 1)
    ).all()
    records = [record for _, _, record in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        last_start, last_segment, _ = rows[limit - 1]
        next_cursor = encode_cursor(last_start, last_segment)
    return Page(records=records, next_cursor=next_cursor)


def window_count(window: str, start: datetime, end: datetime) -> int:
    """How many windows of kind ``window`` overlap ``[start, end)``, counted without listing
    them."""
    first = window_start(start, window)
    return max(0, -((first - end) // window_length(window)))


def windows_in_range(model: Model, start: datetime, end: datetime) -> list[datetime]:
    """Starts of the model's windows that overlap ``[start, end)``."""
    length = window_length(model.window)
    cursor = window_start(start, model.window)
    starts: list[datetime] = []
    while cursor < end:
        starts.append(cursor)
        cursor += length
    return starts


def request_recompute(
    session: Session, *, model: Model, start: datetime, end: datetime, now: datetime
) -> list[datetime]:
    """Mark for recomputation the windows of ``model`` that overlap ``[start, end)``, have
    ended and hold predictions; returns their starts. The caller commits; the scheduler
    computes them at its next tick, without waiting for the grace period.

    Set-based, whatever the number of windows in the range: one grouped query finds the
    windows that hold predictions, one the windows already known, one insert adds the others
    (a window the scheduler or a concurrent request adds meanwhile is left as it is) and one
    update marks them all.

    Raises :class:`TooManyWindowsError`, marking nothing, when ``[start, end)`` overlaps more
    than :data:`MAX_RECOMPUTE_WINDOWS` windows of the model."""
    if window_count(model.window, start, end) > MAX_RECOMPUTE_WINDOWS:
        raise TooManyWindowsError(
            f"the range holds more than {MAX_RECOMPUTE_WINDOWS} windows; split it"
        )
    length = window_length(model.window)
    starts = [s for s in windows_in_range(model, start, end) if s + length <= now]
    if not starts:
        return []
    seconds = int(length.total_seconds())
    bucket = window_start_seconds(session, Prediction.ts, seconds)
    holding = {
        EPOCH + timedelta(seconds=int(epoch_seconds))
        for epoch_seconds in session.scalars(
            select(bucket)
            .where(
                Prediction.model_id == model.id,
                Prediction.ts >= starts[0],
                Prediction.ts < starts[-1] + length,
            )
            .group_by(bucket)
        )
    }
    known = set(
        session.scalars(
            select(WindowState.starts_at).where(
                WindowState.model_id == model.id,
                WindowState.starts_at >= starts[0],
                WindowState.starts_at <= starts[-1],
            )
        )
    )
    chosen = sorted(holding | (known & set(starts)))
    fresh = [window for window in chosen if window not in known]
    if fresh:
        columns = WindowState.__table__.columns
        states = [
            WindowState.first_seen(
                model_id=model.id, starts_at=window, ends_at=window + length, version=0, now=now
            )
            for window in fresh
        ]
        session.execute(
            insert_ignoring_duplicates(session, WindowState),
            [{column.key: getattr(state, column.key) for column in columns} for state in states],
        )
    request_windows(session, model_id=model.id, starts=chosen, now=now)
    return chosen
