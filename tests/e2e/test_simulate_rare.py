"""`calmon simulate --prior 0.005` against `calmon serve` (SQLite): the rare-positive preset.

About 20 positives per window (4,000 predictions at π = 0.005): no window alone has an
interval for the parts of its average precision change (under 100 positives), so before
pooled decisions every verdict read "not enough data". Here each window's decision pools the
windows back to 100 positives (the preset's ``decision`` setting; the default, 400, would
need a longer stream), so the likelihood drift
(ROC AUC 0.90 -> 0.80) is decided "model got worse" by the API's record, the web view's
verdict and the command's own summary, within the documented delay: by the time the pooled
windows are the drift's (100 / 20 = 5 windows, ``docs/reference/metrics.md``, "Decisions at few
positives"), here at the latest by the drift's sixth window.
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

WINDOWS_PER_PHASE = 6
#: the drift window by which the decision must say so (1-based): the pooled windows are the
#: drift's from the fifth on (20 positives a window, 100 pooled)
DELAY_WINDOWS = 6


def test_the_rare_positive_drift_is_decided_by_pooled_windows(tmp_path: Path) -> None:
    stack = LocalStack.create(
        tmp_path, database_url=f"sqlite:///{tmp_path / 'calmon.db'}", scheduler_interval="2"
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
                "cards",
                "--seed",
                "11",
                "--prior",
                "0.005",
                "--per-window",
                "4000",
                "--windows-per-phase",
                str(WINDOWS_PER_PHASE),
                "--phases",
                "stable,likelihood",
                "--truth",
                str(truth_file),
                "--wait",
                "300",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
        assert run.returncode == 0, run.stderr + run.stdout
        response = httpx.get(
            f"{base}/v1/models/cards/windows", params={"segment": "*", "limit": "1000"}
        )
        assert response.status_code == 200, response.text
        records: list[dict[str, Any]] = response.json()["windows"]
        page = httpx.get(f"{base}/ui/models/cards")
        assert page.status_code == 200
    truth = json.loads(truth_file.read_text())
    assert truth["phases"]["stable"]["prior"] == 0.005
    drift = [
        r for r, row in zip(records, truth["windows"], strict=True) if row["phase"] != "stable"
    ]
    assert len(drift) == WINDOWS_PER_PHASE
    for record in drift:
        assert record["n_pos"] < 100
        assert record["split"]["average_precision"]["likelihood_interval"] is None
    verdicts = [r["decision"]["verdict"] for r in drift]
    first = verdicts.index("model_got_worse") + 1
    assert first <= DELAY_WINDOWS, verdicts
    assert verdicts[-1] == "model_got_worse", verdicts
    last = drift[-1]["decision"]
    assert last["windows"] > 1
    assert last["n_pos"] >= 100
    assert last["likelihood_interval"][1] < 0.0
    # the web view's verdict is the decision's
    assert 'Latest window: <span class="v-worse">model got worse</span>' in page.text
    # the command's summary ends with the decision per phase
    line = run.stdout.strip().splitlines()[-1]
    assert line.startswith("likelihood: decision model got worse (last window: ")
    assert f"first said at window {first} of the phase" in line
