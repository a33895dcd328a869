"""The real image: built from this tree's Dockerfile, its `migrate`, `api` and `scheduler`
containers run against this machine's PostgreSQL, turn healthy, run as non-root, and
predictions posted to the API (as JSON and as an Arrow stream) come back as a window on
`/metrics`.

The containers use the host's network (PostgreSQL listens on loopback) with free ports, and a
throwaway database. The image's HEALTHCHECK command is the one under test; only its interval
is shortened (``--health-interval``) so that the test does not wait 30 s for the first probe.
Needs a Docker engine (see ``tests/e2e/conftest.py`` and ``tests/e2e/docker_client.py``);
about 35 s once the base image exists.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from calmon.db.migrate import head_revision
from calmon.services.ingest_arrow import ARROW_MEDIA_TYPE
from harness.processes import free_port, wait_for
from harness.stack import (
    API,
    API_TOKENS,
    DATABASE_URL,
    LOG_LEVEL,
    MIGRATE,
    SCHEDULER,
    SCHEDULER_INTERVAL,
    Placement,
    Role,
)
from tests.e2e import docker_client
from tests.e2e.docker_client import docker, find_engine
from tests.support.skips import assert_required_or_skipped

TOKEN = "container-test-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
MODEL = "container"
PREDICTIONS = 40
UID = 10001


def _environment(database_url: str, role: Role) -> dict[str, str]:
    values = {
        DATABASE_URL: database_url.replace("postgresql://", "postgresql+psycopg://", 1),
        LOG_LEVEL: "INFO",
        SCHEDULER_INTERVAL: "1",
        API_TOKENS: f"{TOKEN}:admin",
    }
    return {key: values[key] for key in sorted(role.env)}


def _env_args(env: dict[str, str]) -> list[str]:
    return [arg for key, value in env.items() for arg in ("--env", f"{key}={value}")]


class Containers:
    """Detached containers of one test, removed (with their anonymous volumes) at the end."""

    def __init__(self, image: str, database_url: str) -> None:
        self.image = image
        self.database_url = database_url
        self.prefix = f"calmon-test-{uuid.uuid4().hex[:8]}"
        self.names: list[str] = []

    def start(self, role: Role, placement: Placement, health_url: str) -> str:
        name = f"{self.prefix}-{role.name}"
        self.names.append(name)
        env = {**_environment(self.database_url, role), "HEALTHCHECK_URL": health_url}
        docker(
            "run", "--detach", "--name", name, "--network", "host",
            "--health-interval", "2s", *_env_args(env),
            self.image, *role.command(placement),
        )  # fmt: skip
        return name

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n" + (lambda d: d.stdout + d.stderr)(docker("logs", name, check=False))
            for name in self.names
        )

    def remove(self) -> None:
        for name in self.names:
            docker("rm", "--force", "--volumes", name, check=False)


@pytest.fixture
def containers(calmon_image: str, postgres_database: str) -> Iterator[Containers]:
    running = Containers(calmon_image, postgres_database)
    try:
        yield running
    finally:
        running.remove()


def _inspect(name: str) -> dict[str, object]:
    data: list[dict[str, object]] = json.loads(docker("inspect", name).stdout)
    return data[0]


def _wait_healthy(containers: Containers, name: str, timeout: float = 120) -> None:

    def healthy() -> str:
        status = docker("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip()
        if status == "healthy":
            return status
        running = docker("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
        assert running == "true", f"{name} exited\n{containers.logs()}"
        return ""

    wait_for(
        f"{name} to be healthy", healthy, timeout=timeout, interval=0.2, context=containers.logs
    )


def _uids(name: str) -> dict[str, list[int]]:
    """Real, effective, saved and filesystem uid of every process in the container."""
    out = docker("exec", name, "sh", "-c", "grep -H '^Uid:' /proc/[0-9]*/status").stdout
    uids: dict[str, list[int]] = {}
    for line in out.splitlines():
        path, _, values = line.partition(":Uid:")
        uids[path] = [int(v) for v in values.split()]
    return uids


def _window_predictions(metrics: str) -> float | None:
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "calmon_window_predictions" and sample.labels == {
                "model": MODEL,
                "segment": "*",
            }:
                return sample.value
    return None


@pytest.mark.docker
def test_image_metadata_and_no_packaging_tools(calmon_image: str) -> None:
    """Non-root user, the volume owned by it, the HEALTHCHECK, and neither pip, setuptools nor
    wheel importable by the venv's Python or by the base image's own."""
    config = _inspect(calmon_image)["Config"]
    assert isinstance(config, dict)
    assert config["User"] == f"{UID}:{UID}"
    assert config["Volumes"] == {"/var/lib/calmon": {}}
    assert config["Healthcheck"]["Test"][:2] == ["CMD", "python"]
    owner = docker("run", "--rm", "--entrypoint", "stat", calmon_image, "-c", "%u:%g %a",
                   "/var/lib/calmon").stdout.split()  # fmt: skip
    assert owner[0] == f"{UID}:{UID}"
    check = (
        "import importlib.util as u, sys; "
        "print([m for m in ('pip', 'setuptools', 'wheel', 'migrations') if u.find_spec(m)])"
    )
    venv = docker("run", "--rm", "--entrypoint", "python", calmon_image, "-c", check).stdout
    assert venv.strip() == "[]"
    system = docker(
        "run", "--rm", "--entrypoint", "sh", calmon_image, "-c",
        f'PATH=/usr/local/bin:/usr/bin:/bin exec python3 -c "{check}"',
    ).stdout  # fmt: skip
    assert system.strip() == "[]"
    files = docker(
        "run", "--rm", "--entrypoint", "python", calmon_image, "-c",
        "from calmon.db.migrate import migrations_directory as d; print(sorted(p.name for p in "
        "(d() / 'versions').glob('0*.py')))",
    ).stdout  # fmt: skip
    assert "0001_initial.py" in files


@pytest.mark.docker
@pytest.mark.postgres
def test_migrate_api_and_scheduler_round_trip_a_prediction(
    calmon_image: str, postgres_database: str, containers: Containers
) -> None:
    migrated = docker(
        "run", "--rm", "--network", "host",
        *_env_args(_environment(postgres_database, MIGRATE)),
        calmon_image, *MIGRATE.command(Placement("0.0.0.0", 0, 0, 1)),
    )  # fmt: skip
    assert migrated.returncode == 0
    with psycopg.connect(postgres_database) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version == (head_revision(),)

    placement = Placement(host="0.0.0.0", api_port=free_port(), metrics_port=free_port(), workers=2)
    base = f"http://127.0.0.1:{placement.api_port}"
    metrics_url = f"http://127.0.0.1:{placement.metrics_port}/metrics"
    api = containers.start(API, placement, f"{base}/healthz")
    scheduler = containers.start(SCHEDULER, placement, metrics_url)
    _wait_healthy(containers, api)
    _wait_healthy(containers, scheduler)

    for name in (api, scheduler):
        assert docker("exec", name, "id", "-u").stdout.strip() == str(UID)
        uids = _uids(name)
        assert len(uids) >= 2, uids  # the service's processes and the grep itself
        assert all(values == [UID] * 4 for values in uids.values()), uids

    created = httpx.put(
        f"{base}/v1/models/{MODEL}", json={"window": "1h", "grace": "1m"}, headers=HEADERS
    )
    assert created.status_code == 201, created.text
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    stamps = [start + timedelta(minutes=i) for i in range(PREDICTIONS)]
    scores = [(i % 10) / 10 + 0.05 for i in range(PREDICTIONS)]
    labels = [int(i % 10 >= 5) for i in range(PREDICTIONS)]
    half = PREDICTIONS // 2
    body = {
        "predictions": [
            {
                "id": f"p{i}",
                "timestamp": stamps[i].isoformat(),
                "score": scores[i],
                "label": labels[i],
            }
            for i in range(half)
        ]
    }
    posted = httpx.post(f"{base}/v1/models/{MODEL}/predictions", json=body, headers=HEADERS)
    assert posted.status_code == 200, posted.text
    assert posted.json()["new"] == half
    # the other half as an Arrow IPC stream: the image has pyarrow (the runtime lock's extra)
    table = pa.table(
        {
            "id": pa.array([f"p{i}" for i in range(half, PREDICTIONS)], pa.utf8()),
            "timestamp": pa.array(stamps[half:], pa.timestamp("us", tz="UTC")),
            "score": pa.array(scores[half:], pa.float64()),
            "label": pa.array(labels[half:], pa.int8()),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    posted = httpx.post(
        f"{base}/v1/models/{MODEL}/predictions",
        content=sink.getvalue().to_pybytes(),
        headers={**HEADERS, "Content-Type": ARROW_MEDIA_TYPE},
    )
    assert posted.status_code == 200, posted.text
    assert posted.json()["new"] == PREDICTIONS - half

    wait_for(
        f"the exporter to count {PREDICTIONS} predictions",
        lambda: _window_predictions(httpx.get(f"{base}/metrics", timeout=10).text) == PREDICTIONS,
        timeout=90,
        interval=0.2,
        context=containers.logs,
    )
    scheduler_metrics = httpx.get(metrics_url, timeout=10).text
    computed = [
        sample.value
        for family in text_string_to_metric_families(scheduler_metrics)
        for sample in family.samples
        if sample.name == "calmon_window_compute_duration_seconds_count"
    ]
    assert computed, scheduler_metrics[:2000]
    assert computed[0] >= 1


def test_a_missing_engine_fails_when_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No docker client: a failure under CALMON_REQUIRE_DOCKER=1, else a skip remembered for
    the run's closing warning."""
    assert_required_or_skipped(
        monkeypatch,
        tmp_path,
        docker_client,
        find_engine,
        require_env="CALMON_REQUIRE_DOCKER",
        missing="docker client",
    )
