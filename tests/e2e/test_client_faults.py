"""calmon_client through faults: 10^6 predictions sent by one :class:`calmon_client.Monitor`
to `calmon api --workers 2` on a PostgreSQL server of the test's own, while the API is
restarted twice (killed with SIGKILL once, stopped with SIGTERM once) and the database is
stopped for 10 s. Every prediction must be stored exactly once (checked on the database), with
its score, the client must count nothing lost, rejected or dropped, and no call of ``log``
raises."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from calmon_client import Incident, Monitor

from harness.processes import wait_for
from tests.e2e.faults.helpers import TIMESTAMP, ApiProcess
from tests.e2e.faults.postgres_server import PostgresServer
from tests.support.databases import upgraded

pytestmark = pytest.mark.slow

MODEL = "faults"
PREDICTIONS = 1_000_000
OUTAGE_SECONDS = 10.0
#: the faults, each once the server has acknowledged this many predictions
KILL_AT, DATABASE_DOWN_AT, STOP_AT = 200_000, 450_000, 700_000


def score(i: int) -> float:
    return ((i * 7919) % 10_007) / 10_007


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="calmon-client-faults-")))
    try:
        server.start()
        yield server
    finally:
        server.destroy()


def test_a_million_predictions_through_restarts_and_a_database_outage(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    database_url = upgraded(postgres.admin_url.replace("postgresql://", "postgresql+psycopg://"))
    api = ApiProcess(database_url, tmp_path / "api.log", workers=2)
    api.start()
    try:
        api.create_model()
        incidents: list[Incident] = []
        monitor = Monitor(
            api.base,
            MODEL,
            batch_size=1000,
            max_queue=200_000,
            when_full="block",
            max_retry_delay=1.0,
            close_timeout=120,
            on_error=incidents.append,
        )
        failures: list[BaseException] = []
        accepted = [0]

        def produce() -> None:
            try:
                for i in range(PREDICTIONS):
                    accepted[0] += monitor.log(f"c{i:07d}", score(i), TIMESTAMP, i % 2)
            except BaseException as exc:
                failures.append(exc)

        started = time.monotonic()
        producer = threading.Thread(target=produce)
        producer.start()

        def acknowledged(count: int) -> Callable[[], bool]:
            return lambda: monitor.stats().predictions_sent >= count

        wait_for("the first faults' mark", acknowledged(KILL_AT), timeout=300, interval=0.05)
        api.kill()
        api.start()
        killed_at = monitor.stats().predictions_sent

        wait_for("the outage's mark", acknowledged(DATABASE_DOWN_AT), timeout=300, interval=0.05)
        postgres.stop()
        outage_started = time.monotonic()
        retries_before = monitor.stats().retries
        time.sleep(OUTAGE_SECONDS)  # the measured thing: the outage the client rides out
        during_outage = monitor.stats()
        postgres.start()
        outage = time.monotonic() - outage_started

        wait_for("the second restart's mark", acknowledged(STOP_AT), timeout=300, interval=0.05)
        api.stop()
        api.start()

        producer.join(timeout=600)
        assert not producer.is_alive()
        assert not failures, failures
        monitor.close()
        elapsed = time.monotonic() - started
        stats = monitor.stats()
    finally:
        api.stop()

    assert accepted[0] == PREDICTIONS
    assert (stats.lost, stats.rejected, stats.dropped, stats.invalid, stats.queued) == (
        0,
        0,
        0,
        0,
        0,
    ), stats
    assert stats.predictions_sent == stats.new + stats.duplicates == PREDICTIONS
    assert killed_at < DATABASE_DOWN_AT
    # the outage was seen: requests were refused with 503 and retried the whole time
    assert outage >= OUTAGE_SECONDS
    assert during_outage.retries > retries_before
    codes = {(i.status, i.code) for i in incidents if i.kind == "retrying"}
    assert (503, "database_unavailable") in codes, codes
    assert {i.kind for i in incidents} == {"retrying"}

    with psycopg.connect(postgres.admin_url) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT client_id), min(client_id), max(client_id),"
            " sum(score), sum(label) FROM predictions"
        ).fetchone()
    assert row is not None
    count, distinct, first, last, total, positives = row
    assert count == distinct == PREDICTIONS
    assert (first, last) == ("c0000000", f"c{PREDICTIONS - 1:07d}")
    assert total == pytest.approx(sum(score(i) for i in range(PREDICTIONS)), rel=1e-12)
    assert positives == PREDICTIONS // 2
    print(
        f"\n{PREDICTIONS:,} predictions in {elapsed:.1f} s ({PREDICTIONS / elapsed:,.0f}/s)"
        f" through a kill, a {outage:.1f} s database outage and a restart: {stats.requests}"
        f" requests, {stats.retries} retried, {stats.duplicates} duplicates"
    )
