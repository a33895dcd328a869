"""PostgreSQL taken away from a running `calmon api --workers 2` (through a TCP proxy): ingestion
answers 503 with the error body quickly, `/readyz` answers 503, and both recover by themselves
when the database returns, without a restart.

The in-process tests of the same outages (tests/integration/api/test_health.py) also cover a
frozen server; these check the real command, both workers, and what is stored.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from harness.processes import wait_for
from tests.e2e.faults.helpers import JSON, MODEL, ApiFactory, batch_body, stored
from tests.integration.tcp_proxy import Mode, TcpProxy

pytestmark = pytest.mark.slow

#: seconds within which a request that needs the database must fail: a refused connection is
#: immediate; the first request of a worker to meet an unanswered one waits for libpq's connect
#: timeout (CALMON_DB_CONNECT_TIMEOUT=1, which libpq raises to its minimum of 2 s)
BOUNDS: dict[Mode, float] = {"refuse": 1.0, "blackhole": 2.5}
#: once a worker has found the database down, its requests fail without waiting on the network
FAST = 0.5
#: requests of each kind during the outage, each on a new connection, so both workers answer
ATTEMPTS = 3
WORKERS = 2


def timed(call: Any) -> tuple[float, httpx.Response]:
    started = time.monotonic()
    response = call()
    return time.monotonic() - started, response


@pytest.mark.parametrize("outage", ["refuse", "blackhole"])
def test_database_down_is_a_fast_503_and_recovers(
    database_url: str, api_factory: ApiFactory, outage: Mode
) -> None:
    parts = urlsplit(database_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    proxied = f"postgresql+psycopg://{parts.username}@127.0.0.1:{proxy.port}{parts.path}"
    api = api_factory(proxied)
    try:
        api.start()
        api.create_model()
        url = f"{api.base}/v1/models/{MODEL}/predictions"
        first, first_scores = batch_body(0, 100)
        second, second_scores = batch_body(1, 100)
        assert httpx.post(url, content=first, headers=JSON, timeout=10).status_code == 200

        proxy.set_mode(outage)
        elapsed_all: list[float] = []
        for _ in range(ATTEMPTS):
            elapsed, response = timed(
                lambda: httpx.post(url, content=second, headers=JSON, timeout=30)
            )
            elapsed_all.append(elapsed)
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "1"
            error = response.json()["error"]
            assert error["code"] == "database_unavailable"
            assert error["message"]
            elapsed, response = timed(lambda: httpx.get(f"{api.base}/readyz", timeout=30))
            elapsed_all.append(elapsed)
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == "not_ready"
        assert max(elapsed_all) < BOUNDS[outage], elapsed_all
        assert sum(elapsed > FAST for elapsed in elapsed_all) <= WORKERS, elapsed_all
        assert httpx.get(f"{api.base}/healthz", timeout=5).status_code == 200

        proxy.set_mode("up")
        api.wait_ready(10)
        in_a_row = [0]

        def every_worker_ready() -> bool:
            ready = httpx.get(f"{api.base}/readyz", timeout=10).status_code == 200
            in_a_row[0] = in_a_row[0] + 1 if ready else 0
            return in_a_row[0] >= 2 * ATTEMPTS

        wait_for("every worker to recover", every_worker_ready, timeout=10, interval=0.05)
        response = httpx.post(url, content=second, headers=JSON, timeout=10)
        assert response.status_code == 200, response.text
        assert response.json()["new"] == 100
    finally:
        proxy.close()
    count, scores = stored(database_url)
    assert count == 200
    assert scores == first_scores | second_scores
