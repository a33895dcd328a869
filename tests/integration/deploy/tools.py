"""The deployment files and the tools their tests run: where they are, and a missing tool
(a skip remembered for the run's closing warning, a failure under
``CALMON_REQUIRE_PROMETHEUS=1``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.skips import not_run_reasons

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"

_skipped = not_run_reasons("deployment checks")


def _missing(reason: str) -> NoReturn:
    """Skip, remembering why for the summary; fail instead under CALMON_REQUIRE_PROMETHEUS=1."""
    if os.environ.get("CALMON_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"{reason} and CALMON_REQUIRE_PROMETHEUS=1")
    _skipped.append(reason)
    pytest.skip(reason)


def tool(name: str) -> str:
    """Path of the tool ``name``; :func:`_missing` when it is not installed."""
    path = shutil.which(name)
    if path is not None:
        return path
    _missing(f"{name} not found (Debian: apt-get install prometheus prometheus-alertmanager)")


def find_compose() -> list[str]:
    """The first compose client that answers `version`; :func:`_missing` when none does."""
    candidates = [["docker", "compose"], ["docker-compose"]]
    for command in candidates:
        if shutil.which(command[0]) is None:
            continue
        probe = subprocess.run(
            [*command, "version"], capture_output=True, text=True, timeout=60, check=False
        )
        if probe.returncode == 0:
            return command
    _missing("neither `docker compose` nor `docker-compose` is available")
