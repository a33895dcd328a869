"""Words shared by every human-facing output (the web view, `calmon windows`, the offline
report, the exporter's labels): counts with their noun in the right number, and what a verdict
is compared against (``docs/reference/references.md``).

Pure functions of plain values and window records; nothing here reads the database.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from calmon.records import ReferencePeriod, WindowRecord

#: between the two ends of a period
DASH: Final = "\u2013"
_DAY: Final = timedelta(days=1)


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` followed by ``noun``, or by its plural (``many``, else ``noun`` + "s") unless
    ``count`` is 1: ``1 window``, ``2 windows``, ``0 windows``."""
    return f"{count:,} {noun if count == 1 else (many or noun + 's')}"


def _instant(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _day(value: datetime, *, month: bool = True, year: bool = True) -> str:
    out = str(value.day)
    if month:
        out += f" {value:%b}"
    return out + (f" {value.year}" if year else "")


def period_text(start: datetime, end: datetime) -> str:
    """A period ``[start, end)`` in short words (UTC): whole days as the days it covers
    (``1-2 Nov 2026``, ``30 Oct - 2 Nov 2026``, ``1 Nov 2026``), else with times
    (``1 Nov 2026 06:00-18:00 UTC``), each range with an en dash."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    whole = all(t == t.replace(hour=0, minute=0, second=0, microsecond=0) for t in (start, end))
    if whole and end > start:
        last = end - _DAY
        if last == start:
            return _day(start)
        if (last.year, last.month) == (start.year, start.month):
            return f"{start.day}{DASH}{_day(last)}"
        if last.year == start.year:
            return f"{_day(start, year=False)} {DASH} {_day(last)}"
        return f"{_day(start)} {DASH} {_day(last)}"
    if start.date() == end.date():
        return f"{_day(start)} {start:%H:%M}{DASH}{end:%H:%M} UTC"
    return f"{_day(start)} {start:%H:%M} {DASH} {_day(end)} {end:%H:%M} UTC"


def reference_words(reference: ReferencePeriod | None, *, pooled: bool = False) -> str:
    """What a verdict is compared against, as the object of "against": ``the fixed reference
    1-2 Nov 2026``, ``the previous 2 windows`` (``the 2 windows before the pooled ones`` for a
    decision that pools earlier windows, ``pooled``), or ``no reference yet``."""
    if reference is None:
        return "no reference yet"
    if reference["kind"] == "fixed":
        period = period_text(_instant(reference["start"]), _instant(reference["end"]))
        return f"the fixed reference {period}"
    count = reference["windows"] or 0
    if pooled:
        return f"the {plural(count, 'window')} before the pooled ones"
    return "the previous window" if count == 1 else f"the previous {count} windows"


def decision_reference(record: WindowRecord) -> tuple[ReferencePeriod | None, bool]:
    """The reference a record's verdict is compared with (its decision's), and whether it lies
    before the decision's pooled windows (a trailing reference of a decision pooling more than
    one window)."""
    decision = record["decision"]
    reference = decision["reference"]
    pooled = reference is not None and reference["kind"] == "trailing" and decision["windows"] > 1
    return reference, pooled


def decision_words(record: WindowRecord) -> str:
    """What the verdict of ``record`` is compared with, as the object of "against"
    (:func:`reference_words` of :func:`decision_reference`)."""
    reference, pooled = decision_reference(record)
    return reference_words(reference, pooled=pooled)


def verdict_against(record: WindowRecord) -> str:
    """``against …``: what the verdict of ``record`` is compared with (:func:`decision_words`),
    ``with no reference yet`` without one."""
    reference, _ = decision_reference(record)
    words = decision_words(record)
    return f"with {words}" if reference is None else f"against {words}"
