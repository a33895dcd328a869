"""Probes and database outages: /healthz, /readyz, and 503 within a few seconds when
PostgreSQL goes away (refused, unreachable, or frozen), with recovery on its own when it
returns."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from calmon.api.app import create_app
from calmon.db import migrate
from calmon.settings import Settings
from harness.processes import wait_for
from tests.integration.api.helpers import create_model, error_of, post_predictions, prediction
from tests.integration.tcp_proxy import Mode, TcpProxy
from tests.support.databases import upgraded

#: an outage must be reported within this many seconds: ping deadline 1 s + connect timeout
#: 2 s, plus slack for a loaded machine
OUTAGE_BOUND = 4.5


def test_healthz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_when_migrated(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "revision": migrate.head_revision(),
    }


def test_readyz_fails_until_migrated(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'empty.db'}")
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        error = error_of(response)
        assert error["code"] == "not_ready"
        assert "calmon migrate" in error["message"]
        assert client.get("/healthz").status_code == 200
        migrate.upgrade(client.app.state.engine)  # type: ignore[attr-defined]
        assert client.get("/readyz").status_code == 200


@pytest.fixture
def proxied(postgres_database: str) -> Iterator[tuple[TestClient, TcpProxy]]:
    parts = urlsplit(postgres_database)
    upgraded(postgres_database)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    url = f"postgresql+psycopg://{parts.username}@127.0.0.1:{proxy.port}{parts.path}"
    settings = Settings(
        database_url=url, db_connect_timeout=2, db_pool_timeout=2.0, retention_days=0
    )
    try:
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            yield client, proxy
    finally:
        proxy.close()


def _timed(call: object) -> tuple[float, object]:
    started = time.monotonic()
    result = call() if callable(call) else None
    return time.monotonic() - started, result


@pytest.mark.parametrize("outage", ["refuse", "blackhole", "freeze"])
def test_database_outage_is_503_fast_and_recovers(
    proxied: tuple[TestClient, TcpProxy], outage: Mode
) -> None:
    client, proxy = proxied
    create_model(client, "fraud")
    assert post_predictions(client, [prediction("a")]).status_code == 200

    proxy.set_mode(outage)
    for call in (
        lambda: post_predictions(client, [prediction("b")]),
        lambda: client.get("/v1/models/fraud"),
        lambda: client.get("/readyz"),
    ):
        elapsed, response = _timed(call)
        assert response.status_code == 503, response.text  # type: ignore[attr-defined]
        assert response.headers["retry-after"] == "1"  # type: ignore[attr-defined]
        assert elapsed < OUTAGE_BOUND
    error = error_of(response)
    assert error["code"] in {"database_unavailable", "not_ready"}
    assert client.get("/healthz").status_code == 200

    proxy.set_mode("up")
    wait_for(
        "readyz to recover",
        lambda: client.get("/readyz").status_code == 200,
        timeout=10,
        interval=0.2,
    )
    response = post_predictions(client, [prediction("b")])
    assert response.status_code == 200
    assert response.json()["new"] == 1


def test_exhausted_pool_is_503_busy(shared_postgres_url: str) -> None:
    settings = Settings(database_url=shared_postgres_url, db_pool_size=1, db_pool_timeout=0.5)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        engine = client.app.state.engine  # type: ignore[attr-defined]
        held = [engine.connect(), engine.connect()]
        try:
            started = time.monotonic()
            response = client.get("/v1/models")
            assert time.monotonic() - started < 2.0
            assert response.status_code == 503
            assert response.headers["retry-after"] == "1"
            assert error_of(response)["code"] == "database_busy"
        finally:
            for connection in held:
                connection.close()
        assert client.get("/v1/models").status_code == 200
