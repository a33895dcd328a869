"""The output of `calmon evaluate`: one record per window and segment, as JSON or as a table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import orjson

from app.offline.grouping import Group

Record = dict[str, Any]

#: The table fits a terminal this wide (with up to 5 π0 columns).
TABLE_WIDTH: Final = 100
UNDEFINED: Final = "n/a"
_NUMBER_WIDTH: Final = 10
_GAP: Final = "  "
_LOW: Final = "  95% low"
_HIGH: Final = "  95% high"


def make_record(group: Group, result: Mapping[str, Any]) -> Record:
    """One output record: the metric engine's ``result`` for ``group`` plus where it comes from.

    Adds ``start`` and ``end`` (ISO 8601 UTC with ``Z``, None when not windowed), ``segment``
    (``*`` for all rows) and ``unlabelled`` to the engine's keys.
    """
    return {
        "start": None if group.start is None else _iso(group.start),
        "end": None if group.end is None else _iso(group.end),
        "segment": group.segment,
        "unlabelled": group.unlabelled,
        **result,
    }


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


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
    calibrated version). With intervals, two rows under each metric give the 95% bounds.
    """
    return "\n".join(_record_table(record) for record in records)


def _record_table(record: Record) -> str:
    lines = _header_lines(record)
    regular: Mapping[str, Any] = record.get("regular", {})
    calibrated: Mapping[str, Mapping[str, Any]] = record.get("calibrated", {})
    intervals: Mapping[str, Any] | None = record.get("intervals")
    pi0s = list(calibrated)
    titles = ["regular", *(f"pi0={_short_pi0(pi0)}" for pi0 in pi0s)]
    widths = [max(_NUMBER_WIDTH, len(title)) for title in titles]
    name_width = max(len(name) for name in ("metric", _HIGH, *regular))

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


def _short_pi0(pi0: str) -> str:
    """A π0 key as a column title: the exact value, or 6 significant digits if that is long."""
    return pi0 if len(pi0) <= 8 else format(float(pi0), ".6g")


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
