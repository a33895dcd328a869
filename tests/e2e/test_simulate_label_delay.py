"""`calmon simulate --label-delay` against a real `calmon serve`: the windows after the stable
period first hold only the label-free estimate of their prior, then, once the late labels
landed, their measured prior beside the unchanged estimate.

A small stream (2 windows per phase of 5,000 predictions, stable then a prior shift from
π 0.05 to 0.008) keeps the run within seconds; the summary tables the command prints before
and after the labels are checked against the truth file and the stored window records.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.stack import SERVE, LocalStack
from tests.e2e.test_serve_quickstart import calmon_command, wait_until_up

pytestmark = pytest.mark.slow

PER_WINDOW = 5000


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
                "2",
                "--phases",
                "stable,prior",
                "--label-delay",
                "2",
                "--truth",
                str(truth_file),
                "--wait",
                "60",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        response = httpx.get(f"{base}/v1/models/late/windows", params={"limit": "100"})
    assert run.returncode == 0, f"{run.stderr}\n{run.stdout}"
    assert "sent 10000 labels late" in run.stderr
    assert response.status_code == 200, response.text
    records: dict[str, dict[str, Any]] = {r["start"]: r for r in response.json()["windows"]}
    truth = json.loads(truth_file.read_text())
    rows = truth["windows"]
    assert [row["phase"] for row in rows] == ["stable", "stable", "prior", "prior"]

    before, after = _tables(run.stdout)
    # columns: date, time, phase, n, prior, ..., estimated prior (last)
    for line, row in zip(before, rows, strict=True):
        assert line[2] == row["phase"]
        if row["phase"] == "stable":
            assert (int(line[3]), line[4]) == (PER_WINDOW, f"{row['n_pos'] / PER_WINDOW:.4f}")
            assert 0.03 < float(line[-1]) < 0.08
        else:
            # no label yet: nothing measured, the estimate already sees the shift
            assert (line[3], line[4]) == ("0", "-")
            assert float(line[-1]) < 0.3 * float(before[0][-1])
    for line_before, line_after, row in zip(before, after, rows, strict=True):
        record = records[row["start"]]
        assert (record["n"], record["n_pos"], record["unlabelled"]) == (PER_WINDOW, row["n_pos"], 0)
        assert (int(line_after[3]), line_after[4]) == (PER_WINDOW, f"{record['prior']:.4f}")
        # the estimate never uses the window's labels: it stays what it was
        assert line_after[-1] == line_before[-1]
        assert line_after[-1] == f"{record['estimated']['positive_class_ratio']:.4f}"
