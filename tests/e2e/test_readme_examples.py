"""The README's examples, and those the README sends the reader to, run as written and answer
what they show.

Every fenced block of the README is either run here or listed in :data:`NOT_RUN` with the
reason, so a new block cannot go untested unnoticed. Commands run verbatim with bash in a
fresh directory holding ``.venv/bin/calmon`` (the code under test) and ``examples/``, as in a
clone after the quick start: the README's "Send your data" requests against a real
`calmon serve` (the answers in their comments), the walk-through of ``docs/reference/api.md`` ("API
usage": its `curl` commands in order, the windows excerpt field by field, `calmon windows`
line by line), the "Running it" lines of ``docs/reference/deployment.md`` (`migrate` to its end, the
servers until they answer), the `calmon evaluate` examples (README and
``docs/reference/offline.md``), and the compose `.env` recipe of ``docs/reference/deployment.md``
(its file holds a write+read and an admin token and Grafana's password; `docker compose` itself runs
in ``tests/e2e/test_container.py``). Only the documented address changes: the servers listen on
free ports. The README's story line is also checked for what its report shows in
``tests/e2e/test_readme_story.py``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from calmon.settings import parse_tokens
from harness.processes import clean_environment, free_port, wait_for, wait_until_up
from harness.stack import SERVE, LocalStack, running

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
API = REPO / "docs" / "reference" / "api.md"
DEPLOYMENT = REPO / "docs" / "reference" / "deployment.md"
OFFLINE = REPO / "docs" / "reference" / "offline.md"
DOCUMENTED = "http://127.0.0.1:8000"
#: a "key":value pair of the windows excerpt with a literal value (no "…")
PAIR = re.compile(r'"(\w+)":(null|-?[0-9][0-9.e+-]*|"[^"…]*")(?=[,}\]])')
#: how the first line of each block not run here starts, and why it is not
NOT_RUN = {
    "python3 -m venv .venv && .venv/bin/pip install -e ./client -e . && .venv/bin/calmon serve": (
        "installs from the network; its `calmon serve` runs in test_serve_quickstart.py"
    ),
    "./scripts/test": "the test suite itself",
    "from calmon import evaluate_frame, report": (
        "needs the reader's data frames; tests/unit/test_notebook.py runs both calls, and"
        " docs/reference/notebook.md's session"
    ),
    ".venv/bin/pip install ./client": (
        "builds the client package with the network's setuptools; scripts/test installs it"
        " (editable) and tests/unit/client/test_package.py checks what it declares"
    ),
    "from calmon_client import Monitor": (
        "tests/integration/client/test_readme_example.py runs it against a real calmon api"
    ),
}


def _section(title: str, path: Path = README) -> str:
    text = path.read_text()
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


def _every_block() -> list[str]:
    """The first line of every fenced block of the README."""
    return [
        body.splitlines()[0]
        for body in re.findall(r"```\w*\n(.*?)```", README.read_text(), flags=re.DOTALL)
    ]


def _clone(directory: Path) -> Path:
    """A directory as after the quick start: ``.venv/bin/calmon`` (the code under test) and
    the repository's ``examples/``."""
    bin_dir = directory / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    calmon = bin_dir / "calmon"
    calmon.write_text(f'#!/bin/sh\nexec {sys.executable} -m calmon.cli "$@"\n')
    calmon.chmod(0o755)
    (directory / "examples").symlink_to(REPO / "examples")
    return directory


def _environment(**settings: str) -> dict[str, str]:
    return {**clean_environment(), "PYTHONPATH": str(REPO), **settings}


def _sh(command: str, base: str, *, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command.replace(DOCUMENTED, base)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env=_environment(),
    )
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def _computed(base: str) -> None:
    """Wait until both example windows are computed, the second one against the first."""

    def computed() -> bool:
        records = httpx.get(f"{base}/v1/models/fraud/windows", params={"segment": "*"}).json()
        windows = records["windows"]
        return len(windows) == 2 and windows[1]["reference"] is not None and windows[0]["n"] == 4

    wait_for("the example windows computed", computed, timeout=60)


def test_api_usage_examples_answer_as_the_readme_shows(tmp_path: Path) -> None:
    blocks = _blocks(_section("API usage", API))
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

        # as written, but for the server's address (the documented one is the default)
        assert table[0].strip() == ".venv/bin/calmon windows fraud"
        shown = _sh(f"{table[0].strip()} --url {base}", base, cwd=_clone(tmp_path / "clone"))
        assert shown.splitlines() == table[1]

        assert '"status":"pending"' in _sh(recompute[0], base)


def test_send_your_data_answers_as_the_readme_shows(tmp_path: Path) -> None:
    model, sending = _blocks(_section("Send your data"))
    stack = LocalStack.create(
        tmp_path, database_url=f"sqlite:///{tmp_path / 'calmon.db'}", scheduler_interval="1"
    )
    base = stack.base
    with stack.start(SERVE) as serve:
        wait_until_up(base, serve)
        created = json.loads(_sh(model[0], base))
        assert created["reference"] == {
            "kind": "fixed",
            "start": "2026-11-01T08:00:00Z",
            "end": "2026-11-01T09:00:00Z",
        }
        assert _sh(sending[0], base) == "".join(sending[1])

        def compared() -> bool:
            answer = httpx.get(f"{base}/v1/models/fraud/windows", params={"segment": "*"})
            windows = answer.json()["windows"]
            return len(windows) == 2 and windows[1]["reference"] is not None

        wait_for("the second window compared with the fixed reference", compared, timeout=60)
        windows = httpx.get(f"{base}/v1/models/fraud/windows", params={"segment": "*"}).json()
        assert windows["windows"][1]["reference"]["kind"] == "fixed"


def test_evaluate_examples_run_on_the_example_files(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    blocks = _blocks(_section("Offline evaluation")) + _blocks(
        _section("`calmon evaluate`", OFFLINE)
    )
    commands = [line for commands, _ in blocks for line in commands.splitlines()]
    assert len(commands) == 4
    for command in commands:
        assert command.startswith(
            (
                ".venv/bin/calmon evaluate examples/scores.csv ",
                ".venv/bin/calmon evaluate examples/story.csv ",
            )
        )
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=clone,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        html = command.split("--html ", 1)[1] if "--html " in command else None
        shown = "" if html is None else f"report written to {(clone / html).resolve()}\n"
        assert done.stderr == shown
        assert "n_pos" in done.stdout
    assert "<h2>Verdict per window</h2>" in (clone / "story.html").read_text()
    report = (clone / "report.html").read_text()
    assert "<h2>Verdict per window</h2>" in report
    assert "2026-11-02T00:00:00Z" in report  # the second day, against the first


def test_every_block_is_run_or_says_why_not() -> None:
    run = {
        *(commands.splitlines()[0] for commands, _ in _blocks(_section("Send your data"))),
        *(commands.splitlines()[0] for commands, _ in _blocks(_section("Offline evaluation"))),
    }
    excused = []
    for first in _every_block():
        if first in run:
            continue
        reasons = [prefix for prefix in NOT_RUN if first.startswith(prefix)]
        assert len(reasons) == 1, f"README block neither run nor excused: {first}"
        excused += reasons
    assert sorted(excused) == sorted(NOT_RUN)


def test_running_it_lines_work_as_written(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    (block,) = _blocks(_section("Running it", DEPLOYMENT))
    lines = [line.split("  #")[0].strip() for line in block[0].splitlines()]
    assert lines == [
        ".venv/bin/calmon migrate",
        ".venv/bin/calmon retention",
        ".venv/bin/calmon api --workers 2",
        ".venv/bin/calmon serve",
        ".venv/bin/calmon scheduler",
        ".venv/bin/calmon windows MODEL",
    ]
    migrated = _sh(lines[0], DOCUMENTED, cwd=clone)
    assert migrated == ""
    assert (clone / "calmon.db").is_file()
    retention = _sh(lines[1], DOCUMENTED, cwd=clone)
    assert retention.startswith("retention: none stored yet"), retention
    lines.pop(1)
    for line in lines[1:3]:
        port = free_port()
        env = _environment(CALMON_PORT=str(port), CALMON_SCHEDULER_INTERVAL="60")
        log = clone / "server.log"
        with running(["bash", "-c", f"exec {line}"], log=log, env=env) as process:
            wait_until_up(f"http://127.0.0.1:{port}", process)
            assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
    env = _environment(CALMON_SCHEDULER_INTERVAL="60")
    with running(
        ["bash", "-c", f"exec {lines[3]} --metrics-port 0"], log=clone / "s.log", env=env
    ) as scheduler:

        def started() -> bool:
            assert scheduler.poll() is None, (clone / "s.log").read_text()
            return "scheduler started" in (clone / "s.log").read_text()

        wait_for("the scheduler to start", started, timeout=30)
    # MODEL is a placeholder: the line names its argument and says so for an unknown one
    port = free_port()
    unknown = subprocess.run(
        ["bash", "-c", f"{lines[4]} --url http://127.0.0.1:{port}"],
        cwd=clone,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unknown.returncode == 1
    assert "ConnectError" in unknown.stderr


def test_compose_env_recipe_gives_an_admin_token_and_grafana_password(tmp_path: Path) -> None:
    (block,) = _blocks(_section("Start", DEPLOYMENT))
    commands = block[0].rstrip("\n")
    recipe, compose = commands.rsplit("\n", 1)
    assert compose == "docker compose up -d --build"
    _sh(recipe, DOCUMENTED, cwd=tmp_path)
    values = dict(
        line.split("=", 1) for line in (tmp_path / ".env").read_text().splitlines() if line
    )
    assert set(values) == {"CALMON_API_TOKENS", "GRAFANA_ADMIN_PASSWORD"}
    tokens = parse_tokens(values["CALMON_API_TOKENS"], source=".env")
    assert sorted(map(sorted, tokens.values())) == [["admin"], ["read", "write"]]
    assert len(values["GRAFANA_ADMIN_PASSWORD"]) >= 16
    assert os.stat(tmp_path / ".env").st_size > 100
