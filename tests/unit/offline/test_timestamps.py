"""The vectorised timestamp reader agrees with ``datetime.fromisoformat`` wherever it reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calmon.offline.timestamps import common_layout_seconds


def reference(value: str) -> float | None:
    """What the one-by-one path makes of ``value``: seconds, or None when it is refused."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return None if moment.tzinfo is None else moment.timestamp()


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("2024-02-29T00:00:00Z", True),
        ("2023-02-28T23:59:59Z", True),
        ("2024-01-01T00:00:00+05:30", True),
        ("2024-01-01T00:00:00-23:59", True),
        ("9999-12-31T23:59:59-23:59", True),
        ("0001-01-01T00:00:00+23:59", True),
        ("1970-01-01T00:00:00-00:00", True),
        ("2023-02-29T00:00:00Z", False),
        ("2024-04-31T00:00:00Z", False),
        ("2024-13-01T00:00:00Z", False),
        ("0000-01-01T00:00:00Z", False),
        ("2024-01-01T24:00:00Z", False),
        ("2024-01-01T00:60:00Z", False),
        ("2024-01-01T00:00:60Z", False),
        ("2024-01-01T00:00:00+24:00", False),
        ("2024-01-01T00:00:00+05:60", False),
        ("2024-01-01T00:00:00", False),
        ("2024-01-01T00:00:00.5Z", False),
        ("2024-01-01 00:00:00Z", False),
        ("2024-01-01T00:00:00z", False),
        ("2024-01-01T00:00:00+0530", False),
        ("2024-01-01T00:00:00Z ", False),
        ("", False),
    ],
)
def test_examples(value: str, read: bool) -> None:
    seconds, was_read = common_layout_seconds([value, "2024-01-01T00:00:00Z"])
    assert bool(was_read[0]) is read
    assert bool(was_read[1])
    assert seconds[1] == 1_704_067_200
    if read:
        assert seconds[0] == reference(value)


def test_non_ascii_is_left_to_the_caller() -> None:
    _, read = common_layout_seconds(["2024-01-01T00:00:00Z", "2024-01-01T00:00:00Zé"])
    assert not read.any()


_near_layout = st.text(alphabet="0123456789-T:Z+ .z", min_size=18, max_size=26)


@st.composite
def _layout_strings(draw: st.DrawFn) -> str:
    """Strings in the two layouts with random (often invalid) digits."""
    digits = st.integers(0, 99)
    fields = [draw(st.integers(0, 9999)), *(draw(digits) for _ in range(5))]
    text = "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}".format(*fields)
    if draw(st.booleans()):
        return text + "Z"
    sign = draw(st.sampled_from("+-"))
    return text + f"{sign}{draw(digits):02d}:{draw(digits):02d}"


@settings(max_examples=200, deadline=None)
@given(values=st.lists(_layout_strings() | _near_layout, min_size=1, max_size=20))
def test_never_disagrees_with_fromisoformat(values: list[str]) -> None:
    seconds, read = common_layout_seconds(values)
    for value, second, was_read in zip(values, seconds.tolist(), read.tolist(), strict=True):
        if was_read:
            assert reference(value) == second, value
        else:
            assert second == 0.0


@settings(max_examples=300, deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    offset_minutes=st.integers(-(24 * 60 - 1), 24 * 60 - 1),
    z=st.booleans(),
)
def test_reads_every_valid_value_in_the_layouts(
    moment: datetime, offset_minutes: int, z: bool
) -> None:
    moment = moment.replace(microsecond=0)
    if z:
        value = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        if moment.year < 1000:
            value = f"{moment.year:04d}" + value[value.index("-") :]
    else:
        local = moment.astimezone(timezone(timedelta(minutes=offset_minutes)))
        value = f"{local.year:04d}" + local.isoformat()[local.isoformat().index("-") :]
    seconds, read = common_layout_seconds([value])
    assert read[0], value
    assert seconds[0] == moment.timestamp()
