"""Dockerfile, .dockerignore and docker-compose.yml agree with the CLI, deploy/ and the
end-to-end tests' process set (``harness/stack.py``); no container engine needed."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from calmon.cli import build_parser
from harness.stack import API, API_TOKENS, COMPOSE, SCHEDULER, SETTINGS, STACK, LocalStack
from tests.integration.deploy import tools
from tests.integration.deploy.test_packaging import CLIENT, SOURCES
from tests.integration.deploy.tools import DEPLOY, REPO, find_compose
from tests.support.servers import QuietHandler, http_server
from tests.support.skips import assert_required_or_skipped

COMPOSE_FILE = REPO / "docker-compose.yml"
GRAFANA_PASSWORD = "GRAFANA_ADMIN_PASSWORD"
DOCKERFILE = REPO / "Dockerfile"
PYTHON_IMAGE = "python:3.11-slim-bookworm"
INDEX_URL = "https://pypi.org/simple"
CALMON_SERVICES = {role.name for role in STACK}
DATABASE_URL = "postgresql+psycopg://calmon:calmon@postgres:5432/calmon"
#: how the end-to-end tests place the processes (the API port is a free one)
LOCAL = LocalStack.create(REPO, database_url="sqlite://", scheduler_interval="1").placement
#: required: compose stops with this message while it is unset or empty
TOKENS = (
    "${CALMON_API_TOKENS:?set CALMON_API_TOKENS (token:scope+scope), e.g. in .env next to "
    "docker-compose.yml; see docs/reference/deployment.md}"
)


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    return data


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _stages() -> dict[str, list[tuple[str, str]]]:
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for keyword, rest in _instructions():
        if keyword == "FROM":
            name = rest.split()[-1] if " AS " in rest.upper() else str(len(stages))
            current = stages.setdefault(name, [])
        current.append((keyword, rest))
    return stages


def _args(stage: list[tuple[str, str]], keyword: str) -> list[str]:
    return [rest for kw, rest in stage if kw == keyword]


def _container_ports(service: dict[str, Any]) -> set[int]:
    """Container ports a compose service publishes (``[address:]host:container``) or exposes."""
    published = {int(str(p).rsplit(":", 1)[-1].split("/")[0]) for p in service.get("ports", [])}
    return published | {int(str(p).split("/")[0]) for p in service.get("expose", [])}


def _parse_cli(command: list[str]) -> argparse.Namespace:
    """Parse with the real CLI (exits, failing the test, on an unknown option)."""
    return build_parser().parse_args(command)


def _option(namespace: argparse.Namespace, command: str, option: str) -> Any:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if option in a.option_strings)
    return getattr(namespace, action.dest)


def test_compose_services_and_commands() -> None:
    services = _compose()["services"]
    assert set(services) == {
        "postgres", "migrate", "api", "scheduler", "prometheus", "alertmanager", "grafana"
    }  # fmt: skip
    for name in CALMON_SERVICES:
        service = services[name]
        assert service["build"]["context"] == "."
        assert service["image"] == services["api"]["image"]
        assert service["environment"]["CALMON_DATABASE_URL"] == DATABASE_URL
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("api", "scheduler"):
        assert services[name]["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"}
        }


def test_compose_runs_the_end_to_end_process_set() -> None:
    """Each calmon service runs its role's command with the compose placement substituted,
    publishes or exposes exactly the role's ports, and sets every variable the role reads."""
    services = _compose()["services"]
    for role in STACK:
        service = services[role.name]
        assert service["command"] == role.command(COMPOSE), role.name
        assert _container_ports(service) == role.listening(COMPOSE), role.name
        missing = role.env - set(service["environment"])
        assert not missing, f"{role.name} does not set {sorted(missing)}"
    assert set().union(*(role.env for role in STACK)) == SETTINGS
    for name in ("api", "scheduler"):
        assert services[name]["environment"][API_TOKENS] == TOKENS


def test_the_process_set_has_the_same_options_in_both_placements() -> None:
    """Compose and the end-to-end tests differ only in option values (addresses, ports, worker
    count): the same options, accepted by `calmon`'s own parser, each value where it belongs."""
    for role in STACK:
        compose, local = role.command(COMPOSE), role.command(LOCAL)
        assert compose[0] == local[0] == role.name
        assert [a for a in compose if a.startswith("-")] == [a for a in local if a.startswith("-")]
        for placement, command in ((COMPOSE, compose), (LOCAL, local)):
            assert _parse_cli(command).command == role.name
            assert role.listening(placement) <= {int(a) for a in command if a.isdigit()}
    for placement in (COMPOSE, LOCAL):
        namespace = _parse_cli(API.command(placement))
        assert _option(namespace, "api", "--host") == placement.host
        assert _option(namespace, "api", "--port") == placement.api_port
        assert _option(namespace, "api", "--workers") == placement.workers
        namespace = _parse_cli(SCHEDULER.command(placement))
        assert _option(namespace, "scheduler", "--metrics-host") == placement.host
        assert _option(namespace, "scheduler", "--metrics-port") == placement.metrics_port


def test_postgres_service_matches_the_database_url() -> None:
    services = _compose()["services"]
    url = make_url(DATABASE_URL)
    env = services["postgres"]["environment"]
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]) == (
        url.username, url.password, url.database
    )  # fmt: skip
    assert url.host == "postgres"
    assert url.port == 5432
    assert services["postgres"]["image"].startswith("postgres:15")
    test = services["postgres"]["healthcheck"]["test"]
    assert "pg_isready" in " ".join(test)
    assert any(v.endswith(":/var/lib/postgresql/data") for v in services["postgres"]["volumes"])


def test_prometheus_discovers_every_replica_of_the_compose_services() -> None:
    """Each job resolves its compose service's name to all replicas (A records) on the port the
    role listens on, so a scaled scheduler is one target per replica."""
    services = _compose()["services"]
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"calmon-api", "calmon-scheduler"}
    for job, role in (("calmon-api", API), ("calmon-scheduler", SCHEDULER)):
        assert set(jobs[job]) == {"job_name", "metrics_path", "dns_sd_configs"}, job
        (discovery,) = jobs[job]["dns_sd_configs"]
        assert discovery["names"] == [role.name]
        assert discovery["type"] == "A"
        assert {discovery["port"]} == role.listening(COMPOSE)
        assert role.name in services
    healthcheck = services["scheduler"]["environment"]["HEALTHCHECK_URL"]
    assert healthcheck == f"http://127.0.0.1:{COMPOSE.metrics_port}/metrics"
    (alertmanagers,) = config["alerting"]["alertmanagers"]
    (files,) = alertmanagers["file_sd_configs"]
    groups = [yaml.safe_load((DEPLOY / "prometheus" / f).read_text()) for f in files["files"]]
    assert [t for g in groups for group in g for t in group["targets"]] == ["alertmanager:9093"]
    assert "alertmanager" in services
    assert not (DEPLOY / "prometheus" / "targets" / "scheduler.yml").exists()


def test_prometheus_and_alertmanager_services_mount_deploy() -> None:
    services = _compose()["services"]
    prometheus = services["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    alertmanager = services["alertmanager"]
    assert "./deploy/alertmanager:/etc/alertmanager:ro" in alertmanager["volumes"]
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in alertmanager["command"]


def test_dockerfile_multi_stage_non_root_and_entrypoint() -> None:
    stages = _stages()
    assert list(stages) == ["builder", "runtime"]
    arg = next(rest for kw, rest in _instructions() if kw == "ARG")
    assert arg == f"PYTHON_IMAGE={PYTHON_IMAGE}"
    assert not re.search(r"^#\s*syntax\s*=", DOCKERFILE.read_text(), re.MULTILINE | re.IGNORECASE)
    assert _args(stages["builder"], "FROM") == ["${PYTHON_IMAGE} AS builder"]
    runtime = stages["runtime"]
    assert _args(runtime, "FROM") == ["${PYTHON_IMAGE} AS runtime"]
    copies = _args(runtime, "COPY")
    assert copies == ["--from=builder /opt/calmon /opt/calmon"]
    assert "PATH=/opt/calmon/bin:$PATH" in " ".join(_args(runtime, "ENV"))
    user = _args(runtime, "USER")[-1]
    assert all(part.isdigit() and int(part) > 0 for part in user.split(":")), user
    assert json.loads(_args(runtime, "ENTRYPOINT")[-1]) == ["calmon"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["calmon"] == "calmon.cli:main"
    cmd = json.loads(_args(runtime, "CMD")[-1])
    assert cmd == ["api", "--host", COMPOSE.host, "--port", str(COMPOSE.api_port)]
    assert _option(_parse_cli(cmd), "api", "--port") == COMPOSE.api_port
    exposed = {int(p) for p in _args(runtime, "EXPOSE")[-1].split()}
    assert exposed == set().union(*(role.listening(COMPOSE) for role in STACK))
    assert _args(runtime, "VOLUME") == ["/var/lib/calmon"]
    assert _args(runtime, "WORKDIR")[-1] == "/var/lib/calmon"
    assert "--home-dir /var/lib/calmon --create-home" in " ".join(_args(runtime, "RUN"))


def test_compose_builds_with_the_base_image_and_index_as_build_arguments() -> None:
    """A mirror of the base image and of the package index can be used without editing files;
    the defaults are the Dockerfile's."""
    services = _compose()["services"]
    for name in CALMON_SERVICES:
        args = services[name]["build"]["args"]
        assert args["PYTHON_IMAGE"] == f"${{PYTHON_IMAGE:-{PYTHON_IMAGE}}}"
        assert args["PIP_INDEX_URL"] == f"${{PIP_INDEX_URL:-{INDEX_URL}}}"
    builder = _stages()["builder"]
    assert f"PIP_INDEX_URL={INDEX_URL}" in _args(builder, "ARG")


def test_dockerfile_copies_the_installed_packages_and_dockerignore_keeps_them() -> None:
    builder = _stages()["builder"]
    sources = [shlex.split(rest)[:-1] for rest in _args(builder, "COPY")]
    copied = {source for group in sources for source in group}
    locks = {"requirements/build.txt", "requirements/runtime.txt"}
    assert copied == {*SOURCES, CLIENT, *locks}
    prefixes = {"calmon", "migrations", CLIENT}
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        result = False
        for pattern in patterns:
            negated = pattern.startswith("!")
            body = pattern.lstrip("!").rstrip("/").removeprefix("**/")
            parts = path.split("/")
            if any(fnmatch.fnmatch("/".join(parts[: i + 1]), body) for i in range(len(parts))) or (
                pattern.lstrip("!").startswith("**/")
                and any(fnmatch.fnmatch(part, body) for part in parts)
            ):
                result = not negated
        return result

    files = [
        str(p.relative_to(REPO))
        for prefix in prefixes
        for p in (REPO / prefix).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    assert files
    for path in [*files, *locks, "pyproject.toml", "setup.py", "README.md"]:
        assert not ignored(path), path
    for path in [
        ".venv/bin/python",
        ".venv-test/bin/python",
        "tests/conftest.py",
        ".git/HEAD",
        "calmon/__pycache__/x.pyc",
    ]:
        assert ignored(path), path


def test_dockerfile_installs_the_hashed_runtime_lock_and_no_packaging_tools() -> None:
    """The builder installs requirements/runtime.txt (checked against pyproject.toml by
    tests/unit/test_lock.py) in hash-checking mode, and calmon itself without resolving
    anything (calmon-client, built from client/, beside it); the runtime venv loses pip,
    setuptools and wheel."""
    runs = " ".join(_args(_stages()["builder"], "RUN"))
    assert "/opt/calmon/bin/pip install --require-hashes --no-deps -r requirements/runtime.txt" in (
        runs
    )
    assert "--require-hashes --no-deps -r requirements/build.txt" in runs
    assert "--no-deps --no-index /wheels/calmon-*.whl" in runs
    assert "/wheels/calmon_client-*.whl" in runs  # calmon's dependency built from client/
    assert "/opt/calmon/bin/pip uninstall --yes pip setuptools wheel" in runs
    assert "python3 -m venv /opt/calmon" in runs


class _Health(QuietHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()


@pytest.fixture
def health_server() -> Iterator[str]:
    with http_server(_Health) as port:
        yield f"http://127.0.0.1:{port}"


def test_healthcheck_command_exits_0_when_healthy_and_1_otherwise(health_server: str) -> None:
    runtime = _stages()["runtime"]
    healthcheck = _args(runtime, "HEALTHCHECK")[-1]
    command = json.loads(healthcheck.split(" CMD ", 1)[1])
    assert command[0] == "python"
    default = next(
        part.split("=", 1)[1]
        for env in _args(runtime, "ENV")
        for part in shlex.split(env)
        if part.startswith("HEALTHCHECK_URL=")
    )
    assert default == "http://127.0.0.1:8000/healthz"

    def probe(url: str) -> int:
        env = {**os.environ, "HEALTHCHECK_URL": url}
        done = subprocess.run(
            [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30, check=False
        )
        return done.returncode

    assert probe(f"{health_server}/healthz") == 0
    assert probe(f"{health_server}/unhealthy") == 1
    closed = health_server.rsplit(":", 1)[0] + ":1/healthz"
    assert probe(closed) == 1


def _compose_config(
    compose_command: list[str],
    tmp_path: Path,
    tokens: str | None,
    grafana_password: str | None = "a-fresh-password-0123",
) -> subprocess.CompletedProcess[str]:
    """`compose config -q` with ``CALMON_API_TOKENS`` set to ``tokens`` and
    ``GRAFANA_ADMIN_PASSWORD`` to ``grafana_password`` (unset for None) and an empty env file,
    so that a developer's .env does not decide the outcome."""
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in (API_TOKENS, GRAFANA_PASSWORD)}
    if tokens is not None:
        env[API_TOKENS] = tokens
    if grafana_password is not None:
        env[GRAFANA_PASSWORD] = grafana_password
    return subprocess.run(
        [*compose_command, "--env-file", str(env_file), "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_docker_compose_config_is_valid(compose_command: list[str], tmp_path: Path) -> None:
    result = _compose_config(compose_command, tmp_path, "0123456789abcdef:write+read")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("tokens", [None, ""])
def test_docker_compose_refuses_to_start_without_api_tokens(
    compose_command: list[str], tmp_path: Path, tokens: str | None
) -> None:
    result = _compose_config(compose_command, tmp_path, tokens)
    assert result.returncode != 0
    assert "set CALMON_API_TOKENS (token:scope+scope)" in result.stdout + result.stderr


@pytest.mark.parametrize("password", [None, ""])
def test_docker_compose_refuses_to_start_without_a_grafana_password(
    compose_command: list[str], tmp_path: Path, password: str | None
) -> None:
    result = _compose_config(compose_command, tmp_path, "0123456789abcdef:write+read", password)
    assert result.returncode != 0
    assert "set GRAFANA_ADMIN_PASSWORD" in result.stdout + result.stderr


def test_the_env_example_names_every_required_variable_and_env_is_ignored() -> None:
    example = (REPO / ".env.example").read_text()
    assert {line.split("=")[0] for line in example.splitlines() if line.endswith("=")} == {
        API_TOKENS,
        GRAFANA_PASSWORD,
    }
    assert ".env" in (REPO / ".gitignore").read_text().splitlines()


def test_a_missing_compose_client_fails_when_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert_required_or_skipped(
        monkeypatch,
        tmp_path,
        tools,
        find_compose,
        require_env="CALMON_REQUIRE_PROMETHEUS",
        missing="docker-compose",
    )
