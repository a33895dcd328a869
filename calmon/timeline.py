"""The timeline: window arithmetic (fixed lengths aligned to the UTC epoch) and the one
rendering of an instant (:func:`iso`), shared by the service and the CLI."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

#: the UTC epoch: windows are aligned to it, and no event time lies before it
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

WindowName = Literal["5m", "1h", "6h", "1d", "7d"]

#: window name -> length in seconds
WINDOW_SECONDS: Final[dict[str, int]] = {
    "5m": 300,
    "1h": 3_600,
    "6h": 21_600,
    "1d": 86_400,
    "7d": 604_800,
}


def iso(moment: datetime, *, timespec: str = "auto") -> str:
    """An instant as ISO 8601 in UTC with ``Z``: the one way instants are rendered (API
    records, logs, reports).

    An aware time at any offset is converted to UTC first (``12:00+02:00`` gives
    ``10:00:00Z``); a naive time is taken as UTC already. ``timespec`` is that of
    :meth:`datetime.isoformat` (``auto``: microseconds only when not whole seconds).
    """
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return utc.replace(tzinfo=None).isoformat(timespec=timespec) + "Z"


def window_length(name: str) -> timedelta:
    """Length of the window called ``name``; ``ValueError`` for an unknown name."""
    try:
        return timedelta(seconds=WINDOW_SECONDS[name])
    except KeyError:
        allowed = ", ".join(WINDOW_SECONDS)
        raise ValueError(f"unknown window {name!r}; expected one of {allowed}") from None


def window_start(moment: datetime, name: str) -> datetime:
    """Start (UTC) of the window of kind ``name`` that holds ``moment`` (aware datetime).

    Windows are half-open ``[start, start + length)`` and aligned to 1970-01-01T00:00Z, so
    ``7d`` windows start on Thursdays.
    """
    if moment.tzinfo is None:
        raise ValueError("moment must carry a UTC offset")
    window_length(name)
    (start,) = window_starts([moment], name)
    return start


def window_starts(moments: Iterable[datetime], name: str) -> set[datetime]:
    """Starts of the windows of kind ``name`` that hold ``moments`` (aware datetimes), each
    once: :func:`window_start` of many instants at the cost of one division each."""
    length = timedelta(seconds=WINDOW_SECONDS[name])
    # exact integer arithmetic: a float timestamp rounds the last microseconds of a day up
    epochs = {(moment - EPOCH) // length for moment in moments}
    return {EPOCH + epoch * length for epoch in epochs}
