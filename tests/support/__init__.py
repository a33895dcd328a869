"""Helpers shared by the tests, by what they hold: :mod:`~tests.support.databases` (throwaway
and migrated databases), :mod:`~tests.support.clients` (API clients),
:mod:`~tests.support.servers` (servers in a thread), :mod:`~tests.support.skips` (tests that
could not run). Polling and free ports are :mod:`harness.processes`, shared with the
benchmarks.

The names below stay importable from ``tests.support`` itself, as they were when it was one
module."""

from __future__ import annotations

from harness.processes import free_port, wait_for
from tests.support.databases import database_url, throwaway_database
from tests.support.servers import QuietHandler, http_server, server_started
from tests.support.skips import (
    NOT_RUN,
    NOTES,
    assert_required_or_skipped,
    not_run,
    not_run_reasons,
)

__all__ = [
    "NOTES",
    "NOT_RUN",
    "QuietHandler",
    "assert_required_or_skipped",
    "database_url",
    "free_port",
    "http_server",
    "not_run",
    "not_run_reasons",
    "server_started",
    "throwaway_database",
    "wait_for",
]
