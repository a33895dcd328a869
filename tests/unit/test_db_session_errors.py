"""Errors in the database layer's background work are logged, never swallowed: a watchdog
callback that raises (by the alarm's name), a probe attempt that fails (debug while the
database is down, an error for anything unexpected)."""

from __future__ import annotations

import logging
import threading
import weakref

import psycopg
import pytest

from calmon.db.session import OutageGate, Watchdog, _probe_once


def test_a_failing_watchdog_callback_is_logged_with_its_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watchdog = Watchdog()
    done = threading.Event()

    def broken() -> None:
        raise RuntimeError("cut failed")

    with caplog.at_level(logging.DEBUG, logger="calmon.db.session"):
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


def _attempt(opener: object) -> None:
    gate = OutageGate()
    in_flight = threading.BoundedSemaphore(1)
    in_flight.acquire()
    _probe_once(weakref.ref(gate), opener, in_flight)  # type: ignore[arg-type]
    assert in_flight.acquire(blocking=False)  # released whatever happened


def test_a_probe_attempt_that_fails_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def down() -> None:
        raise psycopg.OperationalError("connection refused")

    def broken() -> None:
        raise RuntimeError("a bug")

    with caplog.at_level(logging.DEBUG, logger="calmon.db.session"):
        _attempt(down)
        _attempt(broken)
    [expected] = [r for r in caplog.records if r.getMessage() == "database probe failed"]
    assert expected.levelno == logging.DEBUG
    assert expected.__dict__["error"] == "OperationalError"
    [unexpected] = [
        r for r in caplog.records if r.getMessage() == "database probe failed unexpectedly"
    ]
    assert unexpected.levelno == logging.ERROR
    assert unexpected.exc_info is not None
    assert unexpected.exc_info[0] is RuntimeError
