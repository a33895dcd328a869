"""The end of a test run: what could not run is an alarm in the full run and one plain line in
the fast loop (``scripts/test --fast`` sets ``CALMON_TEST_FAST=1``), which leaves those tests
out on purpose."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.support.skips import NOT_RUN, write_summary

TITLE = "Example tests"


class Terminal:
    """What the summary writes: separator lines and plain lines, in order."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def write_sep(self, sep: str, title: str, **markup: Any) -> None:
        self.lines.append(("sep", f"{sep} {title}"))

    def write_line(self, line: str, **markup: Any) -> None:
        self.lines.append(("line", line))


def _summary(monkeypatch: pytest.MonkeyPatch, fast: str | None) -> list[tuple[str, str]]:
    for title in list(NOT_RUN):
        monkeypatch.setitem(NOT_RUN, title, [])
    monkeypatch.setitem(NOT_RUN, TITLE, ["no server", "no server"])
    if fast is None:
        monkeypatch.delenv("CALMON_TEST_FAST", raising=False)
    else:
        monkeypatch.setenv("CALMON_TEST_FAST", fast)
    terminal = Terminal()
    write_summary(cast(pytest.TerminalReporter, terminal))
    return [line for line in terminal.lines if "Example" in line[1] or "server" in line[1]]


def test_the_full_run_says_loudly_what_did_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _summary(monkeypatch, None) == [
        ("sep", f"! {TITLE} DID NOT RUN"),
        ("line", "no server"),
    ]


def test_the_fast_loop_notes_it_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _summary(monkeypatch, "1") == [
        ("line", f"{TITLE}: not run in the fast loop (./scripts/test runs them)")
    ]
