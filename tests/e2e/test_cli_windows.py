"""`calmon windows` against a real `calmon serve` holding windows computed from a simulated
stream: the table shows the stored records (values, marks of the split's intervals, the last
N windows), and errors are one line with the documented exit status."""

from __future__ import annotations

import re
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from calmon.words import period_text
from harness.processes import calmon_command, wait_until_up
from harness.stack import API_TOKENS, SERVE, LocalStack, running

pytestmark = pytest.mark.slow

READER = "windows-reader-0123456789"
ADMIN = "windows-admin-0123456789"


def _calmon(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*calmon_command(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _mark(bounds: list[float] | None) -> str:
    if bounds is None:
        return "?"
    return "" if bounds[0] <= 0.0 <= bounds[1] else "*"


def _expected_row(record: dict[str, Any], metric: str) -> list[str]:
    """The cells `calmon windows` should print for ``record`` (split on spaces)."""
    calibrated = (record["calibrated"]["reference"] or {}).get(metric)
    parts = (record["split"] or {}).get(metric)
    cells = [
        record["start"][:10],
        record["start"][11:16],
        str(record["n"]),
        str(record["n_pos"]),
        str(record["unlabelled"]),
        f"{record['prior']:.4f}",
        f"{record['regular'][metric]:.3f}",
        "-" if calibrated is None else f"{calibrated:.3f}",
    ]
    for name in ("prior", "likelihood"):
        if parts is None:
            cells.append("-")
        else:
            cells.append(f"{parts[name]:+.3f}{_mark(parts[f'{name}_interval'])}")
    decision = record["decision"]
    likelihood = decision["likelihood_part"]
    cells.append(f"{decision['windows']}/{decision['n_pos']}")
    cells.append(
        "-" if likelihood is None else f"{likelihood:+.3f}{_mark(decision['likelihood_interval'])}"
    )
    cells.append(decision["verdict"])
    # what the verdict compares with: the simulation's fixed reference, its period in words
    reference = decision["reference"]
    assert reference["kind"] == "fixed"
    period = period_text(
        datetime.fromisoformat(reference["start"]), datetime.fromisoformat(reference["end"])
    )
    cells += ["fixed", "reference", *period.split()]
    cells.append("-")  # the label-free estimate speaks only before most labels land
    advice = record.get("advice")
    if advice is not None:
        advised = advice["threshold"]
        broken = (advice.get("assumption") or {}).get("holds") is False
        cells.append(f"{advice['configured_threshold']:.4f}")
        cells.append("-" if advised is None else "withheld" if broken else f"{advised:.4f}")
    return cells


def test_windows_table_from_a_real_server(tmp_path: Path) -> None:
    stack = LocalStack.create(
        tmp_path, database_url=f"sqlite:///{tmp_path / 'calmon.db'}", scheduler_interval="1"
    )
    base, env = stack.base, stack.environment()
    tokens = {API_TOKENS: f"{READER}:read,{ADMIN}:admin"}
    with running(
        stack.command(SERVE), env={**stack.environment(SERVE), **tokens}, log=tmp_path / "serve.log"
    ) as serve:
        wait_until_up(base, serve)
        simulated = _calmon(
            "simulate",
            "--url",
            base,
            "--model",
            "shown",
            "--per-window",
            "4000",
            "--windows-per-phase",
            "2",
            "--seed",
            "11",
            "--wait",
            "120",
            env={**env, "CALMON_TOKEN": ADMIN},
        )
        assert simulated.returncode == 0, simulated.stderr
        # the same command again: a fresh model, not windows mixing two streams
        again = _calmon(*simulated.args[1:], env={**env, "CALMON_TOKEN": ADMIN})
        assert again.returncode == 0, again.stderr
        assert "model shown exists" in again.stderr
        assert "sending to model shown-2 instead" in again.stderr
        assert "every window computed" in again.stderr
        # the same verdicts, intervals included: they follow the data, not the model's name
        verdicts = [text.split("\n\n")[1] for text in (again.stdout, simulated.stdout)]
        assert verdicts[0] == verdicts[1]
        assert re.search(r"likelihood part of AP -0\.\d+ \[-0\.\d+, -0\.\d+\]", verdicts[0])
        assert "likelihood: class ratio x" in verdicts[0]
        records = httpx.get(
            f"{base}/v1/models/shown/windows",
            params={"segment": "*"},
            headers={"Authorization": f"Bearer {READER}"},
        ).json()["windows"]
        assert len(records) == 6

        shown = _calmon(
            "windows", "shown", "--url", base, "--last", "4", env={**env, "CALMON_TOKEN": READER}
        )
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0] == "model shown, segment *, average_precision"
        assert lines[1].startswith("reference of the latest window: the fixed reference ")
        assert f", {records[0]['reference']['start']} to " in lines[1]
        assert lines[2].split()[:3] == ["window", "start", "(UTC)"]
        rows = [line.split() for line in lines[3:7]]
        assert rows == [_expected_row(record, "average_precision") for record in records[-4:]]
        # the likelihood drift's windows: the model got worse, and the interval says so
        assert all(row[9].endswith("*") and row[9].startswith("-") for row in rows[-2:])
        assert all(row[12] in {"model_got_worse", "both"} for row in rows[-2:])
        assert lines[7].startswith("* ")
        assert len(lines) == 12  # the legend names the advice column's mark too

        by_flag = _calmon(
            "windows", "shown", "--url", base, "--metric", "roc_auc", "--token", READER, env=env
        )
        assert by_flag.returncode == 0, by_flag.stderr
        auc_rows = [line.split() for line in by_flag.stdout.splitlines()[3:9]]
        assert auc_rows == [_expected_row(record, "roc_auc") for record in records]
        assert all(row[7:10] == ["-", "-", "-"] for row in auc_rows)

        unknown = _calmon("windows", "absent", "--url", base, "--token", READER, env=env)
        assert unknown.returncode == 2
        assert unknown.stdout == ""
        assert unknown.stderr.splitlines() == [
            "calmon windows: model_not_found: no model named 'absent'"
        ]
        no_segment = _calmon(
            "windows", "shown", "--url", base, "--segment", "country=XX", "--token", READER, env=env
        )
        assert no_segment.returncode == 2
        assert no_segment.stderr.splitlines() == [
            "calmon windows: model shown has no window of segment 'country=XX'; its segments: *"
        ]
        api_path = _calmon("windows", "shown", "--url", f"{base}/v1", "--token", READER, env=env)
        assert api_path.returncode == 2
        assert (
            f"'{base}/v1' holds the API path /v1: give the server's root URL, e.g. {base}"
            in api_path.stderr
        )
        elsewhere = _calmon(
            "windows", "shown", "--url", f"{base}/calmon", "--token", READER, env=env
        )
        assert elsewhere.returncode == 2
        assert elsewhere.stderr.splitlines() == [
            f"calmon windows: not_found: Not Found ({base}/calmon/v1/models/shown is not a path"
            " of the calmon API: is --url the server's root URL, such as http://127.0.0.1:8000?)"
        ]
        anonymous = _calmon("windows", "shown", "--url", base, env=env)
        assert anonymous.returncode == 2
        assert anonymous.stderr.startswith("calmon windows: unauthorized: ")
    down = _calmon("windows", "shown", "--url", base, "--token", READER, env=env, timeout=30)
    assert down.returncode == 1
    assert down.stdout == ""
    assert len(down.stderr.splitlines()) == 1
    assert down.stderr.startswith(f"calmon windows: {base}: ConnectError")
