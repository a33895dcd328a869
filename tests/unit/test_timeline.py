"""The one rendering of an instant (:func:`calmon.timeline.iso`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from calmon.timeline import iso


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 3, 1, 12, 0, tzinfo=UTC), "2026-03-01T12:00:00Z"),
        (datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2))), "2026-03-01T10:00:00Z"),
        (
            datetime(2026, 3, 1, 0, 30, 0, 250, tzinfo=timezone(timedelta(hours=-5))),
            "2026-03-01T05:30:00.000250Z",
        ),
        (datetime(2026, 3, 1, 12, 0), "2026-03-01T12:00:00Z"),
    ],
)
def test_iso_renders_the_instant_in_utc_with_z(moment: datetime, text: str) -> None:
    assert iso(moment) == text
    assert datetime.fromisoformat(iso(moment)) == moment.replace(tzinfo=moment.tzinfo or UTC)


def test_iso_cuts_to_the_timespec_asked() -> None:
    moment = datetime(2026, 3, 1, 12, 0, 5, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert iso(moment, timespec="milliseconds") == "2026-03-01T11:00:05.123Z"
    assert iso(moment, timespec="seconds") == "2026-03-01T11:00:05Z"
