"""A batch for a stage table, column by column, and its PostgreSQL binary ``COPY`` stream.

Ingestion hands the stage its batch as columns (:class:`TextColumn`, :class:`NumberColumn`),
whatever the request's format: a JSON body's validated items are gathered into columns, an
Arrow stream's columns are taken as they are (strings laid end to end as Arrow lays them, no
copy). :func:`binary_copy` writes the ``COPY … (FORMAT BINARY)`` stream of the whole batch with
NumPy, a few array operations per column and none per row; :func:`column_rows` gives the rows
back as Python values, for SQLite's ``executemany`` and for messages.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeAlias, cast

import numpy as np
import numpy.typing as npt

from calmon.timeline import EPOCH

#: the binary COPY header: signature, flags, header extension length
_HEADER: Final = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_TRAILER: Final = b"\xff\xff"
#: microseconds from the Unix epoch to PostgreSQL's (2000-01-01T00:00:00Z)
PG_EPOCH_US: Final = 946_684_800 * 1_000_000
#: the big-endian form of each PostgreSQL type a stage column may have, by type name
_WIRE: Final[dict[str, np.dtype[np.generic]]] = {
    "timestamptz": np.dtype(">i8"),
    "float8": np.dtype(">f8"),
    "int2": np.dtype(">i2"),
    "int4": np.dtype(">i4"),
    "int8": np.dtype(">i8"),
}
_LENGTH: Final = np.dtype(">i4")


@dataclass(frozen=True, slots=True)
class TextColumn:
    """Strings as Arrow lays them out: value ``i`` is the UTF-8 text
    ``data[offsets[i]:offsets[i + 1]]``, null where ``valid[i]`` is False (``valid`` None:
    no null)."""

    offsets: npt.NDArray[np.int64]
    data: npt.NDArray[np.uint8]
    valid: npt.NDArray[np.bool_] | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def of(cls, values: Sequence[str | None]) -> TextColumn:
        """The column of ``values`` (None: null). Text that is all ASCII (ids and segments
        nearly always are) is encoded in one piece, with no Python work per value."""
        valid = None
        if None in values:
            valid = np.fromiter((value is not None for value in values), bool, len(values))
            values = [value if value is not None else "" for value in values]
        texts = cast(Sequence[str], values)
        joined = "".join(texts)
        if joined.isascii():
            lengths = np.fromiter(map(len, texts), np.int64, len(texts))
            data = joined.encode("ascii")
        else:
            encoded = [value.encode() for value in texts]
            lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
            data = b"".join(encoded)
        offsets = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(offsets, np.frombuffer(data, np.uint8), valid)

    def values(self) -> list[str | None]:
        """The strings (None for a null)."""
        raw = self.data.tobytes()
        bounds = self.offsets.tolist()
        out: list[str | None] = [
            raw[start:end].decode() for start, end in itertools.pairwise(bounds)
        ]
        if self.valid is not None:
            out = [
                value if ok else None for value, ok in zip(out, self.valid.tolist(), strict=True)
            ]
        return out


@dataclass(frozen=True, slots=True)
class NumberColumn:
    """Fixed-width values (for ``timestamptz``: microseconds since the Unix epoch), null where
    ``valid[i]`` is False (``valid`` None: no null)."""

    values: npt.NDArray[np.generic]
    valid: npt.NDArray[np.bool_] | None = None

    def __len__(self) -> int:
        return len(self.values)


StageColumn: TypeAlias = TextColumn | NumberColumn


#: rows encoded at a time: bounds the index arrays of a large batch (some 100 bytes a row)
CHUNK_ROWS: Final = 8192


def binary_copy(columns: Sequence[StageColumn], pg_types: Sequence[str]) -> bytes:
    """The ``COPY … FROM STDIN (FORMAT BINARY)`` stream of ``columns``, whose PostgreSQL types
    are ``pg_types`` (``text`` for a :class:`TextColumn`; ``timestamptz``, ``float8``,
    ``int2``, ``int4`` or ``int8`` for a :class:`NumberColumn`).

    Each row is its field count, then per field a length (-1: null) and the value's bytes. The
    length of every field of every row is known from the columns, so the stream is written
    with a few array operations per column and none per row, :data:`CHUNK_ROWS` rows at a
    time."""
    n = len(columns[0])
    parts = [_HEADER]
    for start in range(0, n, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, n)
        parts.append(_rows([_slice(column, start, stop) for column in columns], pg_types))
    parts.append(_TRAILER)
    return b"".join(parts)


def _slice(column: StageColumn, start: int, stop: int) -> StageColumn:
    valid = None if column.valid is None else column.valid[start:stop]
    if isinstance(column, TextColumn):
        return TextColumn(column.offsets[start : stop + 1], column.data, valid)
    return NumberColumn(column.values[start:stop], valid)


def _rows(columns: Sequence[StageColumn], pg_types: Sequence[str]) -> bytes:
    """The rows of ``columns`` in the binary COPY format (no header, no trailer).

    The fixed-width bytes of every row (field count, each field's length, each number) are
    laid out as one record array; each row of the stream is then a few pieces taken in turn
    from its record and from the text columns' data, and the whole stream is one gather."""
    n = len(columns[0])
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for position, (column, pg_type) in enumerate(zip(columns, pg_types, strict=True)):
        fields.append((f"length{position}", ">i4"))
        if isinstance(column, NumberColumn):
            fields.append((f"value{position}", _WIRE[pg_type].str))
    record = np.empty(n, np.dtype(fields))
    record["count"] = len(columns)
    sources: list[npt.NDArray[np.uint8]] = []
    base = n * record.dtype.itemsize
    # pieces of each row, in order: (source start per row, length per row)
    pieces: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
    fixed_from = np.arange(n, dtype=np.int64) * record.dtype.itemsize
    run = 2  # bytes of the record since the last cut (the field count first)
    cut = 0  # where in the record the current run starts
    for position, (column, pg_type) in enumerate(zip(columns, pg_types, strict=True)):
        if isinstance(column, TextColumn):
            length = np.diff(column.offsets)
        else:
            length = np.full(n, _WIRE[pg_type].itemsize, np.int64)
        present = length if column.valid is None else np.where(column.valid, length, 0)
        record[f"length{position}"] = (
            length if column.valid is None else np.where(column.valid, length, -1)
        )
        run += 4
        if isinstance(column, TextColumn):
            pieces.append((fixed_from + cut, np.full(n, run, np.int64)))
            cut, run = cut + run, 0
            first = int(column.offsets[0]) if n else 0
            last = int(column.offsets[-1]) if n else 0
            pieces.append((column.offsets[:-1] - first + base, present))
            sources.append(column.data[first:last])
            base += last - first
            continue
        values = column.values
        if pg_type == "timestamptz":
            values = values.astype(np.int64) - PG_EPOCH_US
        record[f"value{position}"] = values
        width = _WIRE[pg_type].itemsize
        if column.valid is None:
            run += width
            continue
        pieces.append((fixed_from + cut, np.full(n, run, np.int64)))
        pieces.append((fixed_from + cut + run, present))
        cut, run = cut + run + width, 0
    if run:
        pieces.append((fixed_from + cut, np.full(n, run, np.int64)))
    lengths = np.stack([length for _, length in pieces], axis=1).ravel()
    starts = np.stack([start for start, _ in pieces], axis=1).ravel()
    source = np.concatenate([record.view(np.uint8).ravel(), *sources])
    return bytes(source[_gather_index(starts, lengths)].data)


def _gather_index(
    starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> npt.NDArray[np.signedinteger[Any]]:
    """The source position of each byte of the pieces laid end to end (piece ``k``: ``lengths[k]``
    bytes from ``starts[k]``): a running sum of steps of one, with at each piece's first byte
    the jump from where the previous piece ended. Two passes over the bytes (a fill and a
    cumulative sum), in 32-bit integers while the source allows it (a chunk of rows always
    does), where spreading each piece's offset over its bytes took four."""
    present = lengths > 0
    starts, lengths = starts[present], lengths[present]
    total = int(lengths.sum())
    kind = np.int32 if int(starts.max()) + int(lengths.max()) < 2**31 else np.int64
    step = np.ones(total, kind)
    jumps = starts.copy()
    jumps[1:] -= starts[:-1] + lengths[:-1] - 1
    step[np.cumsum(lengths) - lengths] = jumps
    return np.cumsum(step, dtype=kind)


def timestamps(micros: npt.NDArray[np.int64]) -> list[datetime]:
    """Aware UTC datetimes of microseconds since the Unix epoch."""
    step = timedelta(microseconds=1)
    return [EPOCH + value * step for value in micros.tolist()]


def column_rows(
    columns: Sequence[StageColumn], pg_types: Sequence[str]
) -> list[tuple[object, ...]]:
    """The rows of ``columns`` as Python values (``timestamptz``: aware UTC datetimes; null:
    None), for an ``executemany``."""
    lists: list[list[object]] = []
    for column, pg_type in zip(columns, pg_types, strict=True):
        if isinstance(column, TextColumn):
            lists.append(list(column.values()))
            continue
        values: list[object] = (
            list(timestamps(column.values.astype(np.int64)))
            if pg_type == "timestamptz"
            else column.values.tolist()
        )
        if column.valid is not None:
            values = [
                v if ok else None for v, ok in zip(values, column.valid.tolist(), strict=True)
            ]
        lists.append(values)
    return list(zip(*lists, strict=True))
