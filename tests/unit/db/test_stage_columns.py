"""The binary COPY stream written from columns is byte for byte the one a row-by-row writer of
PostgreSQL's binary format gives (nulls, empty and multi-byte strings, timestamps around both
epochs), and the columns give their rows back."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from calmon.db import stage_columns
from calmon.db.stage_columns import (
    PG_EPOCH_US,
    NumberColumn,
    StageColumn,
    TextColumn,
    binary_copy,
    column_rows,
)
from calmon.timeline import EPOCH

TYPES = ["text", "timestamptz", "float8", "int2", "text"]
US = timedelta(microseconds=1)


Row = tuple[str, int, float, int | None, str | None]


def row_by_row(rows: list[Row]) -> bytes:
    """PostgreSQL's binary COPY format written one field at a time, as its manual says."""
    out = [b"PGCOPY\n\xff\r\n\x00", struct.pack(">ii", 0, 0)]
    for client_id, micros, score, label, segment in rows:
        out.append(struct.pack(">h", 5))
        raw = client_id.encode()
        out.append(struct.pack(">i", len(raw)) + raw)
        out.append(struct.pack(">iq", 8, micros - PG_EPOCH_US))
        out.append(struct.pack(">id", 8, score))
        out.append(struct.pack(">i", -1) if label is None else struct.pack(">ih", 2, label))
        if segment is None:
            out.append(struct.pack(">i", -1))
        else:
            raw = segment.encode()
            out.append(struct.pack(">i", len(raw)) + raw)
    out.append(struct.pack(">h", -1))
    return b"".join(out)


def columns_of(rows: list[Row]) -> list[StageColumn]:
    ids = [row[0] for row in rows]
    micros = [row[1] for row in rows]
    scores = [row[2] for row in rows]
    labels = [row[3] for row in rows]
    segments = [row[4] for row in rows]
    return [
        TextColumn.of(ids),
        NumberColumn(np.array(micros, np.int64)),
        NumberColumn(np.array(scores, np.float64)),
        NumberColumn(
            np.array([label or 0 for label in labels], np.int16),
            np.array([label is not None for label in labels], bool),
        ),
        TextColumn.of(segments),
    ]


ROWS = st.lists(
    st.tuples(
        st.text(min_size=0, max_size=20),
        st.integers(min_value=-(2**50), max_value=2**52),
        st.floats(allow_nan=False),
        st.one_of(st.none(), st.sampled_from([0, 1])),
        st.one_of(st.none(), st.text(max_size=10)),
    ),
    max_size=30,
)


@given(ROWS)
def test_stream_is_postgresql_binary_format(rows: list[Row]) -> None:
    columns = columns_of(rows)
    assert binary_copy(columns, TYPES) == row_by_row(rows)


@given(ROWS)
def test_rows_come_back(rows: list[Row]) -> None:
    back = column_rows(columns_of(rows), TYPES)
    assert back == [(i, EPOCH + m * US, s, lab, seg) for i, m, s, lab, seg in rows]


def test_arrow_layout_with_offsets_not_from_zero() -> None:
    """Arrow's slices keep the buffers of the whole array: offsets need not start at 0."""
    data = np.frombuffer("xxabcdé".encode(), np.uint8)
    column = TextColumn(np.array([2, 3, 5, 8]), data, np.array([True, False, True]))
    assert column.values() == ["a", None, "dé"]
    stamp = datetime(2000, 1, 1, tzinfo=UTC)
    micros = (stamp - EPOCH) // US
    stream = binary_copy(
        [column, NumberColumn(np.full(3, micros, np.int64))], ["text", "timestamptz"]
    )
    field_count, length = struct.unpack(">hi", stream[19:25])
    assert (field_count, length, stream[25:26]) == (2, 1, b"a")
    assert struct.unpack(">iq", stream[26:38]) == (8, 0)


def test_a_batch_is_written_in_chunks_of_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    rows: list[Row] = [
        (
            f"id-{i}",
            i * 1_000_003,
            i / 7,
            [None, 0, 1][i % 3],
            [None, "s", "é"][i % 3 if i % 2 else 0],
        )
        for i in range(20)
    ]
    whole = binary_copy(columns_of(rows), TYPES)
    monkeypatch.setattr(stage_columns, "CHUNK_ROWS", 3)
    assert binary_copy(columns_of(rows), TYPES) == whole == row_by_row(rows)
