"""The exporter tests run on the scheduler tests' databases (each backend) and tools."""

from __future__ import annotations

from tests.integration.deploy.conftest import promtool
from tests.integration.scheduler.conftest import env

__all__ = ["env", "promtool"]
