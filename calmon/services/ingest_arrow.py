"""Batches sent as an Arrow IPC stream (``application/vnd.apache.arrow.stream``): read,
checked column by column, and handed on as
:class:`~calmon.services.ingest_batches.PredictionColumns` (or label items), with no Python
work per row on the way to the stage's binary ``COPY``.

The rules are those of a JSON body (``docs/api.md``), checked with Arrow's compute functions
and NumPy over whole columns: a column missing, unknown or of another type is refused by its
name (``field`` = the column); an invalid value by its row and column, as JSON names an item's
field (``predictions[17].score``, pydantic's error types and messages), so that a sender can
drop just the rows named. pyarrow is an optional dependency (``calmon[arrow]``):
:func:`arrow_available` says whether this process has it.
"""

from __future__ import annotations

import functools
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
from calmon.services.ingest_batches import PredictionColumns
from calmon.services.ingest_schemas import (
    CLIENT_ID_PATTERN,
    MAX_BATCH,
    LabelIn,
    earliest_timestamp,
    latest_timestamp,
)
from calmon.timeline import EPOCH, iso

ARROW_MEDIA_TYPE: Final = "application/vnd.apache.arrow.stream"
#: rows an Arrow stream may carry: ten times a JSON body's items. The body limit
#: (``CALMON_MAX_BODY_BYTES``, 8 MiB by default) bounds the memory first: the columns are read
#: in place from the body, and the COPY stream is about as large as the body again.
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
        import pyarrow.compute
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


def _nulls(array: Any) -> npt.NDArray[np.bool_]:
    return np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _text(array: Any) -> TextColumn:
    """A utf8 array as a :class:`TextColumn`, on the array's own buffers."""
    n = len(array)
    _, offsets, data = array.buffers()
    starts = np.frombuffer(offsets, np.int32, count=n + 1, offset=array.offset * 4)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    valid = None if array.null_count == 0 else ~_nulls(array)
    return TextColumn(starts.astype(np.int64), raw, valid)


def _check_ids(array: Any, problems: _Problems, position: int) -> None:
    import pyarrow.compute as pc

    lengths = pc.utf8_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    too_long = lengths > _MAX_ID_LENGTH
    problems.add(
        too_long,
        position,
        "id",
        PydanticKnownError("string_too_long", {"max_length": _MAX_ID_LENGTH}),
    )
    matches = (
        pc.match_substring_regex(array, CLIENT_ID_PATTERN)
        .fill_null(True)
        .to_numpy(zero_copy_only=False)
    )
    problems.add(
        ~np.asarray(matches, bool) & ~too_long,
        position,
        "id",
        PydanticKnownError("string_pattern_mismatch", {"pattern": CLIENT_ID_PATTERN}),
    )


def _check_nulls(columns: dict[str, Any], specs: Sequence[_Column], problems: _Problems) -> None:
    for position, spec in enumerate(specs):
        array = columns.get(spec.name)
        if array is not None and not spec.nullable and array.null_count:
            problems.add(_nulls(array), position, spec.name, PydanticKnownError("missing"))


def _check_range(
    values: npt.NDArray[Any],
    lo: Any,
    hi: Any,
    shown: tuple[object, object],
    where: tuple[_Problems, int, str],
) -> None:
    """Name the values under ``lo`` or over ``hi`` (shown in messages as ``shown``)."""
    problems, position, name = where
    problems.add(
        values < lo, position, name, PydanticKnownError("greater_than_equal", {"ge": shown[0]})
    )
    problems.add(
        values > hi, position, name, PydanticKnownError("less_than_equal", {"le": shown[1]})
    )


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
    ids = columns["id"]
    _check_ids(ids, problems, 0)
    stamps = np.asarray(columns["timestamp"].to_numpy(zero_copy_only=False)).view(np.int64)
    earliest, latest = earliest_timestamp(now, retention_days), latest_timestamp(now)
    present = ~_nulls(columns["timestamp"]) if columns["timestamp"].null_count else True
    where_ts = (problems, 1, "timestamp")
    _check_range(
        np.where(present, stamps, _micros(earliest)),
        _micros(earliest),
        _micros(latest),
        (iso(earliest), iso(latest)),
        where_ts,
    )
    scores = np.asarray(columns["score"].to_numpy(zero_copy_only=False), np.float64)
    finite = np.isfinite(scores) | _nulls(columns["score"])
    problems.add(~finite, 2, "score", PydanticKnownError("finite_number"))
    if probability:
        _check_range(np.where(finite, scores, 0.5), 0.0, 1.0, (0.0, 1.0), (problems, 2, "score"))
    labels, label_valid = _labels(columns.get("label"), len(ids))
    _check_range(labels, 0, 1, (0, 1), (problems, 3, "label"))
    segments = _segments(columns.get("segment"), len(ids), problems)
    problems.raise_any()
    return PredictionColumns(
        ids=_text(ids),
        ts_us=stamps,
        scores=scores,
        labels=labels.astype(np.int16),
        label_valid=label_valid,
        segments=segments,
    )


def _micros(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def _labels(array: Any, n: int) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.bool_] | None]:
    """A label column's values (0 where null) and where it has one (None: every row)."""
    if array is None:
        return np.zeros(n, np.int8), np.zeros(n, bool)
    values = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), np.int8)
    return values, (None if array.null_count == 0 else ~_nulls(array))


def _segments(array: Any, n: int, problems: _Problems) -> TextColumn:
    """The segment column (dictionary-encoded ones decoded), its values checked."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if array is None:
        return TextColumn(np.zeros(n + 1, np.int64), np.zeros(0, np.uint8), np.zeros(n, bool))
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    matches = pc.match_substring_regex(array, SEGMENT_PATTERN).fill_null(True)
    problems.add(
        ~np.asarray(matches.to_numpy(zero_copy_only=False), bool),
        4,
        "segment",
        PydanticKnownError("string_pattern_mismatch", {"pattern": SEGMENT_PATTERN}),
    )
    return _text(array)


def read_labels(body: bytes) -> list[LabelIn]:
    """The labels of an Arrow stream (columns ``id`` utf8 and ``label`` int8, no null), checked
    as a JSON label batch is; raises as :func:`read_predictions` does."""
    specs = _LABEL_COLUMNS
    columns = _columns(_read(body), specs, "labels", MAX_ARROW_BATCH)
    problems = _Problems("labels")
    _check_nulls(columns, specs, problems)
    _check_ids(columns["id"], problems, 0)
    labels = columns["label"]
    values = np.asarray(labels.fill_null(0).to_numpy(zero_copy_only=False), np.int8)
    _check_range(values, 0, 1, (0, 1), (problems, 1, "label"))
    problems.raise_any()
    ids = columns["id"].to_pylist()
    return [LabelIn(id=i, label=v) for i, v in zip(ids, values.tolist(), strict=True)]
