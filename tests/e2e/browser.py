"""The Chromium the web view tests drive (:mod:`harness.browser` drives it): skipped
with a warning when there is none, a failure under ``CALMON_REQUIRE_CHROMIUM=1`` (CI)."""

from __future__ import annotations

from harness.browser import chromium_path
from tests.support.skips import not_run


def require_chromium() -> str:
    """The Chromium binary; skips the test with a warning when absent, or fails under
    ``CALMON_REQUIRE_CHROMIUM=1``."""
    path = chromium_path()
    if path is not None:
        return path
    not_run(
        "web view browser tests",
        "no Chromium (apt package `chromium`, or CALMON_CHROMIUM)",
        require_env="CALMON_REQUIRE_CHROMIUM",
    )
