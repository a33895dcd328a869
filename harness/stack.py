"""The calmon process set, defined once for the end-to-end tests and for docker-compose.yml.

The compose deployment runs `calmon migrate`, `calmon api` and `calmon scheduler` as services of
one image; the end-to-end tests start the same processes on this machine. :data:`STACK` says,
for each role, the sub-command with its options, where ``{name}`` stands for what differs
between the two places (listening address, ports, API workers: a :class:`Placement`), the
``CALMON_*`` variables the process reads, and which of those placeholders are ports it listens
on. The end-to-end tests start their processes through :class:`LocalStack`, which builds the
command lines and environments from these roles only; ``tests/integration/deploy`` checks that
the compose services run the same commands with :data:`COMPOSE` substituted, expose those
ports, and set every variable of :data:`SETTINGS`. :data:`SERVE` is the one-process variant
(API and scheduler together) that compose does not use.

:func:`prometheus_config` makes the copy of ``deploy/prometheus`` that scrapes such local
processes: production's configuration with only the discovery, the Alertmanager and the
intervals changed; :func:`running_prometheus` runs a Prometheus server on it.
:func:`running` runs any process for the length of a block, :func:`api_workers` a lone
`calmon api --workers 2` on a migrated PostgreSQL database.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from calmon.db import migrate
from calmon.db.session import create_db_engine
from calmon.settings import Settings
from harness.processes import (
    calmon_command,
    clean_environment,
    free_port,
    wait_for,
    wait_until_up,
)

REPO: Final = Path(__file__).resolve().parents[1]
DEPLOY_PROMETHEUS: Final = REPO / "deploy" / "prometheus"

DATABASE_URL: Final = "CALMON_DATABASE_URL"
LOG_LEVEL: Final = "CALMON_LOG_LEVEL"
#: ticks of the scheduler, and how often the API re-reads the latest windows for /metrics
SCHEDULER_INTERVAL: Final = "CALMON_SCHEDULER_INTERVAL"
API_TOKENS: Final = "CALMON_API_TOKENS"


@dataclass(frozen=True)
class Placement:
    """What differs between the compose services and the local processes."""

    host: str
    api_port: int
    metrics_port: int
    workers: int


@dataclass(frozen=True)
class Role:
    """One kind of calmon process: its arguments, the variables it reads, its ports."""

    name: str
    args: tuple[str, ...]
    env: frozenset[str]
    ports: tuple[str, ...] = ()

    def command(self, placement: Placement) -> list[str]:
        """The arguments after ``calmon`` with ``placement`` substituted."""
        values = dataclasses.asdict(placement)
        return [arg.format_map(values) for arg in self.args]

    def listening(self, placement: Placement) -> set[int]:
        """The ports the process listens on under ``placement``."""
        return {getattr(placement, port) for port in self.ports}


MIGRATE: Final = Role("migrate", ("migrate",), frozenset({DATABASE_URL, LOG_LEVEL}))
API: Final = Role(
    "api",
    ("api", "--host", "{host}", "--port", "{api_port}", "--workers", "{workers}"),
    frozenset({DATABASE_URL, LOG_LEVEL, SCHEDULER_INTERVAL, API_TOKENS}),
    ports=("api_port",),
)
SCHEDULER: Final = Role(
    "scheduler",
    ("scheduler", "--metrics-host", "{host}", "--metrics-port", "{metrics_port}"),
    frozenset({DATABASE_URL, LOG_LEVEL, SCHEDULER_INTERVAL, API_TOKENS}),
    ports=("metrics_port",),
)
#: the compose deployment's calmon services, named as the roles
STACK: Final[tuple[Role, ...]] = (MIGRATE, API, SCHEDULER)
SERVE: Final = Role(
    "serve",
    ("serve", "--port", "{api_port}"),
    frozenset({DATABASE_URL, LOG_LEVEL, SCHEDULER_INTERVAL}),
    ports=("api_port",),
)
#: every variable some role reads: what a stack's settings give values to
SETTINGS: Final[frozenset[str]] = frozenset[str]().union(*(role.env for role in (*STACK, SERVE)))

#: docker-compose.yml: all interfaces of the container, the image's ports, two API workers
COMPOSE: Final = Placement(host="0.0.0.0", api_port=8000, metrics_port=9464, workers=2)


@contextmanager
def running(
    args: Sequence[str], *, log: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A process writing to ``log`` (run in its directory), terminated and awaited on exit."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(args), env=env, cwd=log.parent, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def running_prometheus(
    binary: str, config: Path, *, port: int, directory: Path
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """The Prometheus server ``binary`` on 127.0.0.1:``port`` under ``config``, its data and
    its log in ``directory``, stopped on exit."""
    return running(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        log=directory / "prometheus.log",
    )


@contextmanager
def api_workers(
    postgres_database: str, directory: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`calmon api --workers 2` on the libpq URL ``postgres_database``, migrated first, on a
    free port, with its metrics in ``directory / "metrics"`` and its log in ``directory``;
    yields its base URL and process once it answers, stopped on exit."""
    url = postgres_database.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_db_engine(Settings(database_url=url))
    migrate.upgrade(engine)
    engine.dispose()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **clean_environment(),
        DATABASE_URL: url,
        "PROMETHEUS_MULTIPROC_DIR": str(directory / "metrics"),
        LOG_LEVEL: "WARNING",
    }
    with running(
        [*calmon_command(), "api", "--workers", "2", "--port", str(port)],
        env=env,
        log=directory / "api.log",
    ) as process:
        wait_until_up(base, process)
        yield base, process


@dataclass(frozen=True)
class LocalStack:
    """calmon processes on this machine: their settings, where they listen, their logs."""

    directory: Path
    settings: Mapping[str, str]
    placement: Placement

    @classmethod
    def create(
        cls,
        directory: Path,
        *,
        database_url: str,
        scheduler_interval: str,
        log_level: str = "WARNING",
    ) -> LocalStack:
        """Loopback, a free API port, no scheduler metrics endpoint, one API worker, and no
        token (the API may run open on loopback)."""
        settings = {
            DATABASE_URL: database_url,
            LOG_LEVEL: log_level,
            SCHEDULER_INTERVAL: scheduler_interval,
            API_TOKENS: "",
        }
        assert set(settings) == SETTINGS
        placement = Placement(host="127.0.0.1", api_port=free_port(), metrics_port=0, workers=1)
        return cls(directory=directory, settings=settings, placement=placement)

    @property
    def base(self) -> str:
        """URL of the API."""
        return f"http://{self.placement.host}:{self.placement.api_port}"

    def environment(self, role: Role | None = None) -> dict[str, str]:
        """The environment without inherited ``CALMON_*`` variables, plus the variables of
        ``role`` (of every role when None, for clients such as `calmon simulate`)."""
        keys = SETTINGS if role is None else role.env
        return {**clean_environment(), **{key: self.settings[key] for key in sorted(keys)}}

    def command(self, role: Role) -> list[str]:
        """The full command line of ``role``."""
        return [*calmon_command(), *role.command(self.placement)]

    def run(self, role: Role, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``role`` to completion (`calmon migrate`)."""
        return subprocess.run(
            self.command(role),
            env=self.environment(role),
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    @contextmanager
    def start(self, role: Role) -> Iterator[subprocess.Popen[bytes]]:
        """``role`` running in the background, logging to ``<directory>/<role>.log``."""
        log = self.directory / f"{role.name}.log"
        with running(self.command(role), env=self.environment(role), log=log) as process:
            yield process


LOCAL_INTERVAL: Final = "1s"


def prometheus_config(directory: Path, targets: Mapping[str, Sequence[str]]) -> Path:
    """Copy ``deploy/prometheus`` to ``directory`` for processes on this machine; returns the
    configuration file.

    Each scrape job's discovery (DNS names of the compose services) becomes the static
    ``targets`` of that job, which must name every job; no Alertmanager is notified; scrapes
    and evaluations run every second. Jobs, paths, rules and everything else stay production's.
    """
    shutil.copytree(DEPLOY_PROMETHEUS, directory)
    path = directory / "prometheus.yml"
    config = localised(yaml.safe_load(path.read_text(encoding="utf-8")), targets)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    (directory / "targets" / "alertmanager.yml").write_text("[]\n", encoding="utf-8")
    return path


def localised(config: Mapping[str, Any], targets: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """``config`` with the discovery of each job replaced by its ``targets`` and 1 s intervals."""
    out: dict[str, Any] = copy.deepcopy(dict(config))
    out["global"].update(
        scrape_interval=LOCAL_INTERVAL,
        scrape_timeout=LOCAL_INTERVAL,
        evaluation_interval=LOCAL_INTERVAL,
    )
    jobs = {job["job_name"]: job for job in out["scrape_configs"]}
    assert set(jobs) == set(targets), (sorted(jobs), sorted(targets))
    for name, job in jobs.items():
        assert "dns_sd_configs" in job, name
        del job["dns_sd_configs"]
        job["static_configs"] = [{"targets": list(targets[name])}]
    return out


def wait_for_rule_evaluations(base: str, count: int, *, timeout: float = 45.0) -> None:
    """Wait until the Prometheus server at ``base`` has evaluated every rule group ``count``
    more times (``count`` evaluation intervals, each group's ``lastEvaluation`` seen to change
    ``count`` times; polled at twice the rate of ``LOCAL_INTERVAL``)."""
    seen: dict[str, set[str]] = {}

    def evaluated() -> bool:
        with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=5) as response:
            groups = json.loads(response.read())["data"]["groups"]
        for group in groups:
            seen.setdefault(group["name"], set()).add(group["lastEvaluation"])
        return bool(seen) and all(len(times) > count for times in seen.values())

    wait_for(
        f"{count} more rule evaluations",
        evaluated,
        timeout=timeout,
        interval=0.4,
        errors=(OSError,),
    )
