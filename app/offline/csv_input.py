"""Reading and validating the CSV file of `calmon evaluate`.

The format:

- UTF-8 (a leading byte-order mark is ignored), LF or CRLF line ends, comma-separated, one
  header line naming the columns, then one line per prediction with exactly as many fields as
  the header. Empty lines at the end of the file are ignored (editors and shell redirections
  leave them); elsewhere they are errors. Fields may be quoted as in RFC 4180.
- ``score`` (required): a decimal number as Python's ``float()`` reads it; finite; in [0, 1]
  when the scores are probabilities.
- ``label`` (required): ``0`` or ``1`` (``0.0`` and ``1.0`` too, as tools write an integer
  column that holds blanks), or empty when the label is not known yet (the row then only
  counts towards ``unlabelled``). Spaces around it are ignored, as they are around a score
  (``float()`` ignores them), so ``0.5, 1`` is one labelled row.
- ``timestamp`` (optional): ISO 8601 with a UTC offset or ``Z``, as the HTTP API requires,
  from 1900 to 9998.
- ``segment`` (optional): a name matching :data:`app.names.SEGMENT_PATTERN`, or empty for a row that
  belongs to no segment (it still counts in ``*``, the whole population).
- Any other column is ignored: exports usually carry ids and features. A misspelt column that an
  option needs is reported as missing.

Known columns are validated whenever they are present, whatever the options, so a file is
either valid or not. A bad file raises :class:`InputError` for the first bad line (its line
number in the file, header = 1).

Speed: a file without quotes is split with a few whole-text string operations and each column is
converted at once by NumPy (timestamps in the common layouts by :mod:`app.offline.timestamps`);
per-line work only happens for other timestamp layouts and to locate the first bad line. Quoted
files go through the :mod:`csv` module, which is several times slower.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from typing import Final, TypeVar

import numpy as np

from app.arrays import FloatArray, Int8Array, IntArray
from app.names import SEGMENT_PATTERN
from app.offline.timestamps import common_layout_seconds

#: Segment names as the HTTP API accepts them; ``*`` is reserved for the whole population.
SEGMENT_RE: Final = re.compile(SEGMENT_PATTERN)
#: The columns this format knows; ``score`` and ``label`` are required.
KNOWN_COLUMNS: Final = ("score", "label", "timestamp", "segment")
REQUIRED_COLUMNS: Final = ("score", "label")
#: Label code of a row whose label is not known yet.
UNLABELLED: Final = -1

_LABEL_CODES: Final[dict[str, int]] = {"0": 0, "1": 1, "0.0": 0, "1.0": 1, "": UNLABELLED}
_BAD_LABEL: Final = 2
_SHOWN_CHARS: Final = 40
_BLANK_BYTES: Final = b" \t\r\n\f\v"
#: Timestamps from 1900-01-01 (inclusive) to 9999-01-01 (exclusive), UTC: every window of
#: such a moment starts and ends within what ``datetime`` represents.
_EARLIEST: Final = -2_208_988_800
_LATEST: Final = 253_370_764_800

T = TypeVar("T")


class InputError(ValueError):
    """The file is not a valid evaluation CSV; ``line`` is 1-based, the header being line 1."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass(frozen=True, slots=True)
class EvaluationRows:
    """The validated rows of a file, in file order (n rows).

    Attributes:
        scores: shape (n,), finite.
        labels: shape (n,), 1, 0 or :data:`UNLABELLED`.
        timestamps: shape (n,), seconds since the epoch (UTC, microsecond precision), or None
            without a ``timestamp`` column.
        segment_names: the distinct non-empty segment names, sorted, or None without a
            ``segment`` column.
        segment_codes: shape (n,), index into ``segment_names``, -1 for a row with no segment;
            None without a ``segment`` column.
    """

    scores: FloatArray
    labels: Int8Array
    timestamps: FloatArray | None
    segment_names: tuple[str, ...] | None
    segment_codes: IntArray | None


@dataclass(frozen=True, slots=True)
class _Problem:
    index: int
    reason: str


@dataclass(frozen=True, slots=True)
class _Fields:
    """The raw text fields of the known columns, and the file line of each row."""

    columns: dict[str, list[str]]
    n: int
    lines: Sequence[int] | None  # None: row i is on line i + 2

    def line_of(self, index: int) -> int:
        return index + 2 if self.lines is None else self.lines[index]


def parse_csv(data: bytes, *, score_kind: str, required: Collection[str] = ()) -> EvaluationRows:
    """Validate and convert the bytes of an evaluation CSV.

    ``score_kind`` is ``"probability"`` (scores must lie in [0, 1]) or ``"score"``.
    ``required`` names optional columns that the caller needs (e.g. ``timestamp``), reported
    as missing like ``score`` and ``label``. Raises :class:`InputError`.
    """
    fields = _split(data, required=required)
    problems: list[_Problem] = []
    scores = _collect(_parse_scores(fields.columns["score"], score_kind=score_kind), problems)
    labels = _collect(_parse_labels(fields.columns["label"]), problems)
    timestamps = None
    if "timestamp" in fields.columns:
        timestamps = _collect(_parse_timestamps(fields.columns["timestamp"]), problems)
    segment_names = segment_codes = None
    if "segment" in fields.columns:
        segments = _collect(_parse_segments(fields.columns["segment"]), problems)
        if segments is not None:
            segment_names, segment_codes = segments
    if problems:
        first = min(problems, key=lambda problem: problem.index)
        raise InputError(fields.line_of(first.index), first.reason)
    assert scores is not None
    assert labels is not None
    return EvaluationRows(
        scores=scores,
        labels=labels,
        timestamps=timestamps,
        segment_names=segment_names,
        segment_codes=segment_codes,
    )


def _collect(result: tuple[T | None, _Problem | None], problems: list[_Problem]) -> T | None:
    value, problem = result
    if problem is not None:
        problems.append(problem)
    return value


def _shown(text: str) -> str:
    """A field as quoted in messages, cut short."""
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 1] + "…"
    return repr(text)


# ---- splitting ---------------------------------------------------------------------------


def _split(data: bytes, *, required: Collection[str]) -> _Fields:
    if not data or data.isspace():
        raise InputError(1, "empty file: expected a header line such as 'score,label'")
    data = _without_trailing_blank_lines(data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(data.count(b"\n", 0, exc.start) + 1, "not valid UTF-8") from None
    if "\0" in text:
        raise InputError(text.count("\n", 0, text.index("\0")) + 1, "NUL character")
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if '"' in text:
        return _split_quoted(text, required=required)
    header_end = text.find("\n")
    header = [name.strip() for name in text[: None if header_end < 0 else header_end].split(",")]
    positions = _check_header(header, required=required)
    if header_end < 0 or header_end == len(text) - 1:
        raise InputError(1, "no data lines after the header")
    width = len(header)
    _check_field_counts(data, text, width)
    # Every line has `width` fields, so the fields of all lines in a row, header first, are
    # a matrix of `width` columns (plus one empty field after a final newline).
    flat = text.replace("\n", ",").split(",")
    n = len(flat) // width - 1
    columns = {
        name: flat[width + index : width * (n + 1) : width] for name, index in positions.items()
    }
    return _Fields(columns=columns, n=n, lines=None)


def _without_trailing_blank_lines(data: bytes) -> bytes:
    """``data`` without the blank (empty or whitespace-only) lines that end it, keeping the
    line end of the last line that has content. Only the end is looked at."""
    content_end = len(data)
    while content_end and data[content_end - 1] in _BLANK_BYTES:
        content_end -= 1
    line_end = data.find(b"\n", content_end)
    return data if line_end < 0 or line_end == len(data) - 1 else data[: line_end + 1]


def _check_header(header: list[str], *, required: Collection[str]) -> dict[str, int]:
    """Column positions of the known columns; missing or repeated ones are errors on line 1."""
    positions: dict[str, int] = {}
    for index, name in enumerate(header):
        if name in KNOWN_COLUMNS:
            if name in positions:
                raise InputError(1, f"column {name!r} appears twice")
            positions[name] = index
    for name in (*REQUIRED_COLUMNS, *required):
        if name not in positions:
            raise InputError(1, f"missing column {name!r} (header: {','.join(header)})")
    return positions


def _check_field_counts(data: bytes, text: str, width: int) -> None:
    """Every line after the header must have ``width`` fields (no quotes in the file)."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buffer == ord("\n"))
    if not data.endswith(b"\n"):
        ends = np.append(ends, buffer.size)
    commas = np.flatnonzero(buffer == ord(","))
    per_line = np.diff(np.searchsorted(commas, ends), prepend=0)
    bad = np.flatnonzero(per_line[1:] != width - 1)
    if bad.size:
        line = int(bad[0]) + 2
        found = int(per_line[line - 1]) + 1
        if found == 1 and not text.split("\n", line)[line - 1].strip():
            raise InputError(line, "empty line")
        raise InputError(line, f"expected {width} fields like the header, found {found}")


def _split_quoted(text: str, *, required: Collection[str]) -> _Fields:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip() for name in next(reader)]
        positions = _check_header(header, required=required)
        width = len(header)
        rows: list[list[str]] = []
        lines: list[int] = []
        last_line = reader.line_num
        for row in reader:
            start = last_line + 1
            last_line = reader.line_num
            if len(row) != width:
                reason = (
                    "empty line"
                    if not row
                    else f"expected {width} fields like the header, found {len(row)}"
                )
                raise InputError(start, reason)
            rows.append(row)
            lines.append(start)
    except csv.Error as exc:
        raise InputError(reader.line_num, f"malformed CSV: {exc}") from None
    if not rows:
        raise InputError(1, "no data lines after the header")
    columns = {name: [row[index] for row in rows] for name, index in positions.items()}
    return _Fields(columns=columns, n=len(rows), lines=lines)


def _first_failure(values: list[str], convert: Callable[[list[str]], object]) -> int:
    """Index of the first value that ``convert`` rejects (it must reject ``values`` as a whole).

    Halves the range each time, so the whole search converts about ``len(values)`` values.
    """
    low, high = 0, len(values)
    while high - low > 1:
        middle = (low + high) // 2
        try:
            convert(values[low:middle])
        except ValueError:
            high = middle
        else:
            low = middle
    return low


# ---- columns -----------------------------------------------------------------------------


def _to_floats(values: list[str]) -> FloatArray:
    return np.array(values, dtype=np.float64)


def _parse_scores(
    values: list[str], *, score_kind: str
) -> tuple[FloatArray | None, _Problem | None]:
    """Scores, or the first row that is not a number, not finite, or not a probability."""
    unparsable: _Problem | None = None
    try:
        scores = _to_floats(values)
    except ValueError:
        index = _first_failure(values, _to_floats)
        field = values[index]
        reason = "score is empty" if not field.strip() else f"score {_shown(field)} is not a number"
        unparsable = _Problem(index, reason)
        scores = _to_floats(values[:index])
    problem = _range_problem(scores, values, score_kind=score_kind)
    return (scores if problem is None and unparsable is None else None), problem or unparsable


def _range_problem(scores: FloatArray, values: list[str], *, score_kind: str) -> _Problem | None:
    bad_finite = np.flatnonzero(~np.isfinite(scores))
    first_finite = int(bad_finite[0]) if bad_finite.size else None
    first_range = None
    if score_kind == "probability":
        with np.errstate(invalid="ignore"):
            bad_range = np.flatnonzero((scores < 0.0) | (scores > 1.0))
        first_range = int(bad_range[0]) if bad_range.size else None
    if first_finite is not None and (first_range is None or first_finite <= first_range):
        return _Problem(first_finite, f"score {_shown(values[first_finite])} is not finite")
    if first_range is not None:
        return _Problem(
            first_range,
            f"score {_shown(values[first_range])} is outside [0, 1] (probability scores; "
            "use --score-kind score for other scores)",
        )
    return None


def _parse_labels(values: list[str]) -> tuple[Int8Array | None, _Problem | None]:
    """Labels as 1, 0, or UNLABELLED for an empty field; spaces around a label are ignored."""
    codes = np.fromiter(
        map(_LABEL_CODES.get, values, repeat(_BAD_LABEL)), dtype=np.int8, count=len(values)
    )
    for index in np.flatnonzero(codes == _BAD_LABEL).tolist():
        field = values[index]
        code = _LABEL_CODES.get(field.strip(), _BAD_LABEL)
        if code == _BAD_LABEL:
            return None, _Problem(index, f"label {_shown(field)} is not 0, 1 or empty")
        codes[index] = code
    return codes, None


def _to_datetimes(values: list[str]) -> list[datetime]:
    return list(map(datetime.fromisoformat, values))


def _parse_timestamps(values: list[str]) -> tuple[FloatArray | None, _Problem | None]:
    """Seconds since the epoch; the first unreadable or offset-less timestamp is a problem.

    The common layouts are read at once; the other rows one ``fromisoformat`` at a time.
    """
    seconds, known = common_layout_seconds(values)
    problems: list[_Problem] = []
    others = np.flatnonzero(~known)
    if others.size:
        rest = [values[index] for index in others.tolist()]
        rest_seconds, problem = _parse_timestamps_one_by_one(rest)
        if problem is not None:
            problems.append(_Problem(int(others[problem.index]), problem.reason))
        else:
            assert rest_seconds is not None
            seconds[others] = rest_seconds
            known[:] = True
    outside = np.flatnonzero(known & ((seconds < _EARLIEST) | (seconds >= _LATEST)))
    if outside.size:
        index = int(outside[0])
        problems.append(
            _Problem(index, f"timestamp {_shown(values[index])} is not between 1900 and 9998")
        )
    if problems:
        return None, min(problems, key=lambda problem: problem.index)
    return seconds, None


def _parse_timestamps_one_by_one(values: list[str]) -> tuple[FloatArray | None, _Problem | None]:
    try:
        moments = _to_datetimes(values)
    except ValueError:
        index = _first_failure(values, _to_datetimes)
        field = values[index]
        reason = (
            "timestamp is empty"
            if not field.strip()
            else f"timestamp {_shown(field)} is not ISO 8601"
        )
        moments = _to_datetimes(values[:index])
        naive = _first_naive(moments, values)
        return None, naive or _Problem(index, reason)
    naive = _first_naive(moments, values)
    if naive is not None:
        return None, naive
    return np.fromiter(map(datetime.timestamp, moments), dtype=np.float64, count=len(values)), None


def _first_naive(moments: list[datetime], values: list[str]) -> _Problem | None:
    flags = [moment.tzinfo is None for moment in moments]
    if True not in flags:
        return None
    index = flags.index(True)
    return _Problem(index, f"timestamp {_shown(values[index])} has no UTC offset (add Z or +HH:MM)")


def _parse_segments(
    values: list[str],
) -> tuple[tuple[tuple[str, ...], IntArray] | None, _Problem | None]:
    """Sorted distinct segment names and each row's index into them (-1: no segment)."""
    distinct = dict.fromkeys(values)  # in order of first appearance
    for name in distinct:
        if name and SEGMENT_RE.fullmatch(name) is None:
            return None, _Problem(
                values.index(name),
                f"segment {_shown(name)} is not a valid name "
                "(letters, digits and _.:=- , starting with a letter or digit, at most 64)",
            )
    names = tuple(sorted(name for name in distinct if name))
    code_of = {name: code for code, name in enumerate(names)}
    code_of[""] = -1
    codes = np.fromiter(map(code_of.__getitem__, values), dtype=np.int64, count=len(values))
    return (names, codes), None
