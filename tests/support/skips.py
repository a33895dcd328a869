"""Tests that could not run: the reasons the run's end shows (gathered from every pytest-xdist
worker by the root conftest, written by :func:`write_summary`), a skip that is a failure in CI,
and the check of both."""

from __future__ import annotations

import os
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

#: what did not run in this session and why, by title ("PostgreSQL tests"): the lookups
#: append the reasons of their skips, the root conftest shows them at the end of the run
#: (gathered from every pytest-xdist worker)
NOT_RUN: dict[str, list[str]] = {}
#: further lines for the end of the run (how long the container image took)
NOTES: list[str] = []


def not_run_reasons(title: str) -> list[str]:
    """The list of reasons why the tests called ``title`` did not run, for the end of the run
    (its section reads "<title> DID NOT RUN")."""
    return NOT_RUN.setdefault(title, [])


def not_run(what: str, reason: str, *, require_env: str) -> NoReturn:
    """A test that cannot run for ``reason``: a failure under ``require_env``=1 (CI), else a
    skip with a warning that ``what`` did NOT RUN."""
    if os.environ.get(require_env) == "1":
        pytest.fail(f"{reason} and {require_env}=1")
    warnings.warn(f"{what} NOT RUN: {reason}", stacklevel=1)
    pytest.skip(f"{what} NOT RUN: {reason}")


def assert_required_or_skipped(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    module: types.ModuleType,
    find: Callable[[], object],
    *,
    require_env: str,
    missing: str,
) -> None:
    """With an empty PATH, ``find`` fails when ``require_env`` is 1 and otherwise skips (a
    skip ``module._skipped`` remembers for the run's closing warning), its message
    matching ``missing``."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(module, "_skipped", [])
    monkeypatch.setenv(require_env, "1")
    # BaseException: a skip must not pass for the failure (nor turn this test into a skip)
    with pytest.raises(BaseException, match=f"{require_env}=1") as required:
        find()
    assert required.type is pytest.fail.Exception
    assert module._skipped == []
    monkeypatch.delenv(require_env)
    with pytest.raises(BaseException, match=missing) as optional:
        find()
    assert optional.type is pytest.skip.Exception
    assert len(module._skipped) == 1


def write_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say loudly which tests did not run (PostgreSQL's, the container's, the deployment
    checks), so nobody mistakes a partial pass; then the notes. In the fast loop
    (``CALMON_TEST_FAST=1``, set by ``scripts/test --fast``) leaving them out is the point:
    one plain line each."""
    fast = os.environ.get("CALMON_TEST_FAST") == "1"
    for title, reasons in NOT_RUN.items():
        if reasons and fast:
            terminalreporter.write_line(
                f"{title}: not run in the fast loop (./scripts/test runs them)"
            )
        elif reasons:
            terminalreporter.write_sep("!", f"{title} DID NOT RUN", red=True, bold=True)
            for reason in sorted(set(reasons)):
                terminalreporter.write_line(reason, red=True)
    for note in NOTES:
        terminalreporter.write_line(note)
