"""calmon_client.ensure_model, its asyncio twin and the monitors' ``config`` against a real
calmon API: a missing model is created, an existing one is left as it is (a different
configuration is reported, not overwritten), refusals raise a clear error; and what a monitor
does with the rows of a model that does not exist."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from calmon_client import (
    AsyncMonitor,
    Incident,
    ModelConfigMismatchError,
    ModelError,
    Monitor,
    ensure_model,
    ensure_model_async,
)

from tests.integration.client.servers import Server, ServerFactory
from tests.support import wait_for

RECENT = datetime.now(UTC) - timedelta(days=1)
ADMIN = "admin-token-0123456789"
WRITE = "write-token-0123456789"
CONFIG = {
    "window": "5m",
    "threshold": 0.3,
    "pi0": [0.1, 0.01],
    "grace": "600s",
    "reference": {"kind": "trailing", "windows": 3},
}


def _stored_config(server: Server, name: str) -> tuple[str, float, str, int] | None:
    """Window, threshold, π0 (JSON) and grace seconds stored for model ``name``."""
    with sqlite3.connect(server.database) as conn:
        row = conn.execute(
            "SELECT window, threshold, pi0, grace_seconds FROM models WHERE name = ?", (name,)
        ).fetchone()
    if row is None:
        return None
    return str(row[0]), float(row[1]), json.dumps(json.loads(row[2])), int(row[3])


def test_a_missing_model_is_created_then_found_unchanged(server: Server) -> None:
    created = ensure_model(server.url, "churn", config=CONFIG)
    assert created.created is True
    assert created.model["window"] == "5m"
    assert created.model["pi0"] == [0.01, 0.1]
    assert _stored_config(server, "churn") == ("5m", 0.3, "[0.01, 0.1]", 600)
    updated_at = created.model["updated_at"]

    # The same call again (a restart): found, equal by meaning, nothing written.
    again = ensure_model(server.url + "/v1/", "churn", config=CONFIG)
    assert again.created is False
    assert again.model["updated_at"] == updated_at
    # Fields left out are not compared: a sender that only names the window agrees.
    assert ensure_model(server.url, "churn", config={"window": "5m"}).created is False


def test_an_existing_model_with_another_configuration_is_reported_not_overwritten(
    server: Server,
) -> None:
    ensure_model(server.url, "churn", config=CONFIG)
    with pytest.raises(ModelConfigMismatchError) as raised:
        ensure_model(server.url, "churn", config={**CONFIG, "threshold": 0.5, "window": "1h"})
    error = raised.value
    assert error.differences == {"threshold": (0.5, 0.3), "window": ("1h", "5m")}
    assert error.stored["threshold"] == 0.3
    assert "threshold: given 0.5, stored 0.3" in str(error)
    assert isinstance(error, ModelError)
    assert _stored_config(server, "churn") == ("5m", 0.3, "[0.01, 0.1]", 600)


def test_refusals_raise_model_error_with_the_server_s_code(start_server: ServerFactory) -> None:
    server = start_server(api_tokens=f"{ADMIN}:admin,{WRITE}:write")
    with pytest.raises(ModelError) as raised:
        ensure_model(server.url, "churn", config=CONFIG, token=WRITE)
    assert (raised.value.status, raised.value.code) == (403, "forbidden")
    with pytest.raises(ModelError) as raised:
        ensure_model(server.url, "churn", config={"window": "2h"}, token=ADMIN)
    assert (raised.value.status, raised.value.code) == (422, "validation_error")
    assert _stored_config(server, "churn") is None
    assert ensure_model(server.url, "churn", config=CONFIG, token=ADMIN).created
    with pytest.raises(ValueError, match="config must be a mapping"):
        ensure_model(server.url, "churn", config=["window"], token=ADMIN)  # type: ignore[arg-type]


def test_no_server_is_a_model_error_after_the_attempts(unused_url: str) -> None:
    with pytest.raises(ModelError) as raised:
        ensure_model(unused_url, "churn", max_retry_delay=0.01)
    assert raised.value.status is None
    assert "after 5 attempts" in str(raised.value)


def test_the_async_twin_creates_and_reports_alike(server: Server) -> None:
    async def main() -> None:
        created = await ensure_model_async(server.url, "churn", config=CONFIG)
        assert created.created
        assert not (await ensure_model_async(server.url, "churn", config=CONFIG)).created
        with pytest.raises(ModelConfigMismatchError) as raised:
            await ensure_model_async(server.url, "churn", config={"grace": "1h"})
        assert raised.value.differences == {"grace": ("1h", "10m")}

    asyncio.run(main())


def test_rows_of_a_missing_model_are_rejected_and_not_stored(server: Server) -> None:
    """What a monitor does without the model: the server answers 404 ``model_not_found`` to
    each batch; the monitor rejects the batch's rows (counted, reported, not retried)."""
    incidents: list[Incident] = []
    with Monitor(server.url, "missing", batch_size=10, on_error=incidents.append) as monitor:
        for i in range(25):
            monitor.log(f"tx-{i}", 0.5, timestamp=RECENT)
        assert monitor.flush(timeout=10)
        stats = monitor.stats()
    assert (stats.rejected, stats.predictions_sent, stats.retries, stats.requests) == (25, 0, 0, 3)
    assert {(i.kind, i.status, i.code) for i in incidents} == {("rejected", 404, "model_not_found")}
    assert server.count() == 0


def test_a_monitor_given_a_config_creates_its_model_before_sending(server: Server) -> None:
    with Monitor(server.url, "churn", config=CONFIG, batch_size=10) as monitor:
        for i in range(25):
            monitor.log(f"tx-{i}", 0.5, timestamp=RECENT)
        assert monitor.flush(timeout=10)
        stats = monitor.stats()
    assert (stats.rejected, stats.predictions_sent) == (0, 25)
    assert _stored_config(server, "churn") == ("5m", 0.3, "[0.01, 0.1]", 600)
    assert server.count() == 25


def test_a_monitor_reports_a_different_configuration_and_sends_on(server: Server) -> None:
    incidents: list[Incident] = []
    ensure_model(server.url, "churn", config=CONFIG)

    async def main() -> int:
        async with AsyncMonitor(
            server.url, "churn", config={"window": "1h"}, on_error=incidents.append
        ) as monitor:
            await monitor.log("tx-1", 0.5, timestamp=RECENT)
            assert await monitor.flush(timeout=10)
            return monitor.stats().predictions_sent

    assert asyncio.run(main()) == 1
    (incident,) = incidents
    assert (incident.kind, incident.count) == ("model", 0)
    assert "window: given '1h', stored '5m'" in incident.message
    assert _stored_config(server, "churn") == ("5m", 0.3, "[0.01, 0.1]", 600)


def test_a_monitor_s_bad_config_is_refused_by_the_constructor(server: Server) -> None:
    with pytest.raises(ValueError, match="config is not JSON"):
        Monitor(server.url, "churn", config={"threshold": float("nan")})
    assert httpx.get(f"{server.url}/v1/models/churn").status_code == 404


def test_a_monitor_waits_for_its_model_while_nothing_answers(
    start_server: ServerFactory, unused_url: str
) -> None:
    """No server at first: the monitor reports the model incident and tries again; its
    batches wait, so none is sent into a model not created yet."""
    incidents: list[Incident] = []
    monitor = Monitor(
        unused_url,
        "churn",
        config=CONFIG,
        batch_size=5,
        max_retry_delay=0.05,
        on_error=incidents.append,
    )
    for i in range(12):
        monitor.log(f"tx-{i}", 0.5, timestamp=RECENT)
    wait_for("a model incident", lambda: any(i.kind == "model" for i in incidents), timeout=20)
    assert {(i.kind, i.status) for i in incidents} == {("model", None)}
    server = start_server(port=int(unused_url.rsplit(":", 1)[1]))
    assert monitor.flush(timeout=20)
    monitor.close()
    stats = monitor.stats()
    assert (stats.predictions_sent, stats.rejected, stats.lost) == (12, 0, 0)
    assert server.count() == 12
    assert _stored_config(server, "churn") == ("5m", 0.3, "[0.01, 0.1]", 600)
