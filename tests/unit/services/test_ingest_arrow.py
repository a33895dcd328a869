"""The Arrow path checks ids and segments over whole columns, byte by byte: it refuses
exactly the values the JSON schema's patterns refuse; a label stream becomes the columns a
JSON label batch becomes (each id once, its last label)."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from calmon.db.stage_columns import TextColumn
from calmon.names import SEGMENT_PATTERN
from calmon.services.ingest_arrow import id_problems, read_labels, segment_problems
from calmon.services.ingest_batches import LabelColumns
from calmon.services.ingest_schemas import CLIENT_ID_PATTERN

#: (no lone surrogates: UTF-8 cannot carry them, nor can an Arrow string)
#: characters near every boundary the checks draw: controls (C0, DEL, C1), ASCII, the last
#: byte of two-byte sequences, and characters of three and four bytes
TRICKY = st.sampled_from(["\x00", "\x1f", " ", "~", "\x7f", "\x80", "\x9f", "\xa0", "\xff"])
CHARS = st.one_of(
    st.characters(exclude_categories=["Cs"]), TRICKY, st.sampled_from(list("aZ09_.:=-*/ "))
)
VALUES = st.lists(
    st.one_of(st.none(), st.text(CHARS, max_size=70), st.text(CHARS, min_size=120, max_size=140)),
    max_size=20,
)


@given(VALUES)
def test_ids_are_refused_as_the_pattern_refuses_them(values: list[str | None]) -> None:
    too_long, mismatch = id_problems(TextColumn.of(values))
    for value, long, bad in zip(values, too_long.tolist(), mismatch.tolist(), strict=True):
        if value is None:
            assert not long
            assert not bad
            continue
        assert long == (len(value) > 128)
        assert bad == (not long and re.fullmatch(CLIENT_ID_PATTERN, value) is None)


@given(VALUES)
def test_segments_are_refused_as_the_pattern_refuses_them(values: list[str | None]) -> None:
    bad = segment_problems(TextColumn.of(values))
    for value, refused in zip(values, bad.tolist(), strict=True):
        assert refused == (value is not None and re.fullmatch(SEGMENT_PATTERN, value) is None)


def test_segment_pattern_cases() -> None:
    values = ["country=FR", "a" * 64, "a" * 65, "", "-a", "é", "a b", None, "x:y.z_1-2"]
    assert segment_problems(TextColumn.of(values)).tolist() == [
        False,
        False,
        True,
        True,
        True,
        True,
        True,
        False,
        False,
    ]


# no deadline: the first example imports pyarrow's compute functions
@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "cé", "d" * 40, "e"]), st.integers(0, 1))))
def test_label_streams_are_the_columns_of_the_same_json_batch(
    labels: list[tuple[str, int]],
) -> None:
    table = pa.table(
        {
            "id": pa.array([i for i, _ in labels], pa.utf8()),
            "label": pa.array([v for _, v in labels], pa.int8()),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    columns = read_labels(sink.getvalue().to_pybytes())
    expected = LabelColumns.of_items([{"id": i, "label": v} for i, v in labels])
    assert columns.ids.values() == expected.ids.values()
    assert columns.labels.dtype == np.int16
    assert columns.labels.tolist() == expected.labels.tolist()
    assert columns.ids.values() == list(dict.fromkeys(i for i, _ in labels))
