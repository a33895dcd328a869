"""Fixtures for the deployment files' tests: the Prometheus tools, the compose client, and the
scheduler tests' database environment (``env``) for the scrape of the real processes.

Without ``promtool``/``prometheus`` or a compose client these tests skip and the run ends with a
loud warning, unless ``CALMON_REQUIRE_PROMETHEUS=1`` (CI), which turns that into a failure.
Debian's ``prometheus`` package provides both tools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from tests.integration.scheduler.conftest import env as env
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


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is not None:
        return path
    _missing(f"{name} not found (Debian: apt-get install prometheus prometheus-alertmanager)")


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool; skips (or fails in CI) when it is missing."""
    return _tool("promtool")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """Path of the Prometheus server; skips (or fails in CI) when it is missing."""
    return _tool("prometheus")


@pytest.fixture(scope="session")
def amtool() -> str:
    """Path of amtool; skips (or fails in CI) when it is missing."""
    return _tool("amtool")


@pytest.fixture(scope="session")
def compose_command() -> list[str]:
    """`docker compose` (v2) or `docker-compose` (v1); skips loudly when neither runs (fails
    in CI)."""
    return find_compose()


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
