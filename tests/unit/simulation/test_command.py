"""`calmon simulate` options and progress display."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime

import numpy as np
import pytest

from calmon.cli import build_parser
from calmon.commands.simulate import EPILOG, THRESHOLD, _model_config, _Progress
from calmon.simulation.population import roc_auc
from calmon.simulation.sender import SendTotals
from calmon.simulation.stream import (
    DEFAULT_PHASES,
    PHASES,
    WindowData,
    generate_window,
    plan_windows,
)


def _parse(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(
        ["simulate", "--url", "http://127.0.0.1:8000/", "--model", "m", *extra]
    )


def test_defaults() -> None:
    args = _parse()
    assert vars(args) | {"_run": None} == {
        "command": "simulate",
        "url": "http://127.0.0.1:8000",
        "model": "m",
        "window": "5m",
        "windows_per_phase": 4,
        "per_window": 20_000,
        "phases": None,
        "prior": None,
        "seed": None,
        "token": None,
        "truth": None,
        "batch_size": 1_000,
        "concurrency": 2,
        "label_delay": 0.0,
        "wait": 300.0,
        "reuse": False,
        "_run": None,
    }


def test_help_states_the_phases_as_they_are() -> None:
    for phase in PHASES.values():
        auc = f"ROC AUC {roc_auc(phase.separation):.2f}"
        line = next(line for line in EPILOG.splitlines() if line.split()[:1] == [phase.name])
        assert f"pi = {phase.prior:g}" in line
        assert phase.name == "prior" or auc in line
    assert f"threshold {THRESHOLD:g}" in EPILOG
    assert list(PHASES) == list(DEFAULT_PHASES)


def test_phases_in_any_order_with_stable() -> None:
    assert _parse("--phases", " prior , stable").phases == ["prior", "stable"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--phases", "stable,drift", "unknown phase 'drift'"),
        ("--phases", "stable,prior,stable", "each phase may appear once"),
        ("--phases", "prior,likelihood", "must include stable"),
        ("--batch-size", "10001", "at most 10000"),
        ("--batch-size", "0", "at least 1"),
        ("--per-window", "many", "not an integer"),
        ("--windows-per-phase", "0", "at least 1"),
        ("--wait", "-1", "≥ 0"),
        ("--wait", "inf", "≥ 0"),
        ("--window", "2h", "invalid choice"),
        ("--url", "127.0.0.1:8000", "not an http(s) URL"),
    ],
)
def test_bad_options_are_refused(
    option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["simulate", "--url", "http://x", "--model", "m", option, value])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_model_config_makes_the_stable_period_the_reference() -> None:
    plans = plan_windows(
        phases=[PHASES["prior"], PHASES["stable"], PHASES["likelihood"]],
        window="1h",
        windows_per_phase=2,
        per_window=10,
        now=datetime(2024, 5, 1, 12, 30, tzinfo=UTC),
    )
    assert _model_config(plans, "1h") == {
        "score_kind": "probability",
        "window": "1h",
        "threshold": 0.5,
        "reference": {
            "kind": "fixed",
            "start": "2024-05-01T08:00:00Z",
            "end": "2024-05-01T10:00:00Z",
        },
        "grace": "0s",
        "objective": {"target_precision": 0.5},
    }


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _two_windows() -> list[WindowData]:
    plans = plan_windows(
        phases=[PHASES["stable"]],
        window="5m",
        windows_per_phase=2,
        per_window=300,
        now=datetime(2024, 5, 1, 12, 2, tzinfo=UTC),
    )
    return [generate_window(p, seed=5) for p in plans]


def test_progress_is_a_line_per_window_when_not_a_terminal() -> None:
    out = io.StringIO()
    progress = _Progress(out, total=600, windows=2)
    for data in _two_windows():
        progress.batch(data, 200)
        progress.batch(data, 100)
        progress.window(data, SendTotals(new=250, duplicates=50))
    positives = [int(np.sum(d.labels)) for d in _two_windows()]
    assert out.getvalue().splitlines() == [
        f"window 1/2 2024-05-01 11:50Z stable     sent 300 (positives {positives[0]}):"
        " 250 new, 50 repeats",
        f"window 2/2 2024-05-01 11:55Z stable     sent 300 (positives {positives[1]}):"
        " 250 new, 50 repeats",
    ]


def test_progress_is_a_bar_on_a_terminal() -> None:
    out = _Terminal()
    progress = _Progress(out, total=600, windows=2)
    data = _two_windows()[0]
    progress.batch(data, 300)
    assert out.getvalue() == (
        "\r[###############...............] 300/600 predictions, window 1/2 (stable)"
    )
    progress.window(data, SendTotals(new=300, duplicates=0))
    assert out.getvalue().endswith(" 300 new, 0 repeats\n")
    assert "\r\033[Kwindow 1/2 2024-05-01 11:50Z stable" in out.getvalue()


def test_the_rare_positive_preset_moves_every_phase_prior_by_the_same_factor() -> None:
    from calmon.simulation.stream import STABLE_PRIOR, phases_for

    assert _parse("--prior", "0.005").prior == 0.005
    phases = phases_for(0.005)
    assert phases["stable"].prior == phases["likelihood"].prior == 0.005
    assert phases["prior"].prior == pytest.approx(0.005 * PHASES["prior"].prior / STABLE_PRIOR)
    for name, phase in phases.items():
        assert phase.separation == PHASES[name].separation
    assert phases_for(STABLE_PRIOR) == PHASES
    for bad in ("0", "0.3", "x"):
        with pytest.raises(SystemExit):
            _parse("--prior", bad)
