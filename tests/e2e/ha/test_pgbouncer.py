"""calmon behind PgBouncer in transaction mode (``CALMON_DB_TRANSACTION_POOLER=1``): ingestion,
labels, two schedulers (the leader's lease, window claims) and the exporter's ``/metrics``
through a pool of two server connections per database give the same windows and series as a
direct connection, and leave no state on the server sessions for the next client (timeouts,
prepared statements, advisory locks)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient

from calmon.api.app import create_app
from calmon.db.session import PING_TIMEOUT, outage_gate
from calmon.settings import Settings
from harness.processes import wait_for
from tests.e2e.faults.helpers import ApiProcess
from tests.e2e.ha.cluster import Bouncer, start_bouncer
from tests.e2e.ha.workload import FIVE_MINUTES, Scheduler, start_scheduler, unsettled
from tests.integration.scheduler.helpers import floor, make_batch
from tests.support.databases import throwaway_database, upgraded

pytestmark = pytest.mark.slow

MODELS = ("pool-a", "pool-b")
POOLER: Final = {"CALMON_DB_TRANSACTION_POOLER": "1"}
START = re.compile(
    r'^calmon_window_start_timestamp_seconds\{[^}]*model="([^"]+)"[^}]*\} (\S+)$', re.MULTILINE
)
#: what differs between two computations of the same window: when and by whom
VOLATILE = frozenset({"computed_at", "computed_by"})


@pytest.fixture
def databases(postgres_admin_url: str) -> Iterator[tuple[str, str]]:
    """Two empty databases on the test server (direct, pooled), dropped afterwards."""
    with (
        throwaway_database(postgres_admin_url) as direct,
        throwaway_database(postgres_admin_url) as pooled,
    ):
        yield direct, pooled


@pytest.fixture
def bouncer(postgres_admin_url: str, databases: tuple[str, str]) -> Iterator[Bouncer]:
    """PgBouncer (transaction mode, two server connections) in front of the pooled one."""
    port = urlsplit(postgres_admin_url).port or 5432
    pgbouncer = start_bouncer(target_port=port, databases=[databases[1]], pool_size=2)
    try:
        yield pgbouncer
    finally:
        pgbouncer.stop()


def _load(base: str, first_window: datetime) -> None:
    """Two models, three windows of predictions each; a third of the labels sent later."""
    for index, name in enumerate(MODELS):
        answer = httpx.put(
            f"{base}/v1/models/{name}", json={"window": "5m", "grace": "0s"}, timeout=30
        )
        assert answer.status_code == 201, answer.text
        batch = make_batch(
            prefix=name, start=first_window, count=900, spacing=timedelta(seconds=1), seed=index
        )
        late = []
        for i, item in enumerate(batch.items):
            if i % 3 == 0:
                late.append({"id": item["id"], "label": item.pop("label")})
        for start in range(0, len(batch.items), 300):
            part = batch.items[start : start + 300]
            answer = httpx.post(
                f"{base}/v1/models/{name}/predictions", json={"predictions": part}, timeout=30
            )
            assert answer.status_code == 200, answer.text
        answer = httpx.post(f"{base}/v1/models/{name}/labels", json={"labels": late}, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["updated"] == len(late)


def _windows(base: str) -> dict[str, list[dict[str, Any]]]:
    """Every window record of each model, without when and by whom it was computed."""
    found = {}
    for name in MODELS:
        answer = httpx.get(f"{base}/v1/models/{name}/windows", timeout=30)
        assert answer.status_code == 200, answer.text
        found[name] = [
            {key: value for key, value in record.items() if key not in VOLATILE}
            for record in answer.json()["windows"]
        ]
    return found


def _series(base: str, last_window: datetime) -> list[str]:
    """The window series of the test's models on ``/metrics`` (values included), once the
    exporter shows ``last_window`` as every model's latest (else an empty list)."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    latest = {
        match[1]: float(match[2]) for match in START.finditer(text) if 'segment="*"' in match[0]
    }
    if any(latest.get(name) != last_window.timestamp() for name in MODELS):
        return []
    return sorted(
        line
        for line in text.splitlines()
        if re.search(r'model="pool-', line) and not re.search(r"_(timestamp|age)\w*\{", line)
    )


def _run(
    database_url: str,
    libpq_url: str,
    directory: Path,
    settings: Mapping[str, str],
    *,
    first_window: datetime,
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """`calmon api --workers 2` and two schedulers on ``database_url``; the windows and series
    once every window is computed."""
    directory.mkdir()
    api = ApiProcess(
        database_url,
        directory / "api.log",
        settings={"CALMON_SCHEDULER_INTERVAL": "1", **settings},
    )
    schedulers: list[Scheduler] = []
    try:
        api.start()
        _load(api.base, first_window)
        schedulers = [
            start_scheduler(database_url, directory / f"scheduler-{i}.log", extra=settings)
            for i in range(2)
        ]
        wait_for("every window computed", lambda: unsettled(libpq_url) == (0, 0, 0), timeout=120)
        windows = _windows(api.base)
        last_window = first_window + 2 * FIVE_MINUTES
        series = wait_for(
            "the exporter's refresh", lambda: _series(api.base, last_window), timeout=30
        )
        return windows, series
    finally:
        api.stop()
        for scheduler in schedulers:
            scheduler.stop()


def test_transaction_pooling_gives_the_results_of_a_direct_connection(
    postgres_admin_url: str, databases: tuple[str, str], bouncer: Bouncer, tmp_path: Path
) -> None:
    base, _, _ = postgres_admin_url.rpartition("/")
    direct, pooled = (f"{base}/{name}" for name in databases)
    for url in (direct, pooled):
        upgraded(url.replace("postgresql://", "postgresql+psycopg://", 1))
    # the same event times in both runs, whatever the clock says meanwhile
    first_window = floor(datetime.now(UTC), FIVE_MINUTES) - 4 * FIVE_MINUTES
    expected = _run(
        direct.replace("postgresql://", "postgresql+psycopg://", 1),
        direct,
        tmp_path / "direct",
        {},
        first_window=first_window,
    )
    through = bouncer.url(databases[1])
    found = _run(through, pooled, tmp_path / "pooled", POOLER, first_window=first_window)

    assert found[0] == expected[0]
    assert found[1] == expected[1]
    assert sum(len(records) for records in found[0].values()) == 2 * 3
    # Nothing left on the server sessions for the next client of the pool.
    libpq_through = through.replace("postgresql+psycopg://", "postgresql://", 1)
    for _ in range(4):
        with psycopg.connect(libpq_through, autocommit=True) as conn:
            state = conn.execute(
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),"
                " (SELECT count(*) FROM pg_prepared_statements)"
            ).fetchone()
        assert state == ("0", "0", 0)
    with psycopg.connect(pooled) as conn:
        advisory = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
            " WHERE l.locktype = 'advisory' AND d.datname = current_database()"
        ).fetchone()
        leader = conn.execute("SELECT count(*) FROM scheduler_leader").fetchone()
    assert advisory == (0,)
    # The leader's lease was taken through PgBouncer and given back on shutdown.
    assert leader == (0,)


@pytest.fixture
def single_connection_bouncer(
    postgres_admin_url: str, databases: tuple[str, str]
) -> Iterator[Bouncer]:
    """PgBouncer with one server connection in front of the pooled database."""
    port = urlsplit(postgres_admin_url).port or 5432
    pgbouncer = start_bouncer(target_port=port, databases=[databases[1]], pool_size=1)
    try:
        yield pgbouncer
    finally:
        pgbouncer.stop()


def test_a_wait_in_the_poolers_queue_is_not_an_outage(
    postgres_admin_url: str, databases: tuple[str, str], single_connection_bouncer: Bouncer
) -> None:
    """Every server connection of the pool busy for longer than a direct ping's deadline: the
    API's requests wait in PgBouncer's queue and are answered, not declared an outage (503),
    and the database is not marked down."""
    base, _, _ = postgres_admin_url.rpartition("/")
    upgraded(f"{base}/{databases[1]}".replace("postgresql://", "postgresql+psycopg://", 1))
    through = single_connection_bouncer.url(databases[1])
    settings = Settings(database_url=through, db_transaction_pooler=True, retention_days=0)
    libpq_through = through.replace("postgresql+psycopg://", "postgresql://", 1)
    with TestClient(create_app(settings, lifespan_hooks=[])) as client:
        assert client.put("/v1/models/queued", json={}).status_code == 201
        engine = client.app.state.engine  # type: ignore[attr-defined]
        gate = outage_gate(engine)
        assert gate is not None
        busy = threading.Thread(target=_hold_the_server, args=(libpq_through, 3 * PING_TIMEOUT))
        busy.start()
        time.sleep(PING_TIMEOUT / 2)  # the holder has the only server connection by now
        engine.dispose()  # each request now pings a fresh pooled connection
        statuses = [client.get(path).status_code for path in ("/readyz", "/v1/models/queued")]
        busy.join()
        assert (statuses, gate.outages) == ([200, 200], 0)


def _hold_the_server(url: str, seconds: float) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_sleep(%s)", (seconds,))
