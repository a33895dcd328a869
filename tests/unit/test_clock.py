"""The one background timer: calls never overlap, errors do not end the loop, stop() (also from
the action itself) ends it, ``first_in`` delays the first call; and the system clock."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime

from calmon.clock import SYSTEM_CLOCK, RepeatingTimer


def _until(condition: threading.Event, seconds: float = 5.0) -> None:
    assert condition.wait(seconds), "the timer did not get there in time"


def test_calls_never_overlap_and_a_long_call_is_followed_at_once() -> None:
    running = 0
    most = 0
    starts: list[float] = []
    lock = threading.Lock()
    enough = threading.Event()

    def action() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            starts.append(time.monotonic())
        time.sleep(0.05)  # five periods
        with lock:
            running -= 1
        if len(starts) >= 4:
            enough.set()

    timer = RepeatingTimer(action, 0.01, name="test-timer")
    timer.start()
    _until(enough)
    timer.stop()
    assert most == 1
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # the missed periods are not made up: each call starts about one call after the last
    assert all(gap >= 0.05 for gap in gaps)


def test_an_error_is_logged_and_the_loop_goes_on() -> None:
    calls = 0
    twice = threading.Event()

    def action() -> None:
        nonlocal calls
        calls += 1
        if calls >= 2:
            twice.set()
        raise RuntimeError("boom")

    timer = RepeatingTimer(action, 0.01, name="test-timer")
    timer.start()
    _until(twice)
    timer.stop()


def test_the_action_can_stop_its_own_timer() -> None:
    calls = 0
    stopped = threading.Event()

    def action() -> None:
        nonlocal calls
        calls += 1
        timer.stop()
        stopped.set()

    timer = RepeatingTimer(action, 0.01, name="test-timer")
    timer.start()
    _until(stopped)
    time.sleep(0.05)
    assert calls == 1


def test_first_in_delays_the_first_call_and_stop_waits_for_none() -> None:
    calls = 0

    def action() -> None:
        nonlocal calls
        calls += 1

    # an hour away: a stop() that waited for the first call would not end within _until's
    # wait, however loaded the machine (no bound on how fast it ends)
    timer = RepeatingTimer(action, 0.01, name="test-timer", first_in=3600.0)
    timer.start()
    time.sleep(0.05)
    stopped = threading.Event()

    def stop() -> None:
        timer.stop()
        stopped.set()

    threading.Thread(target=stop, daemon=True).start()
    _until(stopped)
    assert calls == 0


def test_the_system_clock_is_utc_and_monotonic() -> None:
    before = datetime.now(UTC)
    now = SYSTEM_CLOCK.now()
    assert now.tzinfo is not None
    assert now.utcoffset() == UTC.utcoffset(None)
    assert before <= now <= datetime.now(UTC)
    first = SYSTEM_CLOCK.monotonic()
    assert SYSTEM_CLOCK.monotonic() >= first
