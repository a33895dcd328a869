"""A read replica (``CALMON_DATABASE_READ_URL``): `calmon api --workers 2` writes to the
primary and answers the read-only endpoints from a streaming standby, shows the standby's lag
on ``/metrics``, and reads from the primary while the standby is down (the request that finds
it down answers 503 with ``Retry-After``), then from the standby again once it is back."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.processes import wait_for
from tests.e2e.faults.helpers import ApiProcess
from tests.e2e.ha.cluster import DATABASE, Pair, Server, start_pair
from tests.support.databases import upgraded

pytestmark = pytest.mark.slow

LAG = re.compile(r"^calmon_database_replica_lag_seconds ([0-9.e+-]+)$", re.MULTILINE)


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A primary and an asynchronous standby, stopped after the test."""
    servers = start_pair(synchronous=False)
    try:
        yield servers
    finally:
        servers.stop()


def _url(server: Server) -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/{DATABASE}"


def _calmon_sessions(server: Server) -> int:
    """Connections of calmon (application ``calmon``) to ``server``."""
    rows = server.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'calmon'")
    return int(str(rows[0][0]))


def _read(base: str) -> int:
    return httpx.get(f"{base}/v1/models/replicated", timeout=10).status_code


def test_reads_come_from_the_replica_and_fall_back_to_the_primary(
    pair: Pair, tmp_path: Path
) -> None:
    upgraded(_url(pair.primary))
    api = ApiProcess(
        _url(pair.primary),
        tmp_path / "api.log",
        settings={
            "CALMON_DATABASE_READ_URL": _url(pair.standby),
            "CALMON_SCHEDULER_INTERVAL": "0.5",
        },
    )
    try:
        api.start()
        answer = httpx.put(f"{api.base}/v1/models/replicated", json={}, timeout=10)
        assert answer.status_code == 201, answer.text
        wait_for("the model read from the replica", lambda: _read(api.base) == 200, timeout=10)
        assert _calmon_sessions(pair.standby) > 0
        lag = wait_for(
            "the lag series", lambda: LAG.search(httpx.get(f"{api.base}/metrics").text), timeout=10
        )
        assert lag is not None
        assert 0.0 <= float(lag[1]) < 60.0

        pair.standby.stop()
        statuses = [_read(api.base) for _ in range(12)]
        # Each of the two workers' first read may find the replica down (503), whenever the
        # worker gets its first request; every other read is answered by the primary.
        assert statuses.count(503) <= 2, statuses
        assert statuses.count(200) == len(statuses) - statuses.count(503), statuses
        wait_for(
            "the lag series gone",
            lambda: not LAG.search(httpx.get(f"{api.base}/metrics").text),
            timeout=10,
        )

        pair.standby.start()
        wait_for(
            "reads back on the replica",
            lambda: _read(api.base) == 200 and _calmon_sessions(pair.standby) > 0,
            timeout=20,
        )
    finally:
        api.stop()
