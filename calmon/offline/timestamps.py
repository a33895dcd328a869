"""Vectorised reading of the common ISO 8601 timestamp layouts.

Converting a million timestamps one ``datetime.fromisoformat`` at a time costs about 0.4 s;
most files use one of two fixed layouts, ``YYYY-MM-DDTHH:MM:SSZ`` and
``YYYY-MM-DDTHH:MM:SS±HH:MM``, which NumPy reads as a character matrix in a fraction of that.
Rows in any other layout (fractions of a second, a space separator, basic format, …) or not
valid in these layouts are left to the caller, who reads them with ``fromisoformat``; so this
module never accepts a string that ``fromisoformat`` rejects, nor reads one differently.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from calmon.arrays import BoolArray, FloatArray

_WIDTH: Final = 26  # one more than the longest layout, to tell longer strings apart
_SEPARATORS: Final = {4: "-", 7: "-", 10: "T", 13: ":", 16: ":"}
#: Digit positions: year, month, day, hour, minute, second, then the offset's hours, minutes.
_FIELDS: Final = ((0, 4), (5, 7), (8, 10), (11, 13), (14, 16), (17, 19), (20, 22), (23, 25))
_DATE_TIME_DIGITS: Final = [p for first, end in _FIELDS[:6] for p in range(first, end)]
_OFFSET_DIGITS: Final = [p for first, end in _FIELDS[6:] for p in range(first, end)]


def common_layout_seconds(values: list[str]) -> tuple[FloatArray, BoolArray]:
    """Seconds since the epoch (UTC) of the values in a common layout, and which ones those are.

    Returns ``(seconds, read)``, both shape (n,): ``seconds[i]`` equals
    ``datetime.fromisoformat(values[i]).timestamp()`` where ``read[i]``, and is 0 elsewhere.
    Values must not contain NUL characters (NumPy drops trailing ones).
    """
    n = len(values)
    try:  # ASCII only, cut at _WIDTH characters
        chars = np.array(values, dtype=f"S{_WIDTH}").view(np.uint8).reshape(n, _WIDTH)
    except UnicodeEncodeError:
        return np.zeros(n, dtype=np.float64), np.zeros(n, dtype=np.bool_)
    sign = chars[:, 19]
    is_z = (sign == ord("Z")) & (chars[:, 20] == 0)
    is_offset = (
        ((sign == ord("+")) | (sign == ord("-"))) & (chars[:, 22] == ord(":")) & (chars[:, 25] == 0)
    )
    expected = np.frombuffer("".join(_SEPARATORS.values()).encode(), dtype=np.uint8)
    read = (is_z | is_offset) & (chars[:, list(_SEPARATORS)] == expected).all(axis=1)
    digits = chars[:, _DATE_TIME_DIGITS + _OFFSET_DIGITS] - np.uint8(ord("0"))  # wraps below 0
    is_digit = digits <= 9
    read &= is_digit[:, : len(_DATE_TIME_DIGITS)].all(axis=1)
    read &= ~is_offset | is_digit[:, len(_DATE_TIME_DIGITS) :].all(axis=1)
    digits[~is_digit] = 0  # e.g. the blank offset of Z rows
    by_position = np.ascontiguousarray(digits.T).astype(np.int64)  # one row per digit
    fields: list[npt.NDArray[np.int64]] = []
    rows = iter(by_position)
    for first, end in _FIELDS:
        value = next(rows)
        for _ in range(first + 1, end):
            value = value * 10 + next(rows)
        fields.append(value)
    year, month, day, hour, minute, second, offset_hours, offset_minutes = fields
    read &= (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1)
    read &= (hour <= 23) & (minute <= 59) & (second <= 59)
    read &= (offset_hours <= 23) & (offset_minutes <= 59)
    months = np.where(read, (year - 1970) * 12 + month - 1, 0)
    first_day = months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
    next_first_day = (months + 1).astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
    read &= day <= next_first_day - first_day
    offset = np.where(is_offset, offset_hours * 3600 + offset_minutes * 60, 0)
    offset = np.where(sign == ord("-"), -offset, offset)
    seconds = (first_day + day - 1) * 86_400 + hour * 3600 + minute * 60 + second - offset
    return np.where(read, seconds, 0).astype(np.float64), read
