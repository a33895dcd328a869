"""Splitting the rows of a file into evaluation sets: per time window and per segment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

import numpy as np

from calmon.arrays import FloatArray, Int8Array, IntArray
from calmon.names import ALL_SEGMENTS
from calmon.offline.csv_input import UNLABELLED, EvaluationRows
from calmon.timeline import WINDOW_SECONDS, window_length, window_start


@dataclass(frozen=True, slots=True)
class Group:
    """One evaluation set: the labelled rows of a window and segment, plus its unlabelled count.

    Attributes:
        start, end: the window ``[start, end)`` (UTC), or None when the file is not windowed.
        segment: a segment name, or ``*`` for all rows of the window.
        scores: shape (n,), the labelled rows' scores, in file order (which a seeded
            bootstrap depends on).
        labels: shape (n,), their 0/1 labels.
        unlabelled: rows of the window and segment whose label is empty.
    """

    start: datetime | None
    end: datetime | None
    segment: str
    scores: FloatArray
    labels: Int8Array
    unlabelled: int


def split_rows(rows: EvaluationRows, *, window: str | None, by_segment: bool) -> list[Group]:
    """The groups of ``rows``: oldest window first; in each window ``*`` first, then segments.

    ``window`` is a name of :data:`calmon.timeline.WINDOW_SECONDS` (rows need timestamps) or None
    for one group spanning the file. With ``by_segment`` (rows need segments) each segment that
    has rows in a window gets a group in it, sorted by name; rows with no segment only count in
    ``*``. Only windows holding at least one row appear.
    """
    n = rows.scores.size
    if window is None:
        window_keys = np.zeros(n, dtype=np.int64)
    else:
        if rows.timestamps is None:
            raise ValueError("windows need timestamps")
        window_keys = np.floor_divide(rows.timestamps, WINDOW_SECONDS[window]).astype(np.int64)
    segment_codes: IntArray | None = None
    names: tuple[str, ...] = ()
    if by_segment:
        if rows.segment_codes is None or rows.segment_names is None:
            raise ValueError("segments need a segment column")
        segment_codes, names = rows.segment_codes, rows.segment_names
    order = np.argsort(window_keys, kind="stable")
    groups: list[Group] = []
    for lo, hi in pairwise(_run_bounds(window_keys[order]).tolist()):
        in_window = order[lo:hi]
        start = end = None
        if window is not None and rows.timestamps is not None:
            moment = datetime.fromtimestamp(float(rows.timestamps[in_window[0]]), tz=UTC)
            start = window_start(moment, window)
            end = start + window_length(window)
        groups.append(_group(rows, in_window, start=start, end=end, segment=ALL_SEGMENTS))
        if segment_codes is None:
            continue
        by_code = in_window[np.argsort(segment_codes[in_window], kind="stable")]
        sorted_codes = segment_codes[by_code]
        for s_lo, s_hi in pairwise(_run_bounds(sorted_codes).tolist()):
            code = int(sorted_codes[s_lo])
            if code >= 0:
                groups.append(
                    _group(rows, by_code[s_lo:s_hi], start=start, end=end, segment=names[code])
                )
    return groups


def _run_bounds(values: IntArray) -> IntArray:
    """Start index of each run of equal values in sorted ``values``, then ``len(values)``."""
    changes = np.flatnonzero(values[1:] != values[:-1]) + 1
    return np.concatenate(([0], changes, [values.size])).astype(np.int64)


def _group(
    rows: EvaluationRows,
    indices: IntArray,
    *,
    start: datetime | None,
    end: datetime | None,
    segment: str,
) -> Group:
    labels = rows.labels[indices]
    labelled = labels != UNLABELLED
    return Group(
        start=start,
        end=end,
        segment=segment,
        scores=rows.scores[indices[labelled]],
        labels=labels[labelled],
        unlabelled=int(labelled.size - np.count_nonzero(labelled)),
    )
