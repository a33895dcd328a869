"""The README's examples run as written against a real `calmon serve`, and answer what the
README shows: the API usage section's `curl` commands in order (the answers in their comments,
the windows excerpt field by field), `calmon windows` line by line, and the `calmon evaluate`
examples on `examples/scores.csv`."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.stack import SERVE, LocalStack
from tests.e2e.test_serve_quickstart import calmon_command, wait_until_up

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCUMENTED = "http://127.0.0.1:8000"
#: a "key":value pair of the windows excerpt with a literal value (no "…")
PAIR = re.compile(r'"(\w+)":(null|-?[0-9][0-9.e+-]*|"[^"…]*")(?=[,}\]])')


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def _blocks(section: str) -> list[tuple[str, list[str]]]:
    """Each ```sh block of ``section``: its commands (comment lines removed) and the comment
    lines that follow the last command (what it answers), without their ``# ``."""
    blocks = []
    for body in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL):
        lines = body.splitlines()
        commands = "\n".join(line for line in lines if not line.startswith("#"))
        answer = [line[2:] for line in lines if line.startswith("# ")]
        blocks.append((commands, answer))
    return blocks


def _sh(command: str, base: str) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command.replace(DOCUMENTED, base)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def _computed(base: str) -> None:
    """Wait until both example windows are computed, the second one against the first."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = httpx.get(f"{base}/v1/models/fraud/windows", params={"segment": "*"}).json()
        windows = records["windows"]
        if len(windows) == 2 and windows[1]["reference"] is not None and windows[0]["n"] == 4:
            return
        time.sleep(0.5)
    raise AssertionError("the example windows were not computed in time")


def test_api_usage_examples_answer_as_the_readme_shows(tmp_path: Path) -> None:
    blocks = _blocks(_section("API usage"))
    assert len(blocks) == 6
    models, predictions, labels, windows, table, recompute = blocks
    stack = LocalStack.create(
        tmp_path, database_url=f"sqlite:///{tmp_path / 'calmon.db'}", scheduler_interval="1"
    )
    base = stack.base
    with stack.start(SERVE) as serve:
        wait_until_up(base, serve)
        _sh(models[0], base)
        assert _sh(predictions[0], base) == predictions[1][0]
        assert _sh(labels[0], base) == labels[1][0]
        _computed(base)

        answer = _sh(windows[0], base)
        excerpt = "".join(line.strip() for line in windows[1])
        assert excerpt.startswith('{"windows":[{"start":"2026-11-01T08:00:00Z"')
        pairs = PAIR.findall(excerpt)
        assert len(pairs) > 40
        for key, value in pairs:
            assert f'"{key}":{value}' in answer, (key, value)
        starts = re.findall(r'"start":"([^"]+)","end"', answer)
        assert starts[:2] == ["2026-11-01T08:00:00Z", "2026-11-01T09:00:00Z"]

        assert table[0].strip() == "calmon windows fraud"
        shown = subprocess.run(
            [*calmon_command(), "windows", "fraud", "--url", base],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines() == table[1]

        assert '"status":"pending"' in _sh(recompute[0], base)


def test_evaluate_examples_run_on_the_example_file() -> None:
    section = _section("Offline evaluation")
    commands = _blocks(section)[0][0].splitlines()
    assert len(commands) == 2
    for command in commands:
        args = shlex.split(command)
        assert args[:2] == ["calmon", "evaluate"]
        assert args[2] == "examples/scores.csv"
        done = subprocess.run(
            [*calmon_command(), *args[1:]],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert "n_pos" in done.stdout
