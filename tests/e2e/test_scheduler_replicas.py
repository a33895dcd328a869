"""The deployment's process set on PostgreSQL with three scheduler replicas, scraped by a real
Prometheus running the repository's configuration and rules.

`calmon migrate`, `calmon api` and three `calmon scheduler` processes (the roles of
``harness.stack``, each replica with a metrics port of its own, as the compose replicas
discovered by DNS) share one database; predictions of three models (six closed 5-minute windows
each) arrive through the API, and late labels for two computed windows while the back-fill goes
on. Through Prometheus's HTTP API: every replica computed some windows and together exactly one
computation per window plus one per window the late labels touched
(``sum(calmon_windows_computed_total)``); exactly one replica leads; the queue
(``max(calmon_windows_pending)``) drains to 0; no alert is active. Then one replica is killed
(``SIGKILL``): its target goes down and ``CalmonSchedulerReplicaDown`` turns pending for it,
while ``CalmonSchedulerDown`` stays quiet (a replica still leads).

Without ``prometheus`` the test is skipped with a warning; with ``CALMON_REQUIRE_PROMETHEUS=1``
(CI) it fails instead.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from harness.processes import free_port, wait_until_up
from harness.stack import (
    API,
    MIGRATE,
    SCHEDULER,
    LocalStack,
    prometheus_config,
    running,
    running_prometheus,
)
from tests import paused_scheduler
from tests.e2e.test_prometheus_alerts import _api, _prometheus_binary, _wait

pytestmark = pytest.mark.slow

MODELS = ("m0", "m1", "m2")
WINDOWS = 6
PER_WINDOW = 200
FIVE_MINUTES = timedelta(minutes=5)
REPLICAS = 3


def _scalar(prometheus: str, expr: str) -> float | None:
    result = _api(prometheus, "/api/v1/query", query=expr)["result"]
    return float(result[0]["value"][1]) if result else None


def _send(base: str, first: datetime) -> None:
    """Every model's predictions: half labelled, ids ``<model>-<window>-<i>``; prediction i is
    positive when i is a multiple of 3 (the class ratio does not move, so no alert fires)."""
    with httpx.Client(base_url=base, timeout=30) as client:
        for model in MODELS:
            response = client.put(f"/v1/models/{model}", json={"window": "5m", "grace": "0s"})
            assert response.status_code == 201, response.text
            items = []
            for w in range(WINDOWS):
                for i in range(PER_WINDOW):
                    item: dict[str, object] = {
                        "id": f"{model}-{w}-{i}",
                        "timestamp": (
                            first + w * FIVE_MINUTES + i * timedelta(seconds=1)
                        ).isoformat(),
                        "score": round((i * 37 % 100) / 100, 2),
                    }
                    if i % 2 == 0:
                        item["label"] = int(i % 3 == 0)
                    items.append(item)
            response = client.post(f"/v1/models/{model}/predictions", json={"predictions": items})
            assert response.status_code == 200, response.text


def _computed(base: str, model: str) -> int:
    with httpx.Client(base_url=base, timeout=30) as client:
        response = client.get(f"/v1/models/{model}/windows", params={"segment": "*"})
        assert response.status_code == 200, response.text
        return len(response.json()["windows"])


def test_three_scheduler_replicas_share_the_work_under_prometheus(
    postgres_database: str, tmp_path: Path
) -> None:
    prometheus_binary = _prometheus_binary()
    url = postgres_database.replace("postgresql://", "postgresql+psycopg://", 1)
    stack = LocalStack.create(tmp_path, database_url=url, scheduler_interval="0.5")
    migrated = stack.run(MIGRATE)
    assert migrated.returncode == 0, migrated.stderr
    ports = [free_port() for _ in range(REPLICAS)]
    prometheus_port = free_port()
    prometheus = f"http://127.0.0.1:{prometheus_port}"
    config = prometheus_config(
        tmp_path / "prometheus",
        {
            "calmon-api": [f"127.0.0.1:{stack.placement.api_port}"],
            "calmon-scheduler": [f"127.0.0.1:{port}" for port in ports],
        },
    )
    # Each window's transaction lasts at least 0.3 s, so the replicas overlap.
    env = {**stack.environment(SCHEDULER), "PYTHONPATH": paused_scheduler.ROOT}
    with ExitStack() as processes:
        api = processes.enter_context(stack.start(API))
        replicas: list[subprocess.Popen[bytes]] = []
        for i, port in enumerate(ports):
            placement = dataclasses.replace(stack.placement, metrics_port=port)
            replicas.append(
                processes.enter_context(
                    running(
                        paused_scheduler.command(0.3, *SCHEDULER.command(placement)[1:]),
                        env=env,
                        log=tmp_path / f"scheduler-{i}.log",
                    )
                )
            )
        processes.enter_context(
            running_prometheus(prometheus_binary, config, port=prometheus_port, directory=tmp_path)
        )
        wait_until_up(stack.base, api)
        _wait(
            "every target up",
            lambda: (
                _scalar(prometheus, 'count(up{job="calmon-scheduler"} == 1)') == REPLICAS
                and _scalar(prometheus, 'count(up{job="calmon-api"} == 1)') == 1
            ),
            timeout=60,
        )
        now = datetime.now(UTC)
        first = (
            datetime.fromtimestamp(int(now.timestamp()) // 300 * 300, tz=UTC)
            - (WINDOWS + 1) * FIVE_MINUTES
        )
        _send(stack.base, first)
        # Late labels for m0's first two windows, once computed, while the back-fill goes on.
        _wait("m0's first windows computed", lambda: _computed(stack.base, "m0") >= 2, 60)
        with httpx.Client(base_url=stack.base, timeout=30) as client:
            labels = [
                {"id": f"m0-{w}-{i}", "label": int(i % 3 == 0)}
                for w in (0, 1)
                for i in range(1, PER_WINDOW, 2)
            ]
            response = client.post("/v1/models/m0/labels", json={"labels": labels})
            assert response.status_code == 200, response.text
        total = len(MODELS) * WINDOWS + 2
        _wait(
            "every computation scraped",
            lambda: (
                _scalar(prometheus, "sum(calmon_windows_computed_total)") == total
                and _scalar(prometheus, "max(calmon_windows_pending)") == 0
            ),
            timeout=120,
        )
        assert all(_computed(stack.base, model) == WINDOWS for model in MODELS)
        assert _scalar(prometheus, "count(calmon_windows_computed_total > 0)") == REPLICAS
        assert _scalar(prometheus, "sum(calmon_scheduler_leader)") == 1
        assert _api(prometheus, "/api/v1/alerts")["alerts"] == []

        # A replica dies: its target goes down, the replica alert turns pending for it only.
        victim = replicas[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        _wait(
            "the replica alert pending",
            lambda: (
                [
                    (a["labels"]["alertname"], a["labels"].get("instance"), a["state"])
                    for a in _api(prometheus, "/api/v1/alerts")["alerts"]
                ]
                == [("CalmonSchedulerReplicaDown", f"127.0.0.1:{ports[0]}", "pending")]
            ),
            timeout=60,
        )
        _wait(
            "a surviving replica leads",
            lambda: (
                _scalar(prometheus, "sum(calmon_scheduler_leader)") == 1
                and _scalar(prometheus, f'up{{instance="127.0.0.1:{ports[0]}"}}') == 0
            ),
            timeout=60,
        )
