"""calmon under a steady load through PgBouncer at the documented pool size (two server
connections, transaction mode): `calmon api --workers 2`, two schedulers, three senders and
two readers for ``CALMON_POOL_LOAD_SECONDS`` (60 s by default; the figures of
docs/reference/deployment.md are from 150 s). A wait in the pooler's queue is not an outage: no
request gets a 5xx, no scheduler loses or gives up the leader's lease, and every acknowledged
prediction is stored."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from calmon.db.session import PING_TIMEOUT
from tests.e2e.faults.helpers import ApiProcess
from tests.e2e.ha.cluster import Bouncer, start_bouncer
from tests.e2e.ha.workload import Scheduler, start_scheduler
from tests.integration.scheduler.helpers import make_batch
from tests.support.databases import throwaway_database, upgraded

pytestmark = pytest.mark.slow

SENDERS = 3
READERS = 2
BATCH = 500
POOLER = {"CALMON_DB_TRANSACTION_POOLER": "1"}


@pytest.fixture
def pooled(postgres_admin_url: str) -> Iterator[tuple[str, Bouncer]]:
    """An upgraded empty database and a PgBouncer with two server connections in front."""
    with throwaway_database(postgres_admin_url) as name:
        base, _, _ = postgres_admin_url.rpartition("/")
        upgraded(f"{base}/{name}".replace("postgresql://", "postgresql+psycopg://", 1))
        port = urlsplit(postgres_admin_url).port or 5432
        bouncer = start_bouncer(target_port=port, databases=[name], pool_size=2)
        try:
            yield f"{base}/{name}", bouncer
        finally:
            bouncer.stop()


class Tally:
    """What every thread saw: statuses (or exception names) and acknowledged predictions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.acknowledged = 0

    def saw(self, outcome: str, accepted: int = 0) -> None:
        with self.lock:
            self.outcomes[outcome] += 1
            self.acknowledged += accepted


def _send(base: str, model: str, until: float, tally: Tally, seed: int) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    with httpx.Client(base_url=base, timeout=60) as client:
        round_ = 0
        while time.monotonic() < until:
            batch = make_batch(
                prefix=f"{model}-{round_}",
                start=start + timedelta(seconds=37 * round_),
                count=BATCH,
                spacing=timedelta(seconds=1),
                seed=seed * 10_000 + round_,
            )
            try:
                answer = client.post(
                    f"/v1/models/{model}/predictions", json={"predictions": batch.items}
                )
            except httpx.HTTPError as exc:
                tally.saw(type(exc).__name__)
            else:
                accepted = BATCH if answer.status_code == 200 else 0
                tally.saw(str(answer.status_code), accepted)
            round_ += 1


def _read(base: str, until: float, tally: Tally) -> None:
    paths = ["/readyz", "/v1/models", "/metrics"]
    paths += [f"/v1/models/load-{i}/windows?limit=50" for i in range(SENDERS)]
    with httpx.Client(base_url=base, timeout=60) as client:
        turn = 0
        while time.monotonic() < until:
            try:
                tally.saw(str(client.get(paths[turn % len(paths)]).status_code))
            except httpx.HTTPError as exc:
                tally.saw(type(exc).__name__)
            turn += 1


def _count(conn: psycopg.Connection[tuple[Any, ...]], query: str) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def _lease_troubles(schedulers: list[Scheduler]) -> list[str]:
    return [
        line
        for scheduler in schedulers
        for line in scheduler.log.read_text().splitlines()
        if "leader lease" in line and ("unreachable" in line or "taken over" in line)
    ]


def test_a_steady_load_through_two_pooled_connections_gets_no_5xx_and_keeps_the_lease(
    pooled: tuple[str, Bouncer], tmp_path: Path
) -> None:
    direct, bouncer = pooled
    through = bouncer.url(direct.rpartition("/")[2])
    seconds = float(os.environ.get("CALMON_POOL_LOAD_SECONDS", "60"))
    api = ApiProcess(through, tmp_path / "api.log", workers=2, settings=POOLER)
    schedulers: list[Scheduler] = []
    tally = Tally()
    try:
        api.start()
        for i in range(SENDERS):
            answer = httpx.put(
                f"{api.base}/v1/models/load-{i}", json={"window": "5m", "grace": "0s"}, timeout=30
            )
            assert answer.status_code == 201, answer.text
        schedulers = [
            start_scheduler(through, tmp_path / f"scheduler-{i}.log", extra=POOLER)
            for i in range(2)
        ]
        until = time.monotonic() + seconds
        threads = [
            threading.Thread(target=_send, args=(api.base, f"load-{i}", until, tally, i))
            for i in range(SENDERS)
        ] + [threading.Thread(target=_read, args=(api.base, until, tally)) for _ in range(READERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        api.stop()
        for scheduler in schedulers:
            scheduler.stop()
    with psycopg.connect(direct) as conn:
        stored = _count(conn, "SELECT count(*) FROM predictions")
        computed = _count(conn, "SELECT count(*) FROM window_results")
    failures = {k: v for k, v in tally.outcomes.items() if not k.startswith("2")}
    print(
        f"pool of 2 for {seconds:.0f} s (ping deadline {PING_TIMEOUT} s): "
        f"{sum(tally.outcomes.values())} requests {dict(tally.outcomes)}, "
        f"{tally.acknowledged} predictions acknowledged, {stored} stored, {computed} windows"
    )
    assert failures == {}
    assert stored == tally.acknowledged
    assert tally.acknowledged >= SENDERS * BATCH
    assert computed > 0
    assert _lease_troubles(schedulers) == []
