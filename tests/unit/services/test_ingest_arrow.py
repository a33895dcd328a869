"""The Arrow path checks ids and segments over whole columns, byte by byte: it refuses
exactly the values the JSON schema's patterns refuse."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from calmon.db.stage_columns import TextColumn
from calmon.names import SEGMENT_PATTERN
from calmon.services.ingest_arrow import id_problems, segment_problems
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
