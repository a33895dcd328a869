"""Every set of tests/data/metrics/expected.json, every metric and every π0, to the record's
tolerance (``docs/reference/metrics.md``: 1e-9 absolute unless the record says otherwise)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calmon.metrics import evaluate

DATA = Path(__file__).resolve().parents[2] / "data" / "metrics"
RECORDS: list[dict[str, Any]] = json.loads((DATA / "expected.json").read_text())
DEFAULT_TOLERANCE = 1e-9


def tolerance_of(record: dict[str, Any]) -> float:
    """The absolute tolerance of a record: its ``tolerance`` field (next to ``threshold`` and
    ``pi0``) when it has one, else 1e-9."""
    value = record.get("tolerance", DEFAULT_TOLERANCE)
    assert not isinstance(value, bool), value
    assert isinstance(value, int | float), value
    assert 0.0 <= value < 1.0, value
    return float(value)


def _assert_close(
    got: dict[str, Any], expected: dict[str, Any], where: str, tolerance: float
) -> None:
    for name, want in expected.items():
        assert name in got, f"{where}: {name} missing"
        value = got[name]
        if want is None:
            assert value is None, f"{where}: {name} = {value}, expected null"
        else:
            assert value is not None, f"{where}: {name} is None, expected {want}"
            assert abs(value - want) <= tolerance, f"{where}: {name} = {value!r}, expected {want!r}"


def test_every_set_has_a_record() -> None:
    files = {path.name for path in DATA.glob("*.npz")}
    assert files, DATA
    assert {record["file"] for record in RECORDS} == files
    names = [record["name"] for record in RECORDS]
    assert len(set(names)) == len(names)


def test_record_tolerance_is_honoured() -> None:
    assert tolerance_of({"name": "x"}) == DEFAULT_TOLERANCE
    assert tolerance_of({"name": "x", "tolerance": 1e-6}) == 1e-6
    got, want = {"ap": 0.5 + 5e-7, "auc": None}, {"ap": 0.5, "auc": None}
    _assert_close(got, want, "loose", tolerance_of({"tolerance": 1e-6}))
    with pytest.raises(AssertionError, match="ap = "):
        _assert_close(got, want, "default", tolerance_of({}))


@pytest.mark.parametrize("record", RECORDS, ids=[r["name"] for r in RECORDS])
def test_expected_values(record: dict[str, Any]) -> None:
    arrays = np.load(DATA / record["file"])
    got = evaluate(
        arrays["s"],
        arrays["y"],
        threshold=record["threshold"],
        pi0=record["pi0"],
        score_kind=record["score_kind"],
    )
    expected = record["expected"]
    tolerance = tolerance_of(record)
    assert got["n"] == expected["n"]
    assert got["n_pos"] == expected["n_pos"]
    assert got["n_neg"] == expected["n"] - expected["n_pos"]
    assert got["prior"] == pytest.approx(expected["prior"], abs=tolerance)
    _assert_close(got["regular"], expected["regular"], "regular", tolerance)
    assert set(got["calibrated"]) == set(expected["calibrated"])
    for key, values in expected["calibrated"].items():
        _assert_close(got["calibrated"][key], values, f"calibrated {key}", tolerance)


@pytest.mark.parametrize("record", RECORDS, ids=[r["name"] for r in RECORDS])
def test_result_is_plain_json(record: dict[str, Any]) -> None:
    arrays = np.load(DATA / record["file"])
    got = evaluate(arrays["s"], arrays["y"], pi0=record["pi0"])
    text = json.dumps(got, allow_nan=False)
    assert json.loads(text) == got
