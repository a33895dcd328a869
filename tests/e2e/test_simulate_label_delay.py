"""`calmon simulate --label-delay` against a real `calmon serve`: the windows after the stable
period first hold only the label-free estimate of their prior, then, once the late labels
landed, their measured prior (the labels now measure it: the estimate is no longer computed).

The stream: one window per phase of 40,000 predictions, stable (the reference), then a prior
shift from π 0.05 to 0.008, then a likelihood drift (the positives' scores fall, π back at
0.05). Before the labels land, the prior-shift window is read as a class-ratio change (the
label-shift check holds) and the likelihood-drift window is flagged (the check rejects: the
scores changed in a way a class-ratio change does not explain). That drift moves the positives
only, so the window looks much like fewer positives: at 5,000 predictions per window the check
does not see it (p about 0.3), at 20,000 it is borderline (p about 0.02), from 40,000 it
rejects (p about 0.002-0.005; ``docs/reference/metrics.md``). The summary tables the command prints
before and after the labels are checked against the truth file and the stored window records.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.processes import calmon_command, wait_until_up
from harness.stack import SERVE, LocalStack

pytestmark = pytest.mark.slow

PER_WINDOW = 40_000


def _tables(out: str) -> list[list[list[str]]]:
    """The rows of each summary table the command printed, each row split on blanks."""
    tables: list[list[list[str]]] = []
    for line in out.splitlines():
        if line.startswith("window start (UTC)"):
            tables.append([])
        elif tables and line[:4].isdigit():
            tables[-1].append(line.split())
    return tables


def test_estimates_come_before_late_labels_and_measured_values_after(tmp_path: Path) -> None:
    stack = LocalStack.create(
        tmp_path, database_url=f"sqlite:///{tmp_path / 'calmon.db'}", scheduler_interval="1"
    )
    base, env = stack.base, stack.environment()
    truth_file = tmp_path / "truth.json"
    with stack.start(SERVE) as serve:
        wait_until_up(base, serve)
        run = subprocess.run(
            [
                *calmon_command(),
                "simulate",
                "--url",
                base,
                "--model",
                "late",
                "--seed",
                "3",
                "--per-window",
                str(PER_WINDOW),
                "--windows-per-phase",
                "1",
                "--phases",
                "stable,prior,likelihood",
                "--label-delay",
                "2",
                "--truth",
                str(truth_file),
                "--wait",
                "240",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=420,
        )
        response = httpx.get(f"{base}/v1/models/late/windows", params={"limit": "100"})
    assert run.returncode == 0, f"{run.stderr}\n{run.stdout}"
    assert f"sent {2 * PER_WINDOW:,} labels late" in run.stderr
    assert response.status_code == 200, response.text
    records: dict[str, dict[str, Any]] = {r["start"]: r for r in response.json()["windows"]}
    truth = json.loads(truth_file.read_text())
    rows = truth["windows"]
    assert [row["phase"] for row in rows] == ["stable", "prior", "likelihood"]

    before, after = _tables(run.stdout)
    # columns: date, time, phase, n, prior, ..., unlabelled, estimated prior, [lo,hi], verdict
    for line, row in zip(before, rows, strict=True):
        assert line[2] == row["phase"]
        if row["phase"] == "stable":
            assert (int(line[3]), line[4]) == (PER_WINDOW, f"{row['n_pos'] / PER_WINDOW:.4f}")
            # labelled: its labels measure its ratio, no estimate is computed
            assert line[-2:] == ["0", "-"]
        else:
            # no label yet: nothing measured, the estimate speaks
            assert (line[3], line[4], line[-4]) == ("0", "-", str(PER_WINDOW))
            if row["phase"] == "prior":
                assert float(line[-3]) < 0.3 * float(before[0][4])
                # a fall reads as fewer positives or positives scoring lower, never settled
                assert line[-1] == "fewer_positives_or_lower_scores"
            else:
                assert line[-1] == "scores_changed"
    verdicts = run.stdout[: run.stdout.index("sent ")] if "sent " in run.stdout else run.stdout
    assert "prior: no labels yet; estimated class ratio" in run.stdout
    assert "scores consistent with a class-ratio change" in run.stdout
    assert (
        "likelihood: no labels yet; scores changed in a way a class-ratio change does not explain"
        " (label-shift check rejects in 1 of 1 window)" in run.stdout
    ), verdicts
    for line_after, row in zip(after, rows, strict=True):
        record = records[row["start"]]
        assert (record["n"], record["n_pos"], record["unlabelled"]) == (PER_WINDOW, row["n_pos"], 0)
        assert (int(line_after[3]), line_after[4]) == (PER_WINDOW, f"{record['prior']:.4f}")
        # every label landed (hundreds of each class): the labels measure the window's ratio,
        # and the estimate, which spoke before them, is not computed
        assert row["n_pos"] >= 30
        assert record["estimated"] is None
        assert line_after[-1] == "-"
