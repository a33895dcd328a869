"""Reading and validating the CSV file of `calmon evaluate`.

The format:

- UTF-8 (a leading byte-order mark is ignored), LF or CRLF line ends, one header line naming
  the columns, then one line per prediction with exactly as many fields as the header. Fields
  are separated by commas, or by the delimiter given, or else by whichever of ``;``, tab and
  ``|`` the header holds more of than commas (:func:`detect_delimiter`). Empty lines at the end
  of the file are ignored (editors and shell redirections leave them); elsewhere they are
  errors. Fields may be quoted as in RFC 4180.
- ``score`` (required): a decimal number as Python's ``float()`` reads it; finite; in [0, 1]
  when the scores are probabilities.
- ``label`` (required): ``0`` or ``1`` (``0.0`` and ``1.0`` too, as tools write an integer
  column that holds blanks), or empty when the label is not known yet (the row then only
  counts towards ``unlabelled``). Spaces around it are ignored, as they are around a score
  (``float()`` ignores them), so ``0.5, 1`` is one labelled row.
- ``timestamp`` (optional): ISO 8601 with a UTC offset or ``Z``, as the HTTP API requires,
  from 1900 to 9998.
- ``segment`` (optional): a name matching :data:`calmon.names.SEGMENT_PATTERN`, or empty for a
  row that belongs to no segment (it still counts in ``*``, the whole population).
- Any other column is ignored: exports usually carry ids and features. A misspelt column that an
  option needs is reported as missing. The four columns may have other names in the file
  (``columns``: ``{"score": "probability", …}``).

Known columns are validated whenever they are present, whatever the options, so a file is
either valid or not. A bad file raises :class:`InputError`: for a bad header, encoding or
quoting, the line where reading stopped; for bad rows (a wrong number of fields, or values),
every bad row with its reason (the first reason of a row, columns in the order score, label,
timestamp, segment), the first :data:`MAX_REPORTED` kept and the rest counted. Line numbers
are those of the file, header = 1.

Speed: a file without quotes is split with a few whole-text string operations and each column is
converted at once by NumPy (timestamps in the common layouts by :mod:`calmon.offline.timestamps`);
per-line work only happens for other timestamp layouts and to locate the first bad line. Quoted
files go through the :mod:`csv` module, which is several times slower.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from typing import Final, TypeVar

import numpy as np

from calmon.arrays import FloatArray, Int8Array, IntArray
from calmon.names import SEGMENT_PATTERN
from calmon.offline.timestamps import common_layout_seconds

#: Segment names as the HTTP API accepts them; ``*`` is reserved for the whole population.
SEGMENT_RE: Final = re.compile(SEGMENT_PATTERN)
#: The columns this format knows; ``score`` and ``label`` are required.
KNOWN_COLUMNS: Final = ("score", "label", "timestamp", "segment")
REQUIRED_COLUMNS: Final = ("score", "label")
#: Bad rows an :class:`InputError` keeps (the others are counted).
MAX_REPORTED: Final = 20
#: Label code of a row whose label is not known yet.
UNLABELLED: Final = -1
#: The delimiters a header is searched for, the default first.
DELIMITERS: Final = (",", ";", "\t", "|")

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
    """The file is not a valid evaluation CSV; ``line`` is 1-based, the header being line 1.

    ``line`` and ``reason`` are those of the first problem; ``problems`` holds the first
    :data:`MAX_REPORTED` (line, reason) pairs in line order, ``count`` how many bad lines
    there are in all.
    """

    def __init__(
        self, line: int, reason: str, *, problems: Sequence[tuple[int, str]] = (), count: int = 1
    ) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason
        self.problems = list(problems[:MAX_REPORTED]) or [(line, reason)]
        self.count = max(count, len(self.problems))

    @classmethod
    def of(cls, problems: Sequence[tuple[int, str]]) -> InputError:
        """The error of every bad line of ``problems`` (line order, at least one)."""
        line, reason = problems[0]
        return cls(line, reason, problems=problems, count=len(problems))


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


def parse_csv(
    data: bytes,
    *,
    score_kind: str,
    required: Collection[str] = (),
    columns: Mapping[str, str] | None = None,
    delimiter: str | None = None,
) -> EvaluationRows:
    """Validate and convert the bytes of an evaluation CSV.

    ``score_kind`` is ``"probability"`` (scores must lie in [0, 1]) or ``"score"``.
    ``required`` names optional columns that the caller needs (e.g. ``timestamp``), reported
    as missing like ``score`` and ``label``. ``columns`` maps known columns to the names they
    have in the file; ``delimiter`` (one character) is detected from the header when None.
    Raises :class:`InputError`.
    """
    fields = _split(data, required=required, names=_Names(columns or {}), delimiter=delimiter)
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
        first_of_row: dict[int, str] = {}
        for problem in problems:
            first_of_row.setdefault(problem.index, problem.reason)
        raise InputError.of(
            [(fields.line_of(index), reason) for index, reason in sorted(first_of_row.items())]
        )
    assert scores is not None
    assert labels is not None
    return EvaluationRows(
        scores=scores,
        labels=labels,
        timestamps=timestamps,
        segment_names=segment_names,
        segment_codes=segment_codes,
    )


def _collect(result: tuple[T | None, list[_Problem]], problems: list[_Problem]) -> T | None:
    value, found = result
    problems.extend(found)
    return value


def _shown(text: str) -> str:
    """A field as quoted in messages, cut short."""
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 1] + "…"
    return repr(text)


# ---- splitting ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Names:
    """The file's name of each known column (its own name unless renamed)."""

    renamed: Mapping[str, str]

    def of(self, known: str) -> str:
        return self.renamed.get(known, known)


def detect_delimiter(header: str) -> str:
    """The delimiter of a file whose header line is ``header``: the one of
    :data:`DELIMITERS` it holds most of (outside quotes), a comma when it holds none."""
    unquoted = re.sub(r'"[^"]*"', "", header)
    counts = [unquoted.count(candidate) for candidate in DELIMITERS]
    best = max(range(len(DELIMITERS)), key=lambda i: (counts[i], -i))
    return DELIMITERS[best] if counts[best] else ","


def _split(
    data: bytes, *, required: Collection[str], names: _Names, delimiter: str | None
) -> _Fields:
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
    header_end = text.find("\n")
    header_line = text[: None if header_end < 0 else header_end]
    sep = delimiter or detect_delimiter(header_line)
    if '"' in text:
        return _split_quoted(text, required=required, names=names, sep=sep)
    header = [name.strip() for name in header_line.split(sep)]
    positions = _check_header(header, required=required, names=names, sep=sep)
    if header_end < 0 or header_end == len(text) - 1:
        raise InputError(1, "no data lines after the header")
    width = len(header)
    _check_field_counts(data, text, width, sep=sep)
    # Every line has `width` fields, so the fields of all lines in a row, header first, are
    # a matrix of `width` columns (plus one empty field after a final newline).
    flat = text.replace("\n", sep).split(sep)
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


def _check_header(
    header: list[str], *, required: Collection[str], names: _Names, sep: str
) -> dict[str, int]:
    """Column positions of the known columns; missing or repeated ones are errors on line 1,
    with the header as read and the option that names the column otherwise."""
    positions: dict[str, int] = {}
    file_names = {names.of(known): known for known in KNOWN_COLUMNS}
    for index, name in enumerate(header):
        if name in file_names:
            if file_names[name] in positions:
                raise InputError(1, f"column {name!r} appears twice")
            positions[file_names[name]] = index
    for known in (*REQUIRED_COLUMNS, *required):
        if known not in positions:
            shown = "TAB" if sep == "\t" else repr(sep)
            raise InputError(
                1,
                f"missing column {names.of(known)!r} (header, split at {shown}: "
                f"{' | '.join(header)}); --{known}-column names the {known} column,"
                " --delimiter the separator",
            )
    return positions


def _check_field_counts(data: bytes, text: str, width: int, *, sep: str) -> None:
    """Every line after the header must have ``width`` fields (no quotes in the file)."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buffer == ord("\n"))
    if not data.endswith(b"\n"):
        ends = np.append(ends, buffer.size)
    commas = np.flatnonzero(buffer == ord(sep))
    per_line = np.diff(np.searchsorted(commas, ends), prepend=0)
    bad = np.flatnonzero(per_line[1:] != width - 1)
    if bad.size:
        lines = text.split("\n")
        problems = []
        for index in bad.tolist():
            line = index + 2
            found = int(per_line[line - 1]) + 1
            if found == 1 and not lines[line - 1].strip():
                problems.append((line, "empty line"))
            else:
                problems.append((line, f"expected {width} fields like the header, found {found}"))
        raise InputError.of(problems)


def _split_quoted(text: str, *, required: Collection[str], names: _Names, sep: str) -> _Fields:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    try:
        header = [name.strip() for name in next(reader)]
        positions = _check_header(header, required=required, names=names, sep=sep)
        width = len(header)
        rows: list[list[str]] = []
        lines: list[int] = []
        problems: list[tuple[int, str]] = []
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
                problems.append((start, reason))
            rows.append(row)
            lines.append(start)
    except csv.Error as exc:
        raise InputError(reader.line_num, f"malformed CSV: {exc}") from None
    if problems:
        raise InputError.of(problems)
    if not rows:
        raise InputError(1, "no data lines after the header")
    columns = {name: [row[index] for row in rows] for name, index in positions.items()}
    return _Fields(columns=columns, n=len(rows), lines=lines)


# ---- columns -----------------------------------------------------------------------------


def _to_floats(values: list[str]) -> FloatArray:
    return np.array(values, dtype=np.float64)


def _parse_scores(
    values: list[str], *, score_kind: str
) -> tuple[FloatArray | None, list[_Problem]]:
    """Scores, or every row that is not a number, not finite, or not a probability."""
    problems: list[_Problem] = []
    try:
        scores = _to_floats(values)
    except ValueError:
        # the slow path, only for a bad file: each value on its own
        scores = np.full(len(values), 0.5)
        for index, field in enumerate(values):
            try:
                scores[index] = _to_floats([field])[0]
            except ValueError:
                reason = (
                    "score is empty"
                    if not field.strip()
                    else f"score {_shown(field)} is not a number"
                )
                problems.append(_Problem(index, reason))
    problems.extend(_range_problems(scores, values, score_kind=score_kind))
    return (None if problems else scores), problems


def _range_problems(scores: FloatArray, values: list[str], *, score_kind: str) -> list[_Problem]:
    """Rows whose score is not finite or, for probabilities, outside [0, 1]."""
    finite = np.isfinite(scores)
    problems = [
        _Problem(index, f"score {_shown(values[index])} is not finite")
        for index in np.flatnonzero(~finite).tolist()
    ]
    if score_kind == "probability":
        outside = finite & ((scores < 0.0) | (scores > 1.0))
        problems += [
            _Problem(
                index,
                f"score {_shown(values[index])} is outside [0, 1] (probability scores; "
                "use --score-kind score for other scores)",
            )
            for index in np.flatnonzero(outside).tolist()
        ]
    return problems


def _parse_labels(values: list[str]) -> tuple[Int8Array | None, list[_Problem]]:
    """Labels as 1, 0, or UNLABELLED for an empty field; spaces around a label are ignored."""
    codes = np.fromiter(
        map(_LABEL_CODES.get, values, repeat(_BAD_LABEL)), dtype=np.int8, count=len(values)
    )
    problems: list[_Problem] = []
    for index in np.flatnonzero(codes == _BAD_LABEL).tolist():
        field = values[index]
        code = _LABEL_CODES.get(field.strip(), _BAD_LABEL)
        if code == _BAD_LABEL:
            problems.append(_Problem(index, f"label {_shown(field)} is not 0, 1 or empty"))
        codes[index] = code
    return (None if problems else codes), problems


def _to_datetimes(values: list[str]) -> list[datetime]:
    return list(map(datetime.fromisoformat, values))


def _parse_timestamps(values: list[str]) -> tuple[FloatArray | None, list[_Problem]]:
    """Seconds since the epoch; every unreadable, offset-less or out-of-range timestamp is a
    problem.

    The common layouts are read at once; the other rows one ``fromisoformat`` at a time.
    """
    seconds, known = common_layout_seconds(values)
    problems: list[_Problem] = []
    others = np.flatnonzero(~known)
    if others.size:
        rest = [values[index] for index in others.tolist()]
        rest_seconds, rest_problems = _parse_timestamps_one_by_one(rest)
        problems += [_Problem(int(others[p.index]), p.reason) for p in rest_problems]
        seconds[others] = rest_seconds
        known[others] = True
        known[[p.index for p in problems]] = False
    outside = np.flatnonzero(known & ((seconds < _EARLIEST) | (seconds >= _LATEST)))
    problems += [
        _Problem(index, f"timestamp {_shown(values[index])} is not between 1900 and 9998")
        for index in outside.tolist()
    ]
    return (None if problems else seconds), problems


def _parse_timestamps_one_by_one(values: list[str]) -> tuple[FloatArray, list[_Problem]]:
    """Seconds of each value (0 where it is bad) and the problem of each bad one."""
    try:
        moments: list[datetime | None] = list(_to_datetimes(values))
    except ValueError:
        # the slow path, only for a bad file: each value on its own
        moments = []
        for field in values:
            try:
                moments.append(datetime.fromisoformat(field))
            except ValueError:
                moments.append(None)
    seconds = np.zeros(len(values))
    problems: list[_Problem] = []
    for index, (moment, field) in enumerate(zip(moments, values, strict=True)):
        if moment is None:
            reason = (
                "timestamp is empty"
                if not field.strip()
                else f"timestamp {_shown(field)} is not ISO 8601"
            )
            problems.append(_Problem(index, reason))
        elif moment.tzinfo is None:
            problems.append(
                _Problem(index, f"timestamp {_shown(field)} has no UTC offset (add Z or +HH:MM)")
            )
        else:
            seconds[index] = moment.timestamp()
    return seconds, problems


def _parse_segments(
    values: list[str],
) -> tuple[tuple[tuple[str, ...], IntArray] | None, list[_Problem]]:
    """Sorted distinct segment names and each row's index into them (-1: no segment)."""
    distinct = dict.fromkeys(values)  # in order of first appearance
    invalid = {name for name in distinct if name and SEGMENT_RE.fullmatch(name) is None}
    if invalid:
        return None, [
            _Problem(
                index,
                f"segment {_shown(name)} is not a valid name "
                "(letters, digits and _.:=- , starting with a letter or digit, at most 64)",
            )
            for index, name in enumerate(values)
            if name in invalid
        ]
    names = tuple(sorted(name for name in distinct if name))
    code_of = {name: code for code, name in enumerate(names)}
    code_of[""] = -1
    codes = np.fromiter(map(code_of.__getitem__, values), dtype=np.int64, count=len(values))
    return (names, codes), []
