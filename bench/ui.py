"""Load time of a model page of 500 windows in headless Chromium (a script, not a test).

    PYTHONPATH=. .venv/bin/python bench/ui.py [--windows 500] [--runs 7]

Starts `calmon serve` on a scratch SQLite database, feeds it a `calmon simulate` stream (three
phases of 3 windows) whose windows its scheduler computes, stores those records again as
``--windows`` earlier windows of another model (what the window service reads is the same; it
is only quicker than computing them), then loads that model's page ``--runs`` times in
Chromium (Debian's ``chromium`` or ``CALMON_CHROMIUM``) and prints, per load, the time from
navigation start to the end of the load event, the server's share (request start to response
end) and the browser's (response end to load end), the page's size and element count, and
the median's ratio to the 1 s budget.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

from bench.harness.browser import Offline, chromium, chromium_path, load_seconds
from bench.harness.processes import wait_until_up
from bench.harness.stack import SERVE, LocalStack
from bench.harness.web_view import MODEL, simulate, store_copies

TARGET = "bench"
#: the load time of a page of 500 windows the ratio is printed against (docs/ui.md, "Speed")
BUDGET_SECONDS = 1.0
SERVER_PART = (
    "() => { const n = performance.getEntriesByType('navigation')[0];"
    " return n.responseEnd - n.requestStart; }"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    path = chromium_path()
    if path is None:
        print("no Chromium: install the `chromium` package or set CALMON_CHROMIUM")
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        database_url = f"sqlite:///{directory / 'calmon.db'}"
        stack = LocalStack.create(directory, database_url=database_url, scheduler_interval="1")
        with stack.start(SERVE) as serve:
            wait_until_up(stack.base, serve)
            simulate(
                stack.base, model=MODEL, truth=directory / "truth.json", env=stack.environment()
            )
            created = httpx.put(f"{stack.base}/v1/models/{TARGET}", json={"window": "5m"})
            created.raise_for_status()
            store_copies(database_url, source=MODEL, target=TARGET, count=args.windows)
            url = f"{stack.base}/ui/models/{TARGET}"
            with chromium(path) as browser:
                recorder = Offline(browser, stack.base)
                with recorder.context() as context:
                    page = context.new_page()
                    page.goto(url, wait_until="load")  # warm-up: imports, caches
                    times, servers = [], []
                    for _ in range(args.runs):
                        _, (elapsed,) = load_seconds(page, url, runs=1)
                        times.append(elapsed)
                        servers.append(page.evaluate(SERVER_PART) / 1000.0)
                    median = statistics.median(times)
                    size, elements = page.evaluate(
                        "() => [performance.getEntriesByType('navigation')[0].transferSize,"
                        " document.getElementsByTagName('*').length]"
                    )
                    rows = page.locator("#verdicts tbody tr").count()
                elsewhere = recorder.elsewhere()
    print(f"model page of {rows} windows, {args.runs} loads in Chromium")
    print("load (navigation start to load end), s: " + ", ".join(f"{t:.3f}" for t in times))
    print(f"median {median:.3f} s, fastest {min(times):.3f} s")
    print(
        "of which the server (request start to response end), s: "
        + ", ".join(f"{t:.3f}" for t in servers)
    )
    drawing = [t - server for t, server in zip(times, servers, strict=True)]
    print(f"browser part (response end to load end): median {statistics.median(drawing):.3f} s")
    print(f"page: {size / 1024:.0f} KiB transferred, {elements} elements")
    print(f"requests to another host: {len(elsewhere)}")
    print(f"ratio to the {BUDGET_SECONDS:.0f} s budget: {median / BUDGET_SECONDS:.2f}")
    return 0 if rows == args.windows and not elsewhere else 1


if __name__ == "__main__":
    sys.exit(main())
