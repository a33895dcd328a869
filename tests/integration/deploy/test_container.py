"""Dockerfile, .dockerignore and docker-compose.yml agree with the CLI and deploy/ (no engine)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from app.cli import build_parser
from tests.integration.deploy.conftest import DEPLOY, REPO

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
CALMON_SERVICES = {"migrate", "api", "scheduler"}
#: the commands docs/deployment.md documents for the compose services
EXPECTED_COMMANDS = {
    "migrate": ["migrate"],
    "api": ["api", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"],
    "scheduler": ["scheduler", "--metrics-port", "9464"],
}
DATABASE_URL = "postgresql+psycopg://calmon:calmon@postgres:5432/calmon"


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
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


def _port(target: str) -> int:
    return int(target.rsplit(":", 1)[1])


def _parse_cli(command: list[str]) -> argparse.Namespace | None:
    """Parse with the real CLI; None while the sub-command declares no options yet."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command_parser = sub.choices[command[0]]
    if len(command) > 1 and all(a.dest == "help" for a in command_parser._actions):
        return None
    return parser.parse_args(command)


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
        assert service["command"] == EXPECTED_COMMANDS[name]
        assert service["environment"]["CALMON_DATABASE_URL"] == DATABASE_URL
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("api", "scheduler"):
        assert services[name]["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"}
        }


def test_compose_commands_parse_with_the_cli() -> None:
    """Each calmon service's command is accepted by `calmon` with the documented values."""
    unbuilt: list[str] = []
    for command in EXPECTED_COMMANDS.values():
        namespace = _parse_cli(command)
        if namespace is None:
            unbuilt.append(command[0])
            continue
        assert namespace.command == command[0]
    namespace = _parse_cli(EXPECTED_COMMANDS["api"])
    if namespace is not None:
        assert _option(namespace, "api", "--host") == "0.0.0.0"
        assert _option(namespace, "api", "--port") == 8000
        assert _option(namespace, "api", "--workers") == 2
    namespace = _parse_cli(EXPECTED_COMMANDS["scheduler"])
    if namespace is not None:
        assert _option(namespace, "scheduler", "--metrics-port") == 9464
    if unbuilt:
        pytest.skip(f"`calmon {', '.join(unbuilt)}` declare no options yet: not checked")


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


def test_api_tokens_come_from_the_environment_without_a_usable_default() -> None:
    env = _compose()["services"]["api"]["environment"]
    assert env["CALMON_API_TOKENS"] == "${CALMON_API_TOKENS:-}"


def test_prometheus_targets_match_compose_ports_and_commands() -> None:
    services = _compose()["services"]
    targets = DEPLOY / "prometheus" / "targets"

    def hosts(name: str) -> list[str]:
        return [t for g in yaml.safe_load((targets / name).read_text()) for t in g["targets"]]

    api_port = int(EXPECTED_COMMANDS["api"][EXPECTED_COMMANDS["api"].index("--port") + 1])
    scheduler = EXPECTED_COMMANDS["scheduler"]
    metrics_port = int(scheduler[scheduler.index("--metrics-port") + 1])
    assert hosts("api.yml") == [f"api:{api_port}"]
    assert hosts("scheduler.yml") == [f"scheduler:{metrics_port}"]
    assert hosts("alertmanager.yml") == ["alertmanager:9093"]
    assert f"127.0.0.1:{metrics_port}" in services["scheduler"]["environment"]["HEALTHCHECK_URL"]
    published = [p.rsplit(":", 1)[1] for p in services["api"]["ports"]]
    assert published == [str(api_port)]


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
    assert arg == "PYTHON_IMAGE=python:3.11-slim"
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
    assert scripts["calmon"] == "app.cli:main"
    cmd = json.loads(_args(runtime, "CMD")[-1])
    assert cmd == ["api", "--host", "0.0.0.0", "--port", "8000"]
    namespace = _parse_cli(cmd)
    if namespace is not None:
        assert _option(namespace, "api", "--port") == 8000
    exposed = {int(p) for p in _args(runtime, "EXPOSE")[-1].split()}
    assert exposed == {8000, 9464}


def test_dockerfile_copies_the_installed_packages_and_dockerignore_keeps_them() -> None:
    builder = _stages()["builder"]
    sources = [shlex.split(rest)[:-1] for rest in _args(builder, "COPY")]
    copied = {source for group in sources for source in group}
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    prefixes = {p.rstrip("*") for p in packages["packages"]["find"]["include"]}
    assert copied == {"pyproject.toml", "README.md"} | prefixes
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
    for path in [*files, "pyproject.toml", "README.md"]:
        assert not ignored(path), path
    for path in [".venv/bin/python", "tests/conftest.py", ".git/HEAD", "app/__pycache__/x.pyc"]:
        assert ignored(path), path


def test_dockerfile_dependency_step_lists_the_project_dependencies(tmp_path: Path) -> None:
    """The builder's `python -c` step prints pyproject's dependencies, one per line."""
    run = next(rest for rest in _args(_stages()["builder"], "RUN") if "tomllib" in rest)
    snippet = shlex.split(run.split(">", 1)[0])[2]
    (tmp_path / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    out = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    expected = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert out.splitlines() == expected


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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


def test_docker_compose_config_is_valid(compose_command: list[str]) -> None:
    result = subprocess.run(
        [*compose_command, "-f", str(COMPOSE), "config", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "CALMON_API_TOKENS": "0123456789abcdef:write+read"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
