"""Batches sent as an Arrow IPC stream (``application/vnd.apache.arrow.stream``): read,
checked column by column, and handed on as
:class:`~calmon.services.ingest_batches.PredictionColumns` (or label items), with no Python
work per row on the way to the stage's binary ``COPY``.

The rules are those of a JSON body (``docs/reference/api.md``), checked with NumPy over whole
columns read in place from the body's buffers: a column missing, unknown or of another type is
refused by its name (``field`` = the column); an invalid value by its row and column, as JSON names
an item's field (``predictions[17].score``, pydantic's error types and messages), so that a sender
can drop just the rows named. pyarrow is an optional dependency (``calmon[arrow]``):
:func:`arrow_available` says whether this process has it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from pydantic_core import PydanticKnownError

from calmon.db.stage_columns import TextColumn
from calmon.names import SEGMENT_PATTERN
from calmon.services.errors import ServiceError
from calmon.services.ingest_batches import LabelColumns, PredictionColumns
from calmon.services.ingest_schemas import (
    CLIENT_ID_PATTERN,
    MAX_BATCH,
    earliest_timestamp,
    latest_timestamp,
)
from calmon.timeline import EPOCH, iso

ARROW_MEDIA_TYPE: Final = "application/vnd.apache.arrow.stream"
#: rows an Arrow stream may carry: ten times a JSON body's items. The body limit
#: (``CALMON_MAX_BODY_BYTES``, 8 MiB by default) bounds the memory first: the columns are read
#: in place from the body; checking them and writing the COPY stream take up to about six times
#: the body (``docs/reference/api.md``).
MAX_ARROW_BATCH: Final = 100_000
#: the most invalid values an answer names (as many as a JSON body can have items)
MAX_DETAILS: Final = MAX_BATCH
_UTC_NAMES: Final = frozenset({"UTC", "Etc/UTC", "+00:00"})
_MAX_ID_LENGTH: Final = 128


@functools.cache
def arrow_available() -> bool:
    """Whether pyarrow can be imported here (the ``arrow`` extra is installed); imported once,
    on the first Arrow request."""
    try:
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        return False
    return True


class ArrowBatchError(ServiceError):
    """An Arrow batch refused by its columns or values (422, details as JSON's)."""

    status = 422


class ArrowStreamError(ServiceError):
    """A body that is not a readable Arrow IPC stream (400)."""

    status = 400


@dataclass(frozen=True, slots=True)
class _Column:
    """What a column must be: its name, a description of its type for messages, whether it
    may be absent, whether it may hold nulls."""

    name: str
    kind: str
    required: bool
    nullable: bool


_PREDICTION_COLUMNS: Final = (
    _Column("id", "utf8", required=True, nullable=False),
    _Column("timestamp", "timestamp[us, tz=UTC]", required=True, nullable=False),
    _Column("score", "float64", required=True, nullable=False),
    _Column("label", "int8", required=False, nullable=True),
    _Column("segment", "utf8", required=False, nullable=True),
)
_LABEL_COLUMNS: Final = (
    _Column("id", "utf8", required=True, nullable=False),
    _Column("label", "int8", required=True, nullable=False),
)
#: each column's rule, as the OpenAPI document states it
_RULES: Final = {
    "id": "as JSON's `id`: 1 to 128 characters, no control character",
    "timestamp": "as JSON's `timestamp`: from the retention bound to a day past the server's clock",
    "score": "as JSON's `score`: finite; in [0, 1] for a `probability` model",
    "label": "0 or 1",
    "segment": "as JSON's `segment` (also a dictionary of utf8, a data frame's categorical)",
}


def describe_columns(route: str) -> str:
    """The Arrow stream a route takes (``predictions`` or ``labels``), in Markdown for the
    OpenAPI document: its columns (name, type, nullability, rule) and its row bound."""
    specs = _PREDICTION_COLUMNS if route == "predictions" else _LABEL_COLUMNS
    lines = [
        f"Or an Arrow IPC stream (`{ARROW_MEDIA_TYPE}`, where the server has pyarrow, the"
        " `calmon[arrow]` extra; 415 otherwise) of one schema, up to"
        f" {MAX_ARROW_BATCH:,} rows within the body limit, all or nothing as JSON:",
        "",
        "| column | Arrow type | required | nulls | rule |",
        "|---|---|---|---|---|",
    ]
    for spec in specs:
        lines.append(
            f"| `{spec.name}` | `{spec.kind}` | {'yes' if spec.required else 'no'}"
            f" | {'yes' if spec.nullable else 'no'} | {_RULES[spec.name]} |"
        )
    lines += [
        "",
        "A column missing, unknown, sent twice or of another type is 422 with `field` = the"
        f" column; an invalid value is named as JSON names it (`{route}[17].{specs[-1].name}`).",
    ]
    return "\n".join(lines)


@dataclass
class _Problems:
    """Invalid values found so far, each as ``(row, column position, detail)``."""

    root: str
    found: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)

    def add(self, rows: npt.NDArray[np.bool_], position: int, name: str, error: Any) -> None:
        """Name every row where ``rows`` is True, with ``error`` (a PydanticKnownError)."""
        message = error.message()
        for row in np.flatnonzero(rows)[:MAX_DETAILS].tolist():
            detail = {"field": f"{self.root}[{row}].{name}", "message": message, "type": error.type}
            self.found.append((row, position, detail))

    def raise_any(self) -> None:
        if not self.found:
            return
        self.found.sort(key=lambda item: (item[0], item[1]))
        details = [detail for _, _, detail in self.found[:MAX_DETAILS]]
        count = len(self.found)
        raise ArrowBatchError(
            "validation_error",
            f"{count} invalid field{'s' if count != 1 else ''}: {details[0]['field']}"
            + (" …" if count > 1 else ""),
            details,
        )


def _column_error(name: str, message: str, error_type: str) -> ArrowBatchError:
    return ArrowBatchError(
        "validation_error",
        f"column {name!r}: {message}",
        [{"field": name, "message": message, "type": error_type}],
    )


def _read(body: bytes) -> Any:
    """The table of an Arrow IPC stream, its buffers checked (offsets in bounds, UTF-8 valid)."""
    import pyarrow as pa

    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        table.validate(full=True)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise ArrowStreamError(
            "invalid_arrow", f"the body is not a valid Arrow IPC stream: {exc}"
        ) from None
    return table


def stream_rows(body: bytes) -> int | None:
    """The rows of ``body`` read as an Arrow IPC stream, or None when it is not one (or pyarrow
    is absent): what a rejected request counts in ``calmon_ingest_rejected_total``."""
    if not body.startswith(b"\xff\xff\xff\xff") or not arrow_available():
        return None
    import pyarrow as pa

    try:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        return sum(int(batch.num_rows) for batch in reader)
    except (pa.ArrowException, ValueError, OSError):
        return None


def _type_ok(spec: _Column, arrow_type: Any) -> bool:
    import pyarrow as pa

    if spec.kind == "utf8":
        return bool(
            pa.types.is_string(arrow_type)
            or (
                spec.name == "segment"
                and pa.types.is_dictionary(arrow_type)
                and pa.types.is_string(arrow_type.value_type)
            )
        )
    if spec.kind == "int8":
        return bool(pa.types.is_int8(arrow_type))
    if spec.kind == "float64":
        return bool(pa.types.is_float64(arrow_type))
    return bool(
        pa.types.is_timestamp(arrow_type)
        and arrow_type.unit == "us"
        and arrow_type.tz in _UTC_NAMES
    )


def _columns(table: Any, specs: Sequence[_Column], root: str, limit: int) -> dict[str, Any]:
    """The stream's columns by name, each as one array, after the checks that concern a whole
    column: names, types, row count."""
    names = list(table.column_names)
    known = {spec.name for spec in specs}
    for name in names:
        if name not in known:
            raise _column_error(
                name,
                f"unknown column; the columns are {', '.join(s.name for s in specs)}",
                "extra_forbidden",
            )
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise _column_error(twice, "sent twice", "duplicate_column")
    found: dict[str, Any] = {}
    for spec in specs:
        if spec.name not in names:
            if spec.required:
                raise _column_error(spec.name, f"required column ({spec.kind})", "missing")
            continue
        column = table.column(spec.name)
        if not _type_ok(spec, column.type):
            raise _column_error(spec.name, f"must be {spec.kind}, got {column.type}", "column_type")
        found[spec.name] = column.combine_chunks()
    if table.num_rows > limit:
        raise ArrowBatchError(
            "validation_error",
            f"1 invalid field: {root}",
            [
                {
                    "field": root,
                    "message": f"List should have at most {limit} items after validation, "
                    f"not {table.num_rows}",
                    "type": "too_long",
                }
            ],
        )
    return found


def _valid(array: Any) -> npt.NDArray[np.bool_] | None:
    """Where ``array`` holds a value, from its validity bitmap (None: no null)."""
    if array.null_count == 0:
        return None
    bits = np.unpackbits(np.frombuffer(array.buffers()[0], np.uint8), bitorder="little")
    return bits[array.offset : array.offset + len(array)].astype(bool)


def _nulls(array: Any) -> npt.NDArray[np.bool_]:
    valid = _valid(array)
    return np.zeros(len(array), bool) if valid is None else ~valid


def _fixed(array: Any, dtype: type[np.generic]) -> npt.NDArray[Any]:
    """The values of a fixed-width array, read in place (anything where it is null)."""
    width = np.dtype(dtype).itemsize
    values = array.buffers()[1]
    if values is None:
        return np.zeros(len(array), dtype)
    return np.frombuffer(values, dtype, count=len(array), offset=array.offset * width)


def _text(array: Any) -> TextColumn:
    """A utf8 array as a :class:`TextColumn`, on the array's own buffers."""
    n = len(array)
    _, offsets, data = array.buffers()
    starts = np.frombuffer(offsets, np.int32, count=n + 1, offset=array.offset * 4)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return TextColumn(starts.astype(np.int64), raw, _valid(array))


def _rows_holding(column: TextColumn, marked: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """The rows of ``column`` whose text holds a byte marked in ``marked`` (one flag per byte
    of ``column.data``)."""
    found = np.zeros(len(column), bool)
    positions = np.flatnonzero(marked)
    offsets = column.offsets
    positions = positions[(positions >= offsets[0]) & (positions < offsets[-1])]
    found[np.searchsorted(offsets, positions, side="right") - 1] = True
    return found


def _char_counts(column: TextColumn) -> npt.NDArray[np.int32]:
    """The characters of each value: its bytes that do not continue a UTF-8 sequence."""
    starts = np.zeros(len(column.data) + 1, np.int32)
    np.cumsum((column.data & 0xC0) != 0x80, out=starts[1:], dtype=np.int32)
    return starts[column.offsets[1:]] - starts[column.offsets[:-1]]


def id_problems(column: TextColumn) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The rows whose id is too long (over 128 characters), and the other rows whose id does
    not match :data:`~calmon.services.ingest_schemas.CLIENT_ID_PATTERN` (empty, or holding a
    control character: C0 and DEL are single bytes in UTF-8, C1 the two bytes C2 80 to C2 9F);
    nulls are neither."""
    data = column.data
    control = (data < 0x20) | (data == 0x7F)
    if len(data) and int(data.max()) >= 0x80:
        control[:-1] |= (data[:-1] == 0xC2) & (data[1:] >= 0x80) & (data[1:] <= 0x9F)
        chars = _char_counts(column)
    else:  # all ASCII (ids nearly always are): one character a byte
        chars = np.diff(column.offsets).astype(np.int32)
    too_long = chars > _MAX_ID_LENGTH
    mismatch = ((chars == 0) | _rows_holding(column, control)) & ~too_long
    if column.valid is not None:
        too_long &= column.valid
        mismatch &= column.valid
    return too_long, mismatch


def _segment_tables() -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Per byte: whether it may open a segment, and whether it may follow (from the pattern)."""
    first = [re.fullmatch(SEGMENT_PATTERN, chr(b)) is not None for b in range(256)]
    rest = [re.fullmatch(SEGMENT_PATTERN, "a" + chr(b)) is not None for b in range(256)]
    return np.array(first), np.array(rest)


_SEGMENT_FIRST, _SEGMENT_REST = _segment_tables()
#: the longest segment :data:`~calmon.names.SEGMENT_PATTERN` matches (ASCII: bytes = characters)
SEGMENT_MAX: Final = 64


def segment_problems(column: TextColumn) -> npt.NDArray[np.bool_]:
    """The rows whose segment does not match :data:`~calmon.names.SEGMENT_PATTERN` (ASCII
    only, so checked byte by byte); nulls (no segment) are fine."""
    data = column.data
    lengths = np.diff(column.offsets)
    holding = _rows_holding(column, ~_SEGMENT_REST[data])
    bad: npt.NDArray[np.bool_] = (lengths == 0) | (lengths > SEGMENT_MAX) | holding
    if len(data):
        opening = data[np.minimum(column.offsets[:-1], len(data) - 1)]
        bad |= ~_SEGMENT_FIRST[opening]
    if column.valid is not None:
        bad &= column.valid
    return bad


def _check_ids(column: TextColumn, problems: _Problems, position: int) -> None:
    too_long, mismatch = id_problems(column)
    length = PydanticKnownError("string_too_long", {"max_length": _MAX_ID_LENGTH})
    problems.add(too_long, position, "id", length)
    pattern = PydanticKnownError("string_pattern_mismatch", {"pattern": CLIENT_ID_PATTERN})
    problems.add(mismatch, position, "id", pattern)


def _check_nulls(columns: dict[str, Any], specs: Sequence[_Column], problems: _Problems) -> None:
    for position, spec in enumerate(specs):
        array = columns.get(spec.name)
        if array is not None and not spec.nullable and array.null_count:
            problems.add(_nulls(array), position, spec.name, PydanticKnownError("missing"))


def _check_range(
    values: npt.NDArray[Any],
    bounds: tuple[Any, Any],
    shown: tuple[object, object],
    where: npt.NDArray[np.bool_] | None,
    problem: tuple[_Problems, int, str],
) -> None:
    """Name the values under or over ``bounds`` (shown in messages as ``shown``), among those
    ``where`` marks (None: all)."""
    problems, position, name = problem
    low, high = values < bounds[0], values > bounds[1]
    if where is not None:
        low &= where
        high &= where
    problems.add(low, position, name, PydanticKnownError("greater_than_equal", {"ge": shown[0]}))
    problems.add(high, position, name, PydanticKnownError("less_than_equal", {"le": shown[1]}))


def read_predictions(
    body: bytes, *, probability: bool, now: datetime, retention_days: int
) -> PredictionColumns:
    """The predictions of an Arrow stream, checked as a JSON batch is for a model whose scores
    are probabilities (``probability``) or any finite number, at the server's clock ``now``
    with predictions kept ``retention_days`` (0: for ever).

    Raises :class:`ArrowStreamError` (400) for a body that is no Arrow stream and
    :class:`ArrowBatchError` (422) for a wrong column or an invalid value."""
    specs = _PREDICTION_COLUMNS
    columns = _columns(_read(body), specs, "predictions", MAX_ARROW_BATCH)
    problems = _Problems("predictions")
    _check_nulls(columns, specs, problems)
    ids = _text(columns["id"])
    _check_ids(ids, problems, 0)
    stamps = _fixed(columns["timestamp"], np.int64)
    earliest, latest = earliest_timestamp(now, retention_days), latest_timestamp(now)
    lo, hi = _micros(earliest), _micros(latest)
    bounds = (iso(earliest), iso(latest))
    _check_range(stamps, (lo, hi), bounds, _valid(columns["timestamp"]), (problems, 1, "timestamp"))
    scores = _fixed(columns["score"], np.float64)
    present = _valid(columns["score"])
    finite = np.isfinite(scores)
    problems.add(~finite if present is None else ~finite & present, 2, "score", _FINITE)
    if probability:
        in_range = finite if present is None else finite & present
        _check_range(scores, (0.0, 1.0), (0.0, 1.0), in_range, (problems, 2, "score"))
    labels, label_valid = _labels(columns.get("label"), len(ids))
    _check_range(labels, (0, 1), (0, 1), label_valid, (problems, 3, "label"))
    segments = _segments(columns.get("segment"), len(ids), problems)
    problems.raise_any()
    return PredictionColumns(
        ids=ids,
        ts_us=stamps,
        scores=scores,
        labels=labels.astype(np.int16),
        label_valid=label_valid,
        segments=segments,
    )


_FINITE: Final = PydanticKnownError("finite_number")


def _micros(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def _labels(array: Any, n: int) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.bool_] | None]:
    """A label column's values (anything where null) and where it has one (None: every row)."""
    if array is None:
        return np.zeros(n, np.int8), np.zeros(n, bool)
    return _fixed(array, np.int8), _valid(array)


def _segments(array: Any, n: int, problems: _Problems) -> TextColumn:
    """The segment column (dictionary-encoded ones decoded), its values checked."""
    import pyarrow as pa

    if array is None:
        return TextColumn(np.zeros(n + 1, np.int64), np.zeros(0, np.uint8), np.zeros(n, bool))
    pattern = PydanticKnownError("string_pattern_mismatch", {"pattern": SEGMENT_PATTERN})
    if pa.types.is_dictionary(array.type):
        # each distinct segment checked once, in the dictionary, and named at every row using it
        valid = _valid(array)
        bad = np.zeros(n, bool)
        if len(array.dictionary):
            codes = _fixed(array.indices, array.indices.type.to_pandas_dtype()).astype(np.intp)
            if valid is not None:  # a null row's index may be anything
                codes = np.where(valid, codes, 0)
            bad = segment_problems(_text(array.dictionary))[codes]
            if valid is not None:
                bad &= valid
        problems.add(bad, 4, "segment", pattern)
        return _text(array.dictionary_decode())
    column = _text(array)
    problems.add(segment_problems(column), 4, "segment", pattern)
    return column


def read_labels(body: bytes) -> LabelColumns:
    """The labels of an Arrow stream (columns ``id`` utf8 and ``label`` int8, no null), checked
    as a JSON label batch is, as columns of distinct ids (the last label sent for an id wins,
    as in JSON); raises as :func:`read_predictions` does."""
    specs = _LABEL_COLUMNS
    columns = _columns(_read(body), specs, "labels", MAX_ARROW_BATCH)
    problems = _Problems("labels")
    _check_nulls(columns, specs, problems)
    _check_ids(_text(columns["id"]), problems, 0)
    values = _fixed(columns["label"], np.int8)
    _check_range(values, (0, 1), (0, 1), _valid(columns["label"]), (problems, 1, "label"))
    problems.raise_any()
    ids = columns["id"]
    last = _last_of_each(ids)
    if last is not None:
        ids, values = ids.take(last), values[last]
    return LabelColumns(_text(ids), values.astype(np.int16))


def _last_of_each(ids: Any) -> npt.NDArray[np.int64] | None:
    """The row of each id's last copy, in the order of the ids' first copies (as a dict of
    JSON's items keeps them), or None when every id is sent once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(ids)
    distinct = pc.unique(ids)
    if len(distinct) == n:
        return None
    backwards = ids.take(pa.array(np.arange(n - 1, -1, -1)))
    last = n - 1 - pc.index_in(distinct, value_set=backwards).to_numpy()
    return np.asarray(last, np.int64)
