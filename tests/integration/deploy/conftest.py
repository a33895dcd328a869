"""Fixtures for the deployment files' tests: the Prometheus tools, the compose client, and the
scheduler tests' database environment (``env``) for the scrape of the real processes.

Without ``promtool``/``prometheus`` or a compose client these tests skip and the run ends with a
loud warning, unless ``CALMON_REQUIRE_PROMETHEUS=1`` (CI), which turns that into a failure.
Debian's ``prometheus`` package provides both tools. The lookups are
:mod:`tests.integration.deploy.tools`.
"""

from __future__ import annotations

import pytest

from tests.integration.deploy.tools import DEPLOY as DEPLOY
from tests.integration.deploy.tools import REPO as REPO
from tests.integration.deploy.tools import find_compose as find_compose
from tests.integration.deploy.tools import tool
from tests.integration.scheduler.conftest import env as env


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool; skips (or fails in CI) when it is missing."""
    return tool("promtool")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """Path of the Prometheus server; skips (or fails in CI) when it is missing."""
    return tool("prometheus")


@pytest.fixture(scope="session")
def amtool() -> str:
    """Path of amtool; skips (or fails in CI) when it is missing."""
    return tool("amtool")


@pytest.fixture(scope="session")
def compose_command() -> list[str]:
    """`docker compose` (v2) or `docker-compose` (v1); skips loudly when neither runs (fails
    in CI)."""
    return find_compose()
