"""Every set of tests/data/metrics/expected.json, every metric and every π0, to 1e-9."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.metrics import evaluate

DATA = Path(__file__).resolve().parents[2] / "data" / "metrics"
RECORDS: list[dict[str, Any]] = json.loads((DATA / "expected.json").read_text())
TOLERANCE = 1e-9


def _assert_close(got: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    for name, want in expected.items():
        assert name in got, f"{where}: {name} missing"
        value = got[name]
        if want is None:
            assert value is None, f"{where}: {name} = {value}, expected null"
        else:
            assert value is not None, f"{where}: {name} is None, expected {want}"
            assert abs(value - want) <= TOLERANCE, f"{where}: {name} = {value!r}, expected {want!r}"


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
    assert got["n"] == expected["n"]
    assert got["n_pos"] == expected["n_pos"]
    assert got["n_neg"] == expected["n"] - expected["n_pos"]
    assert got["prior"] == pytest.approx(expected["prior"], abs=TOLERANCE)
    _assert_close(got["regular"], expected["regular"], "regular")
    assert set(got["calibrated"]) == set(expected["calibrated"])
    for key, values in expected["calibrated"].items():
        _assert_close(got["calibrated"][key], values, f"calibrated {key}")


@pytest.mark.parametrize("record", RECORDS, ids=[r["name"] for r in RECORDS])
def test_result_is_plain_json(record: dict[str, Any]) -> None:
    arrays = np.load(DATA / record["file"])
    got = evaluate(arrays["s"], arrays["y"], pi0=record["pi0"])
    text = json.dumps(got, allow_nan=False)
    assert json.loads(text) == got
