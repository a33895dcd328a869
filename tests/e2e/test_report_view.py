"""`calmon evaluate --html` on a file a data scientist would have (semicolons, its own column
names), its report opened in a real headless Chromium: the web view's charts, measured as in
``test_web_view``, the verdict of each window, and nothing loaded from anywhere.

The file holds three hours of a simulated stream: a stable hour (the reference) and two
hours of likelihood drift, which the report must call "model got worse". A screenshot of
the report is kept in the test's temporary directory.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from calmon.simulation.stream import PHASES, generate_window, plan_windows
from harness.browser import Offline, chromium
from harness.processes import calmon_command
from tests.e2e.browser import require_chromium

pytestmark = pytest.mark.slow

CHARTS = ("ap", "split", "ratio", "metric")


def _write_stream(path: Path) -> list[str]:
    """The stream as ``ts;proba;y;customer`` lines; returns the windows' starts."""
    plans = plan_windows(
        phases=[PHASES["stable"], PHASES["likelihood"], PHASES["likelihood"]],
        window="1h",
        windows_per_phase=1,
        per_window=20_000,
        now=datetime(2026, 11, 2, 3, tzinfo=UTC),
    )
    lines = ["ts;proba;y;customer"]
    for plan in plans:
        data = generate_window(plan, seed=9)
        stamps = np.datetime_as_string(data.timestamps.astype("datetime64[us]"), unit="us")
        lines += [
            f"{t}Z;{s!r};{y};c{i}"
            for i, (t, s, y) in enumerate(
                zip(stamps.tolist(), data.scores.tolist(), data.labels.tolist(), strict=True)
            )
        ]
    path.write_text("\n".join(lines) + "\n")
    return [f"{p.start:%Y-%m-%dT%H:%M:%S}Z" for p in plans]


def test_the_html_report_renders_like_the_web_view(tmp_path: Path) -> None:
    data = tmp_path / "scores.csv"
    starts = _write_stream(data)
    assert starts[0] == "2026-11-02T00:00:00Z"
    report = tmp_path / "report.html"
    done = subprocess.run(
        [
            *calmon_command(),
            "evaluate",
            str(data),
            "--window",
            "1h",
            "--score-column",
            "proba",
            "--label-column",
            "y",
            "--timestamp-column",
            "ts",
            "--html",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"report written to {report.resolve()}\n"
    assert done.stdout.count("window 2026-11-02T0") == 3  # the table, as without --html
    with chromium(require_chromium()) as browser:
        recorder = Offline(browser, report.as_uri())
        with recorder.context() as context:
            page = context.new_page()
            page.goto(report.as_uri())
            assert page.locator("h1").inner_text() == str(data)
            for chart in CHARTS:
                svg = page.locator(f"svg#{chart}")
                box = svg.bounding_box()
                assert box is not None
                # the charts take the page's width (1180 px less its margins)
                assert box["width"] > 1000, (chart, box)
                assert box["height"] > 200
                sizes = svg.evaluate(
                    "s => [...s.querySelectorAll(':scope > path.line, :scope > path.band,"
                    " :scope > path.mark')].map(p => { const b = p.getBBox();"
                    " return [p.getAttribute('class'), b.width, b.height]; })"
                )
                assert any(c.startswith("line") and w > 300 and h >= 0 for c, w, h in sizes)
                # AP has no interval at the stream's prior of 0.05 (it covers only from 0.1,
                # docs/reference/intervals.md): its chart draws no band; every other chart does
                banded = any(c.startswith("band") and w > 300 and h > 0 for c, w, h in sizes)
                assert banded == (chart != "ap"), (chart, sizes)
                assert any(c.startswith("mark") and w > 0 for c, w, h in sizes), sizes
                legend = svg.locator("g.legend").bounding_box()
                assert legend is not None
                assert legend["width"] > 100
            counts = page.locator("svg#reliability text.count").all_text_contents()
            assert sum(map(int, counts)) == 20_000
            rows = page.locator("#verdicts tbody tr")
            table = {
                row.locator("time").get_attribute("datetime"): row.locator(
                    "td.verdict span"
                ).first.inner_text()
                for row in rows.all()
            }
            assert table == {starts[1]: "model got worse", starts[2]: "model got worse"}
            page.screenshot(path=tmp_path / "report.png", full_page=True)
        assert recorder.requested == [report.as_uri()]
        assert recorder.elsewhere() == []
