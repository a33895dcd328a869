"""Suite-wide fixtures: the PostgreSQL server used by integration and end-to-end tests.

``CALMON_TEST_POSTGRES_URL`` names a maintenance database on a server where the tests may
create and drop databases (``scripts/test`` sets it, starting a throwaway server if needed).
When it is empty or unreachable the PostgreSQL tests are skipped and the run ends with a loud
warning, unless ``CALMON_REQUIRE_POSTGRES=1`` (CI), which turns that into a failure.

Also the directory of the session's one migrated SQLite template
(:data:`~tests.support.databases.SQLITE_TEMPLATE`), shared with every pytest-xdist worker; the
end of the run for every kind of test that could not run (``tests.support.skips.NOT_RUN``,
collected from each pytest-xdist worker), and the ``serial`` group of pytest-xdist: the tests
that must not overlap each other (see :data:`SERIAL`), run one after the other on one worker
under ``--dist loadgroup``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.databases import (
    SQLITE_TEMPLATE,
    TEMPLATE_DIRECTORY,
    database_url,
    throwaway_database,
)
from tests.support.skips import NOT_RUN, NOTES, not_run_reasons, write_summary

_skipped_for_postgres = not_run_reasons("PostgreSQL tests")

#: test files (or directories) whose tests must not overlap each other: each starts servers
#: or processes that keep time (lease renewals, scrape and alert intervals, failovers,
#: deadlines measured while other schedulers work) and would miss it on a machine whose two
#: cores another such test keeps busy. Under ``--dist loadgroup`` they run one after the other
#: on one worker while the other worker takes the rest of the suite.
SERIAL = (
    "tests/e2e/ha/",
    "tests/e2e/faults/",
    "tests/e2e/test_container.py",
    "tests/e2e/test_prometheus_alerts.py",
    "tests/e2e/test_scheduler_replicas.py",
    "tests/e2e/test_concurrency_chaos.py",
    "tests/e2e/test_client_faults.py",
    "tests/e2e/test_slow_clients.py",
    "tests/integration/deploy/test_prometheus_live.py",
    "tests/integration/scheduler/test_leader_lease.py",
    "tests/integration/scheduler/test_replicas.py",
    "tests/integration/db/test_session_deadline.py",
    "tests/integration/db/test_partitions.py",
)


def _admin_url() -> str | None:
    url = os.environ.get(
        "CALMON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    return url or None


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """libpq URL of the maintenance database; skips (or fails in CI) when unreachable."""
    url = _admin_url()
    reason = "PostgreSQL not configured (CALMON_TEST_POSTGRES_URL is empty)"
    if url is not None:
        try:
            psycopg.connect(url, connect_timeout=3).close()
            return url
        except psycopg.OperationalError as exc:
            reason = f"PostgreSQL unreachable: {exc}".strip()
    if os.environ.get("CALMON_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason} and CALMON_REQUIRE_POSTGRES=1")
    _skipped_for_postgres.append(reason)
    pytest.skip(reason)


@pytest.fixture
def postgres_database(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; yields its libpq URL, then drops it."""
    with throwaway_database(postgres_admin_url) as name:
        yield database_url(postgres_admin_url, name)


def pytest_configure(config: pytest.Config) -> None:
    """The directory of the session's SQLite template: a new one in the pytest-xdist controller
    (or the lone process), the controller's in a worker."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        SQLITE_TEMPLATE.share(Path(workerinput[TEMPLATE_DIRECTORY]))
    else:
        SQLITE_TEMPLATE.share(Path(tempfile.mkdtemp(prefix="calmon-template-")))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Hand a starting pytest-xdist worker the directory of the session's SQLite template."""
    node.workerinput[TEMPLATE_DIRECTORY] = str(SQLITE_TEMPLATE.directory)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's SQLite template, in the process that made its directory."""
    if getattr(config, "workerinput", None) is None and SQLITE_TEMPLATE.directory is not None:
        shutil.rmtree(SQLITE_TEMPLATE.directory, ignore_errors=True)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``: the tests of :data:`SERIAL` are one work unit, the
    ``serial`` group (every other test is one of its own, as usual). A scheduler rather than
    ``xdist_group`` marks: pytest-xdist 3.8 groups by a suffix of the node id, which pytest 9
    no longer lets it set."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

    class SerialGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]  # untyped
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.partition("::")[0].startswith(SERIAL):
                return "serial"
            return str(super()._split_scope(nodeid))

    return SerialGroupScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker, hand what did not run (and the notes) to the controller."""
    output: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["calmon_not_run"] = {title: list(reasons) for title, reasons in NOT_RUN.items()}
        output["calmon_notes"] = list(NOTES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the pytest-xdist controller, gather what a worker could not run."""
    output: dict[str, Any] = getattr(node, "workeroutput", None) or {}
    for title, reasons in output.get("calmon_not_run", {}).items():
        not_run_reasons(title).extend(reasons)
    NOTES.extend(note for note in output.get("calmon_notes", []) if note not in NOTES)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say what did not run, and the notes (:func:`~tests.support.skips.write_summary`)."""
    write_summary(terminalreporter)
