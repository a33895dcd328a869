"""Splitting rows into windows and segments, checked against a row-by-row construction."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import numpy as np
import pytest

from calmon.names import ALL_SEGMENTS
from calmon.offline.csv_input import UNLABELLED, EvaluationRows
from calmon.offline.grouping import Group, split_rows
from calmon.timeline import window_length, window_start


def make_rows(
    *,
    n: int,
    seed: int,
    span_seconds: int = 3 * 86_400,
    segments: tuple[str, ...] = ("b", "a=1", "c"),
) -> EvaluationRows:
    rng = np.random.default_rng(seed)
    labels = rng.choice(np.array([0, 1, UNLABELLED], dtype=np.int8), size=n, p=[0.6, 0.3, 0.1])
    micros = rng.integers(0, span_seconds * 1_000_000, size=n)
    timestamps = np.array(
        [1_700_000_000 + int(m) / 1_000_000 for m in micros], dtype=np.float64
    )  # unsorted on purpose
    names = tuple(sorted(segments))
    return EvaluationRows(
        scores=rng.random(n),
        labels=labels,
        timestamps=timestamps,
        segment_names=names,
        segment_codes=rng.integers(-1, len(names), size=n).astype(np.int64),
    )


def expected_groups(
    rows: EvaluationRows, *, window: str | None, by_segment: bool
) -> dict[tuple[datetime | None, str], list[int]]:
    """Row indices of each (window start, segment), built one row at a time."""
    assert rows.timestamps is not None
    assert rows.segment_codes is not None
    assert rows.segment_names is not None
    found: dict[tuple[datetime | None, str], list[int]] = defaultdict(list)
    for i in range(rows.scores.size):
        start = None
        if window is not None:
            moment = datetime.fromtimestamp(float(rows.timestamps[i]), tz=UTC)
            start = window_start(moment, window)
        found[start, ALL_SEGMENTS].append(i)
        code = int(rows.segment_codes[i])
        if by_segment and code >= 0:
            found[start, rows.segment_names[code]].append(i)
    return found


def check_group(group: Group, rows: EvaluationRows, indices: list[int]) -> None:
    labelled = [i for i in indices if rows.labels[i] != UNLABELLED]
    np.testing.assert_array_equal(group.scores, rows.scores[labelled])
    np.testing.assert_array_equal(group.labels, rows.labels[labelled])
    assert group.unlabelled == len(indices) - len(labelled)
    assert set(np.unique(group.labels)) <= {0, 1}


@pytest.mark.parametrize("window", [None, "5m", "1h", "6h", "1d", "7d"])
@pytest.mark.parametrize("by_segment", [False, True])
def test_groups_match_row_by_row(window: str | None, by_segment: bool) -> None:
    rows = make_rows(n=3_000, seed=7)
    groups = split_rows(rows, window=window, by_segment=by_segment)
    expected = expected_groups(rows, window=window, by_segment=by_segment)
    assert len(groups) == len(expected)
    for group in groups:
        check_group(group, rows, expected[group.start, group.segment])
        if window is None:
            assert group.end is None
        else:
            assert group.start is not None
            assert group.end == group.start + window_length(window)


def test_order_oldest_window_first_then_star_then_segments_by_name() -> None:
    rows = make_rows(n=2_000, seed=11)
    groups = split_rows(rows, window="6h", by_segment=True)
    keys = [(group.start, group.segment) for group in groups]
    starts = [start for start, _ in keys]
    assert starts == sorted(starts)  # type: ignore[type-var]
    for start in dict.fromkeys(starts):
        names = [segment for s, segment in keys if s == start]
        assert names[0] == ALL_SEGMENTS
        assert names[1:] == sorted(names[1:])
        assert names[1:] == ["a=1", "b", "c"]


def test_window_boundary_is_half_open() -> None:
    # 1_699_999_200 is a multiple of 3600: 2023-11-14T22:00:00Z
    boundary = 1_699_999_200.0
    rows = EvaluationRows(
        scores=np.array([0.1, 0.2, 0.3]),
        labels=np.array([1, 0, 1], dtype=np.int8),
        timestamps=np.array([boundary - 0.000001, boundary, boundary + 3599.999999]),
        segment_names=None,
        segment_codes=None,
    )
    groups = split_rows(rows, window="1h", by_segment=False)
    assert [group.start for group in groups] == [
        datetime(2023, 11, 14, 21, tzinfo=UTC),
        datetime(2023, 11, 14, 22, tzinfo=UTC),
    ]
    assert [group.scores.tolist() for group in groups] == [[0.1], [0.2, 0.3]]


def test_segment_of_only_unlabelled_rows_still_gets_a_group() -> None:
    rows = EvaluationRows(
        scores=np.array([0.1, 0.2, 0.3]),
        labels=np.array([1, 0, UNLABELLED], dtype=np.int8),
        timestamps=None,
        segment_names=("x", "y"),
        segment_codes=np.array([0, 0, 1], dtype=np.int64),
    )
    groups = split_rows(rows, window=None, by_segment=True)
    assert [(g.segment, g.scores.size, g.unlabelled) for g in groups] == [
        ("*", 2, 1),
        ("x", 2, 0),
        ("y", 0, 1),
    ]


def test_missing_columns_are_refused() -> None:
    rows = EvaluationRows(
        scores=np.array([0.1]),
        labels=np.array([1], dtype=np.int8),
        timestamps=None,
        segment_names=None,
        segment_codes=None,
    )
    with pytest.raises(ValueError, match="timestamps"):
        split_rows(rows, window="1h", by_segment=False)
    with pytest.raises(ValueError, match="segment"):
        split_rows(rows, window=None, by_segment=True)
