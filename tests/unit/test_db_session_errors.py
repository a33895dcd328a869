"""Errors in the database layer's background work are logged, never swallowed: a watchdog
callback that raises (by the alarm's name)."""

from __future__ import annotations

import logging
import threading

import pytest

from app.db.session import Watchdog


def test_a_failing_watchdog_callback_is_logged_with_its_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watchdog = Watchdog()
    done = threading.Event()

    def broken() -> None:
        raise RuntimeError("cut failed")

    with caplog.at_level(logging.DEBUG, logger="app.db.session"):
        watchdog.arm(0.05, broken, name="session deadline")
        watchdog.arm(0.1, broken)
        watchdog.arm(0.15, done.set)
        assert done.wait(5)  # the thread went on after the failures
    failed = [r for r in caplog.records if r.getMessage() == "watchdog callback failed"]
    assert [r.__dict__["job"] for r in failed] == [
        "session deadline",
        "test_a_failing_watchdog_callback_is_logged_with_its_name.<locals>.broken",
    ]
    assert all(r.levelno == logging.ERROR for r in failed)
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in failed)
