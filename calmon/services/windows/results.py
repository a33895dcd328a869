"""Read stored window results page by page, and request the recomputation of a range.

The page order and cursors: ``docs/reference/scheduler.md`` ("The record"); what a recompute request
marks: ``docs/reference/scheduler.md`` ("Recompute").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy.orm import Session

from calmon.db.models import Model, WindowState
from calmon.db.window_results import result_page
from calmon.db.window_states import add_states, known_starts, starts_holding_predictions
from calmon.services.windows.planning import request_windows
from calmon.timeline import window_length, window_start

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
    rows = result_page(
        session,
        model_id=model.id,
        start=start,
        end=end,
        segment=segment,
        after=after,
        limit=limit + 1,
    )
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
    holding = starts_holding_predictions(
        session,
        model_id=model.id,
        length=int(length.total_seconds()),
        first=starts[0],
        end=starts[-1] + length,
    )
    known = known_starts(session, model_id=model.id, first=starts[0], last=starts[-1])
    chosen = sorted(holding | (known & set(starts)))
    fresh = [window for window in chosen if window not in known]
    if fresh:
        states = [
            WindowState.first_seen(
                model_id=model.id, starts_at=window, ends_at=window + length, version=0, now=now
            )
            for window in fresh
        ]
        add_states(session, states=states)
    request_windows(session, model_id=model.id, starts=chosen, now=now)
    return chosen
