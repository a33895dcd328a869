"""Rendering records: number format, table layout and width, JSON shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from calmon.metrics import evaluate
from calmon.offline.grouping import Group
from calmon.offline.report import (
    TABLE_WIDTH,
    format_number,
    make_record,
    pi0_titles,
    render_json,
    render_table,
)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "n/a"),
        (0, "0"),
        (123456, "123456"),
        (1.0, "1.000"),
        (0.5, "0.5000"),
        (0.123456, "0.1235"),
        (0.00012345, "0.0001234"),
        (1.5e-7, "1.500e-07"),
        (-5.2, "-5.200"),
        (34.5678, "34.57"),
        (0.0, "0.000"),
    ],
)
def test_format_number(value: object, shown: str) -> None:
    assert format_number(value) == shown


def group(**changes: Any) -> Group:
    fields: dict[str, Any] = {
        "start": datetime(2024, 1, 1, 5, tzinfo=UTC),
        "end": datetime(2024, 1, 1, 6, tzinfo=UTC),
        "segment": "country=FR",
        "scores": np.array([0.5]),
        "labels": np.array([1], dtype=np.int8),
        "unlabelled": 3,
    }
    fields.update(changes)
    return Group(**fields)


RESULT: dict[str, Any] = {
    "n": 100,
    "n_pos": 10,
    "n_neg": 90,
    "prior": 0.1,
    "regular": {"precision": 0.25, "recall": 0.75, "roc_auc": None},
    "calibrated": {
        "0.5": {"precision": 0.75},
        "0.01": {"precision": None},
    },
}


def test_record_adds_where_it_comes_from() -> None:
    record = make_record(group(), RESULT)
    assert record["start"] == "2024-01-01T05:00:00Z"
    assert record["end"] == "2024-01-01T06:00:00Z"
    assert record["segment"] == "country=FR"
    assert record["unlabelled"] == 3
    assert record["regular"] == RESULT["regular"]
    whole = make_record(group(start=None, end=None, segment="*"), RESULT)
    assert whole["start"] is None
    assert whole["end"] is None


def test_json_round_trips_with_nulls() -> None:
    records = [make_record(group(), RESULT), make_record(group(segment="*"), RESULT)]
    text = render_json(records)
    assert text.endswith("\n")
    parsed = json.loads(text)
    assert parsed == records
    assert parsed[0]["regular"]["roc_auc"] is None


def test_table_rows_and_columns() -> None:
    text = render_table([make_record(group(), RESULT)])
    lines = text.splitlines()
    assert all(len(line) <= TABLE_WIDTH for line in lines)
    assert lines[1].startswith("unlabelled")  # the header line wraps rather than overflow
    lines = [lines[0] + "  " + lines[1], *lines[2:]]
    assert lines[0].split() == [
        "window",
        "2024-01-01T05:00Z/2024-01-01T06:00Z",
        "segment",
        "country=FR",
        "n",
        "100",
        "n_pos",
        "10",
        "prior",
        "0.1000",
        "unlabelled",
        "3",
    ]
    assert lines[1].split() == ["metric", "regular", "pi0=0.5", "pi0=0.01"]
    assert lines[2].split() == ["precision", "0.2500", "0.7500", "n/a"]
    # recall has no calibrated version: blank cells, nothing after the regular value
    assert lines[3].split() == ["recall", "0.7500"]
    assert lines[4].split() == ["roc_auc", "n/a"]
    header = lines[1]

    def end_of(text: str, token: str) -> int:
        return text.rindex(token) + len(token)

    # values are right-aligned under their column titles
    assert end_of(lines[2], "0.2500") == end_of(header, "regular")
    assert end_of(lines[2], "0.7500") == end_of(header, "pi0=0.5")
    assert end_of(lines[2], "n/a") == end_of(header, "pi0=0.01")
    assert end_of(lines[3], "0.7500") == end_of(header, "regular")
    assert end_of(lines[4], "n/a") == end_of(header, "regular")


def test_table_of_several_records_and_whole_file() -> None:
    records = [
        make_record(group(start=None, end=None, segment="*"), RESULT),
        make_record(group(start=None, end=None), RESULT),
    ]
    text = render_table(records)
    blocks = text.split("\n\n")
    assert len(blocks) == 2
    assert blocks[0].startswith("window all  segment *  n 100")
    assert blocks[1].startswith("window all  segment country=FR  n 100")


def test_widest_table_fits_100_columns() -> None:
    metrics = [
        "precision",
        "average_precision",
        "best_f1_threshold",
        "brier_skill",
    ]
    pi0s = ["0.123456789", "0.30000000000000004", "0.5", "1e-05", "0.999999"]
    result: dict[str, Any] = {
        "n": 123_456_789,
        "n_pos": 12_345_678,
        "n_neg": 111_111_111,
        "prior": 0.1,
        "regular": dict.fromkeys(metrics, -1.234567e-05),
        "calibrated": {pi0: dict.fromkeys(metrics[:3], -1.234567e-05) for pi0 in pi0s},
        "intervals": {
            "regular": {metric: [-1.5e-05, -1.0e-05] for metric in metrics},
            "calibrated": {pi0: dict.fromkeys(metrics[:3]) for pi0 in pi0s},
        },
    }
    record = make_record(group(segment="s" * 64, start=datetime(2024, 1, 1, tzinfo=UTC)), result)
    text = render_table([record])
    assert max(len(line) for line in text.splitlines()) <= TABLE_WIDTH
    assert "pi0=0.123" in text
    assert "s" * 64 in text


@pytest.mark.parametrize(
    ("pi0s", "titles"),
    [
        (["0.5", "0.01", "0.30000000000000004"], ["0.5", "0.01", "0.3"]),
        (["0.00012345678", "1.2345678e-07", "0.123456789"], ["0.000123", "1.23e-7", "0.123"]),
        (["0.00012345678", "0.00012349", "0.5"], ["0.00012346", "0.00012349", "0.5"]),
        (["0.12345", "0.1235", "0.124"], ["0.12345", "0.1235", "0.124"]),
        (["0.999999", "0.99951", "1e-20"], ["0.999999", "0.9995", "1e-20"]),
        (["0.1", "0.1000000000000001"], ["0.1", "0.1000000000000001"]),
        (["1.0", "0.5"], ["1", "0.5"]),  # not a π0 an evaluation gives, still no endless loop
        ([], []),
    ],
)
def test_pi0_titles_are_short_and_distinct(pi0s: list[str], titles: list[str]) -> None:
    assert pi0_titles(pi0s) == titles


AWKWARD_PI0 = {
    "small": [0.00012345678, 0.00023456789, 0.00034567891, 0.00045678912, 0.00056789123],
    "mixed": [0.999999, 1.2345678e-10, 0.30000000000000004, 0.000999999, 0.123456789],
    "close": [0.00012345678, 0.00012345679, 0.1, 0.1000000000000001, 0.9999999999],
}


@pytest.mark.parametrize("name", list(AWKWARD_PI0))
def test_five_awkward_pi0_fit_100_columns(name: str) -> None:
    pi0s = AWKWARD_PI0[name]
    rng = np.random.default_rng(5)
    labels = (rng.random(400) < 0.3).astype(np.int8)
    scores = np.clip(rng.normal(0.3 + 0.3 * labels, 0.2), 0.0, 1.0)
    result = evaluate(scores, labels, pi0=pi0s, intervals=True, seed=1)
    assert result["regular"]["best_f1_threshold"] is not None  # the widest metric name
    record = make_record(group(segment="country=FR"), result)
    lines = render_table([record]).splitlines()
    assert max(len(line) for line in lines) <= TABLE_WIDTH, "\n".join(lines)
    [title_row] = [line for line in lines if line.startswith("metric ")]
    titles = title_row.split()[2:]
    assert len(titles) == len(set(titles)) == 5
    if titles[0].startswith("pi0#"):  # numbered columns, exact values in a legend
        assert name == "close"
        legend = " ".join(lines[: lines.index(title_row)]).split()
        for i, pi0 in enumerate(pi0s, start=1):
            assert titles[i - 1] == f"pi0#{i}"
            assert f"pi0#{i}={pi0!r}" in legend
    else:
        assert name != "close"
        for title, pi0 in zip(titles, pi0s, strict=True):
            assert title.startswith("pi0=")
            assert float(title[4:]) == pytest.approx(pi0, rel=5e-3)


def test_intervals_rows() -> None:
    result = dict(RESULT)
    result["intervals"] = {
        "regular": {"precision": [0.2, 0.3], "recall": None},
        "calibrated": {"0.5": {"precision": [0.7, 0.8]}, "0.01": {"precision": None}},
    }
    lines = render_table([make_record(group(segment="*"), result)]).splitlines()
    assert lines[0] == (
        "window 2024-01-01T05:00Z/2024-01-01T06:00Z  segment *  n 100  n_pos 10  prior 0.1000"
        "  unlabelled 3"
    )
    assert lines[2].split() == ["precision", "0.2500", "0.7500", "n/a"]
    assert lines[3].split() == ["95%", "low", "0.2000", "0.7000", "n/a"]
    assert lines[4].split() == ["95%", "high", "0.3000", "0.8000", "n/a"]
    assert lines[5].split() == ["recall", "0.7500"]
    assert lines[6].split() == ["95%", "low", "n/a"]
    assert lines[7].split() == ["95%", "high", "n/a"]
    assert lines[8].split() == ["roc_auc", "n/a"]  # no interval given for it: no bound rows
