"""`calmon windows`: the table's layout, values and marks, from window records built here; and
what it says of a request that failed."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from calmon_client import ApiError

from calmon.cli import build_parser
from calmon.commands.common import api_error_text
from calmon.commands.windows import LEGEND, format_table

REFERENCE = {
    "kind": "fixed",
    "start": "2026-11-01T08:00:00Z",
    "end": "2026-11-01T10:00:00Z",
    "windows": None,
    "n": 4000,
    "n_pos": 200,
    "prior": 0.05,
    "regular": {"average_precision": 0.461, "roc_auc": 0.9},
}


#: a window's cells after its parts when its decision pools it alone, without an interval
FIXED = ["fixed", "reference", "1", "Nov", "2026", "08:00\u201310:00", "UTC"]
ALONE = ["1/16", "-", "not_enough_data", *FIXED]


def _record(start: str, *, split: dict[str, Any] | None, calibrated: dict[str, Any] | None) -> Any:
    """A window record with the fields the table reads; its decision pools it alone."""
    return {
        "start": start,
        "n": 2000,
        "n_pos": 16,
        "unlabelled": 0,
        "prior": 0.008,
        "regular": {"average_precision": 0.17649, "roc_auc": 0.9012},
        "calibrated": {"reference": calibrated, "0.01": {"average_precision": 0.2}},
        "split": split,
        "reference": REFERENCE,
        "estimated": None,
        "advice": None,
        "decision": _decision(1, 16, None, None, "not_enough_data"),
    }


def _parts(prior: float, prior_interval: Any, likelihood: float, likelihood_interval: Any) -> Any:
    return {
        "average_precision": {
            "total": prior + likelihood,
            "prior": prior,
            "likelihood": likelihood,
            "prior_interval": prior_interval,
            "likelihood_interval": likelihood_interval,
        }
    }


def test_the_table_shows_values_and_marks_each_part_by_its_interval() -> None:
    records = [
        _record("2026-11-01T10:00:00Z", split=None, calibrated=None),
        _record(
            "2026-11-01T11:00:00Z",
            split=_parts(-0.285, [-0.31, -0.26], 0.002, [-0.02, 0.03]),
            calibrated={"average_precision": 0.4637},
        ),
        _record(
            "2026-11-01T12:00:00+00:00",
            split=_parts(0.001, None, -0.2334, [-0.25, -0.21]),
            calibrated={"average_precision": 0.2276},
        ),
    ]
    lines = format_table(records, model="fraud", segment="*", metric="average_precision").split(
        "\n"
    )
    assert lines[0] == "model fraud, segment *, average_precision"
    assert lines[1] == (
        "reference of the latest window: the fixed reference 1 Nov 2026 08:00\u201310:00 UTC,"
        " 2026-11-01T08:00:00Z to 2026-11-01T10:00:00Z: n 4000, ratio 0.0500,"
        " average_precision 0.461"
    )
    assert lines[2].split("  ")[0] == "window start (UTC)"
    rows = [line.split() for line in lines[3:6]]
    head = ["2026-11-01", "10:00", "2000", "16", "0", "0.0080", "0.176"]
    assert rows[0] == [*head, "-", "-", "-", *ALONE, "-"]
    assert rows[1][2:] == [
        "2000",
        "16",
        "0",
        "0.0080",
        "0.176",
        "0.464",
        "-0.285*",
        "+0.002",
        *ALONE,
        "-",
    ]
    assert rows[2][-4 - len(ALONE) : -1 - len(ALONE)] == ["0.228", "+0.001?", "-0.233*"]
    assert "\n".join(lines[6:]) == LEGEND
    # numbers are right-aligned under their header; a part's digits align whatever its mark
    header = lines[2]
    for line in lines[3:6]:
        assert len(line.rstrip()) <= len(header) + 1
    column = header.index("prior part") + len("prior part")
    assert {line[column - 2] for line in lines[4:6]} == {"5", "1"}
    assert lines[4][column - 1] == "*"
    assert lines[5][column - 1] == "?"


def test_a_metric_without_calibration_or_split_shows_dashes() -> None:
    record = _record(
        "2026-11-01T11:00:00Z",
        split=_parts(-0.285, [-0.31, -0.26], 0.002, [-0.02, 0.03]),
        calibrated={"average_precision": 0.4637},
    )
    lines = format_table([record], model="m", segment="country=FR", metric="roc_auc").split("\n")
    assert lines[0] == "model m, segment country=FR, roc_auc"
    assert lines[1].endswith("roc_auc 0.900")
    assert lines[3].split()[5:] == ["0.0080", "0.901", "-", "-", "-", *ALONE, "-"]


def test_before_labels_the_estimate_speaks_with_its_interval_and_verdict() -> None:
    record = _record("2026-11-01T11:00:00Z", split=None, calibrated=None)
    record.update(n=0, n_pos=0, unlabelled=5000, prior=None)
    record["estimated"] = {
        "positive_class_ratio": 0.0123,
        "positive_class_ratio_interval": [0.0101, 0.0149],
        "label_shift": {"p_value": 0.002, "holds": False, "method": "cvm_mixture_bootstrap"},
        "verdict": "scores_changed",
    }
    line = format_table([record], model="m", segment="*", metric="average_precision").split("\n")[3]
    assert line.split()[2:5] == ["0", "0", "5000"]
    assert line.endswith(
        "0.0123 [0.0101, 0.0149] scores changed in a way a class-ratio change does not explain:"
        " labels needed"
    )
    # once most of the window is labelled, the measured ratio speaks
    record.update(n=4000, n_pos=40, unlabelled=1000, prior=0.01)
    line = format_table([record], model="m", segment="*", metric="average_precision").split("\n")[3]
    assert line.endswith(" -")


def test_no_window_yet_says_so() -> None:
    text = format_table([], model="m", segment="*", metric="f1")
    assert text.splitlines() == [
        "model m, segment *, f1",
        "no computed window yet (windows are computed at the scheduler's tick)",
    ]


def test_options_and_defaults() -> None:
    args = build_parser().parse_args(["windows", "fraud"])
    assert (args.model, args.segment, args.last, args.metric) == (
        "fraud",
        "*",
        24,
        "average_precision",
    )
    assert (args.url, args.token) == ("http://127.0.0.1:8000", None)
    args = build_parser().parse_args(
        ["windows", "fraud", "--last", "3", "--metric", "f1", "--url", "http://h:1/"]
    )
    assert (args.last, args.metric, args.url) == (3, "f1", "http://h:1")
    for bad in (["--last", "0"], ["--metric", "accuracy"], ["--url", "h:1"]):
        with pytest.raises(SystemExit) as exit_info:
            build_parser().parse_args(["windows", "fraud", *bad])
        assert exit_info.value.code == 2


def test_the_command_loads_without_numpy() -> None:
    """Its metric names come from ``calmon.catalogue``, not from the engine: the command line
    starts without importing NumPy."""
    probe = "import sys, calmon.commands.windows; print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def _decision(
    windows: int, n_pos: int, likelihood: float | None, interval: Any, verdict: str
) -> Any:
    return {
        "windows": windows,
        "start": "2026-11-01T06:00:00Z",
        "n": 12000,
        "n_pos": n_pos,
        "verdict": verdict,
        "metric": "average_precision",
        "prior_part": 0.01,
        "prior_interval": None if interval is None else [-0.02, 0.04],
        "likelihood_part": likelihood,
        "likelihood_interval": interval,
        "positives_shift": None,
        "reference": {key: REFERENCE[key] for key in ("kind", "start", "end", "windows")},
    }


def test_the_table_shows_each_windows_pooled_decision_and_its_verdict() -> None:
    """A window of 16 positives has no AP interval of its own (``?``); its decision pools 6
    windows to 104 positives and says the model got worse."""
    worse = _record(
        "2026-11-01T11:00:00Z",
        split=_parts(0.001, None, -0.2334, None),
        calibrated={"average_precision": 0.2276},
    )
    worse["decision"] = _decision(6, 104, -0.181, [-0.25, -0.11], "model_got_worse")
    short = _record("2026-11-01T12:00:00Z", split=None, calibrated=None)
    short["decision"] = _decision(2, 31, None, None, "not_enough_data")
    lines = format_table(
        [worse, short], model="fraud", segment="*", metric="average_precision"
    ).split("\n")
    assert lines[2].split()[-9:-5] == ["pooled", "decision", "verdict", "against"]
    fixed = "fixed reference 1 Nov 2026 08:00\u201310:00 UTC"
    assert lines[3].split()[-12:-8] == ["-0.233?", "6/104", "-0.181*", "model_got_worse"]
    assert lines[4].split()[-11:-8] == ["2/31", "-", "not_enough_data"]
    assert [line.endswith(f"  {fixed}  -") for line in lines[3:5]] == [True, True]


def test_advice_columns_show_the_configured_and_the_advised_threshold() -> None:
    advice = {
        "configured_threshold": 0.5,
        "threshold": 0.91234,
        "assumption": {"holds": True, "p_value": 0.4, "method": "ks_by_class"},
    }
    records: list[Any] = [
        {**_record("2026-11-01T10:00:00Z", split=None, calibrated=None), "advice": advice},
        {
            **_record("2026-11-01T11:00:00Z", split=None, calibrated=None),
            "advice": {**advice, "assumption": {"holds": False, "p_value": 0.0, "method": "ks"}},
        },
        {
            **_record("2026-11-01T12:00:00Z", split=None, calibrated=None),
            "advice": {**advice, "threshold": None},
        },
    ]
    lines = format_table(records, model="m", segment="*", metric="average_precision").splitlines()
    assert lines[2].split()[-2:] == ["threshold", "advised"]
    assert lines[3].split()[-2:] == ["0.5000", "0.9123"]
    assert lines[4].split()[-2:] == ["0.5000", "withheld"]
    assert lines[5].split()[-2:] == ["0.5000", "-"]
    assert "label-shift check failed" in lines[-1]
    plain = format_table(
        [_record("2026-11-01T10:00:00Z", split=None, calibrated=None)],
        model="m",
        segment="*",
        metric="average_precision",
    )
    assert "advised" not in plain


def test_a_path_the_server_does_not_serve_says_the_url_is_not_its_root() -> None:
    url = "http://calmon.test/calmon/v1/models/m"
    unknown_path = ApiError(
        "GET /v1/models/m: 404 not_found: Not Found",
        status=404,
        code="not_found",
        reason="not_found: Not Found",
        url=url,
    )
    assert api_error_text(unknown_path) == (
        f"not_found: Not Found ({url} is not a path of the calmon API: is --url the server's"
        " root URL, such as http://127.0.0.1:8000?)"
    )
    missing_model = ApiError(
        "x", status=404, code="model_not_found", reason="model_not_found: no model named 'm'"
    )
    assert api_error_text(missing_model) == "model_not_found: no model named 'm'"
    unreachable = ApiError("x", reason="ConnectError: refused")
    assert api_error_text(unreachable) == "ConnectError: refused"
