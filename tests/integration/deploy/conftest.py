"""Fixtures for the deployment files' tests: the Prometheus server and amtool, and the compose
client (promtool and the scheduler tests' environment ``env`` are the integration tests').

Without ``promtool``/``prometheus`` or a compose client these tests skip and the run ends with a
loud warning, unless ``CALMON_REQUIRE_PROMETHEUS=1`` (CI), which turns that into a failure.
Debian's ``prometheus`` package provides both tools. The lookups are
:mod:`tests.integration.deploy.tools`.
"""

from __future__ import annotations

import pytest

from tests.integration.deploy.tools import find_compose, tool


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
