"""The output of `calmon evaluate`: one record per window and segment, as JSON or as a table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

import orjson

from calmon.metrics import evaluate
from calmon.metrics.prepared import ScoreKind
from calmon.offline.grouping import Group
from calmon.records import EvaluationRecord
from calmon.timeline import iso

#: What the renderers read: an :class:`~calmon.records.EvaluationRecord` (any mapping of its keys).
Record = Mapping[str, Any]

#: The table fits a terminal this wide (with up to 5 π0 columns).
TABLE_WIDTH: Final = 100
UNDEFINED: Final = "n/a"
_NUMBER_WIDTH: Final = 10
_GAP: Final = "  "
_LOW: Final = "  95% low"
_HIGH: Final = "  95% high"
_PI0_DIGITS: Final = 3
#: under a table with π0 columns: why some of their cells are blank
BLANK_PI0_NOTE: Final = (
    "A blank pi0 cell: the metric does not depend on the class ratio, so at every pi0 it is\n"
    f"its regular value. {UNDEFINED}: not defined (one class only, or no prediction at the\n"
    "threshold).\n"
)
_EXACT_DIGITS: Final = 17


def evaluate_group(
    group: Group,
    *,
    threshold: float,
    pi0: Sequence[float],
    score_kind: ScoreKind,
    intervals: bool,
    seed: int,
) -> EvaluationRecord:
    """The record of ``group``: every metric of its labelled rows (:func:`calmon.metrics.
    evaluate` with these options) and where they come from (:func:`make_record`)."""
    result = evaluate(
        group.scores,
        group.labels,
        threshold=threshold,
        pi0=tuple(pi0),
        score_kind=score_kind,
        intervals=intervals,
        seed=seed,
    )
    return make_record(group, result)


def make_record(group: Group, result: Mapping[str, Any]) -> EvaluationRecord:
    """One output record: the metric engine's ``result`` for ``group`` plus where it comes from.

    Adds ``start`` and ``end`` (ISO 8601 UTC with ``Z``, None when not windowed), ``segment``
    (``*`` for all rows) and ``unlabelled`` to the engine's keys.
    """
    record = {
        "start": None if group.start is None else iso(group.start, timespec="seconds"),
        "end": None if group.end is None else iso(group.end, timespec="seconds"),
        "segment": group.segment,
        "unlabelled": group.unlabelled,
        **result,
    }
    return cast(EvaluationRecord, record)


def render_json(records: Sequence[Record]) -> str:
    """The records as a JSON list (undefined values are ``null``), with a final newline."""
    text = orjson.dumps(
        list(records), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    ).decode()
    return text + "\n"


def format_number(value: object) -> str:
    """A value as shown in the table: integers as they are, floats with 4 significant digits.

    Undefined (None) values show as ``n/a``.
    """
    if value is None:
        return UNDEFINED
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format(value, "#.4g")
    return str(value)


def render_table(records: Sequence[Record]) -> str:
    """The records as text tables, one after the other, separated by a blank line.

    Each record starts with a header line (window, segment, n, n_pos, prior, unlabelled),
    wrapped when it is wider than :data:`TABLE_WIDTH`; then one row per metric with the regular
    value and, side by side, the calibrated value for each π0 (blank where the metric has no
    calibrated version, as a note under the last table says). With intervals, two rows under
    each metric give the 95% bounds.

    π0 columns are titled ``pi0=`` and the value to 3 significant digits, more where two π0
    would look the same or a value would show as 0 or 1 (see :func:`pi0_titles`); the exact
    values are the keys of the JSON output. With up to 5 π0 every line fits
    :data:`TABLE_WIDTH`: should titles that tell the values apart be too wide, the columns are
    numbered (``pi0#1``...) and a legend line under the header gives each exact value.
    """
    text = "\n".join(_record_table(record) for record in records)
    if any(record.get("calibrated") for record in records):
        text += BLANK_PI0_NOTE
    return text


def _record_table(record: Record) -> str:
    lines = _header_lines(record)
    regular: Mapping[str, Any] = record.get("regular", {})
    calibrated: Mapping[str, Mapping[str, Any]] = record.get("calibrated", {})
    intervals: Mapping[str, Any] | None = record.get("intervals")
    pi0s = list(calibrated)
    name_width = max(len(name) for name in ("metric", _HIGH, *regular))
    pi0_width = max(_NUMBER_WIDTH, _pi0_column_width(name_width, len(pi0s)))
    pi0_columns = [f"pi0={title}" for title in pi0_titles(pi0s)]
    if any(len(title) > pi0_width for title in pi0_columns):
        pi0_columns = [f"pi0#{i}" for i in range(1, len(pi0s) + 1)]
        lines += _wrapped([f"{title}={pi0}" for title, pi0 in zip(pi0_columns, pi0s, strict=True)])
    titles = ["regular", *pi0_columns]
    widths = [max(_NUMBER_WIDTH, len(title)) for title in titles]

    def row(name: str, cells: Sequence[str]) -> str:
        padded = [cell.rjust(width) for cell, width in zip(cells, widths, strict=True)]
        return _GAP.join([name.ljust(name_width), *padded]).rstrip()

    lines.append(row("metric", titles))
    for metric, value in regular.items():
        cells = [format_number(value)]
        cells += [
            format_number(calibrated[pi0][metric]) if metric in calibrated[pi0] else ""
            for pi0 in pi0s
        ]
        lines.append(row(metric, cells))
        if intervals is not None:
            bounds = _interval_cells(intervals, metric, pi0s)
            if bounds is not None:
                lines.append(row(_LOW, bounds[0]))
                lines.append(row(_HIGH, bounds[1]))
    return "\n".join(lines) + "\n"


def _header_lines(record: Record) -> list[str]:
    if record.get("start") is None:
        window = "window all"
    else:
        window = f"window {_minutes(record['start'])}/{_minutes(record['end'])}"
    fields = [
        window,
        f"segment {record['segment']}",
        f"n {format_number(record.get('n'))}",
        f"n_pos {format_number(record.get('n_pos'))}",
        f"prior {format_number(record.get('prior'))}",
        f"unlabelled {format_number(record.get('unlabelled'))}",
    ]
    return _wrapped(fields)


def _wrapped(fields: Sequence[str]) -> list[str]:
    """``fields`` joined by two spaces into lines of at most :data:`TABLE_WIDTH` characters
    (a field is never cut)."""
    lines = [""]
    for field in fields:
        candidate = f"{lines[-1]}{_GAP}{field}" if lines[-1] else field
        if lines[-1] and len(candidate) > TABLE_WIDTH:
            lines.append(field)
        else:
            lines[-1] = candidate
    return lines


def _minutes(iso: str) -> str:
    """``2024-01-01T05:00:00Z`` as ``2024-01-01T05:00Z``: windows start on whole minutes."""
    return iso[:16] + "Z" if iso.endswith(":00Z") else iso


def _pi0_column_width(name_width: int, columns: int) -> int:
    """The widest π0 column that keeps a row of ``columns`` π0 columns within TABLE_WIDTH."""
    if not columns:
        return 0
    rest = TABLE_WIDTH - name_width - len(_GAP) - _NUMBER_WIDTH - columns * len(_GAP)
    return rest // columns


def pi0_titles(pi0s: Sequence[str]) -> list[str]:
    """Short titles for π0 keys (``repr`` of floats in (0, 1)), as in ``0.5``, ``0.000123``,
    ``1.23e-7``.

    Each value is shown to 3 significant digits (general format, exponent without padding).
    A value gets more digits while its title equals another's, since distinct π0 must stay
    distinct columns, or reads as 0 or 1, which no π0 is; 17 digits show every float
    exactly, so no value needs more.
    """
    values = [float(pi0) for pi0 in pi0s]
    digits = [_PI0_DIGITS] * len(values)
    while True:
        titles = [_compact(value, n) for value, n in zip(values, digits, strict=True)]
        clashes = [
            n < _EXACT_DIGITS and (titles.count(title) > 1 or float(title) in (0.0, 1.0))
            for title, n in zip(titles, digits, strict=True)
        ]
        if not any(clashes):
            return titles
        digits = [n + clash for n, clash in zip(digits, clashes, strict=True)]


def _compact(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant digits, ``1.23e-7`` rather than ``1.23e-07``."""
    text = format(value, f".{digits}g")
    mantissa, exponent_mark, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent_mark else text


def _interval_cells(
    intervals: Mapping[str, Any], metric: str, pi0s: Sequence[str]
) -> tuple[list[str], list[str]] | None:
    """Lower and upper bound cells of ``metric`` (regular, then each π0), or None if it has none."""
    regular: Mapping[str, Any] = intervals.get("regular", {})
    calibrated: Mapping[str, Mapping[str, Any]] = intervals.get("calibrated", {})
    found = [metric in regular, *(metric in calibrated.get(pi0, {}) for pi0 in pi0s)]
    if not any(found):
        return None
    pairs = [regular.get(metric)] + [calibrated.get(pi0, {}).get(metric) for pi0 in pi0s]
    low: list[str] = []
    high: list[str] = []
    for present, pair in zip(found, pairs, strict=True):
        if not present:
            low.append("")
            high.append("")
        elif pair is None:
            low.append(UNDEFINED)
            high.append(UNDEFINED)
        else:
            low.append(format_number(pair[0]))
            high.append(format_number(pair[1]))
    return low, high
