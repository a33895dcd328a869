"""A real headless Chromium for the web view tests and ``bench/ui.py``, through Playwright.

The browser is Debian's ``chromium`` (``CALMON_CHROMIUM`` names another binary); Playwright
drives it, so no browser build is downloaded. ``.ci/run`` installs the package when it is
missing. Without a browser the tests are skipped with a warning; with
``CALMON_REQUIRE_CHROMIUM=1`` (CI) they fail instead (``tests/e2e/browser.py``).

:class:`Offline` makes a browser context behave as on a network without internet: every request
is recorded, those to the server go through, any other is aborted, so a page that needs another
host shows it both in the list and in its rendering. It also records what the pages log to the
console, so a test sees a script or style the Content-Security-Policy refused.
"""

from __future__ import annotations

import os
import shutil
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Route,
    sync_playwright,
)

DEFAULT_CHROMIUM: Final = "/usr/bin/chromium"
#: where ReDoc's menu loads its maker's logo from (refused: ``docs/reference/ui.md``)
REDOC_LOGO_HOST: Final = "cdn.redoc.ly"


def chromium_path() -> str | None:
    """The Chromium binary to drive, or None when there is none."""
    configured = os.environ.get("CALMON_CHROMIUM")
    if configured:
        return configured
    if os.path.exists(DEFAULT_CHROMIUM):
        return DEFAULT_CHROMIUM
    return shutil.which("chromium")


@contextmanager
def chromium(path: str) -> Iterator[Browser]:
    """Headless Chromium at ``path`` (no sandbox: CI runs as root)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Offline:
    """A browser context that reaches ``base``'s host and port only, recording every URL."""

    browser: Browser
    base: str
    requested: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def _route(self, route: Route) -> None:
        url = route.request.url
        self.requested.append(url)
        if urlsplit(url).netloc == urlsplit(self.base).netloc or url.startswith("data:"):
            route.continue_()
        else:
            route.abort("internetdisconnected")

    @contextmanager
    def context(self, **options: object) -> Iterator[BrowserContext]:
        """A fresh context (own cookies) whose requests go through the recorder."""
        context = self.browser.new_context(viewport={"width": 1280, "height": 900}, **options)  # type: ignore[arg-type]
        context.route("**/*", self._route)
        context.on("console", self._log)
        try:
            yield context
        finally:
            context.close()

    def _log(self, message: ConsoleMessage) -> None:
        self.console.append(f"{message.type}: {message.text}")

    def refused_by_policy(self) -> list[str]:
        """Every console message about something the Content-Security-Policy refused, but
        ReDoc's side-menu logo from its maker's host, which the policy keeps out on purpose."""
        return [
            text
            for text in self.console
            if "Content Security Policy" in text and REDOC_LOGO_HOST not in text
        ]

    def elsewhere(self) -> list[str]:
        """Every recorded request to another host."""
        here = urlsplit(self.base).netloc
        return [
            u for u in self.requested if not u.startswith("data:") and urlsplit(u).netloc != here
        ]


def load_seconds(page: Page, url: str, *, runs: int = 5) -> tuple[float, list[float]]:
    """The median time from navigation start to the end of the load event of ``url`` over
    ``runs`` loads (each a fresh navigation), and every time, in seconds."""
    times = []
    for _ in range(runs):
        page.goto(url, wait_until="load")
        elapsed = page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0];"
            " return n.loadEventEnd - n.startTime; }"
        )
        times.append(float(elapsed) / 1000.0)
    return statistics.median(times), times
