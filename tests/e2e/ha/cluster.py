"""PostgreSQL servers for the high-availability tests: a primary and a streaming standby
(synchronous or not) in temporary directories on free ports, the primary killed, the standby
promoted, the old primary rewound into a standby of the new one; and PgBouncer.

Each server is the ``postgres`` binary run in a process group of its own (as the ``postgres``
user when the tests run as root), so that a kill of the group takes the postmaster and every
backend at once, like the death of a machine. Settings are given on the command line, so a
base backup or a rewind copies none of them from one server to the other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg

from harness.processes import free_port, wait_for
from tests.support.skips import not_run

#: the binaries of Debian's PostgreSQL 15 (``initdb`` is not on PATH there)
PG_BIN: Final = Path("/usr/lib/postgresql/15/bin")
#: where Debian installs ``pgbouncer`` (not on every user's PATH)
SBIN: Final = Path("/usr/sbin")
REQUIRE: Final = "CALMON_REQUIRE_HA"
#: the database calmon uses in these tests
DATABASE: Final = "ha"
SERVER_SETTINGS: Final = """
wal_level = replica
max_wal_senders = 10
wal_keep_size = 1GB
max_connections = 200
hot_standby = on
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 500ms
"""


def as_postgres(args: list[str]) -> list[str]:
    """``args`` run as the ``postgres`` user when this is root (PostgreSQL refuses root)."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def pg_binary(name: str) -> str:
    """The path of a PostgreSQL program; the test fails (CI) or skips loudly without it."""
    path = PG_BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        not_run(
            "high-availability tests",
            f"{name} is not installed (Debian: apt-get install postgresql-15)",
            require_env=REQUIRE,
        )
    return found


def pgbouncer_binary() -> str:
    """The path of ``pgbouncer``; the test fails (CI) or skips loudly without it."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path=str(SBIN))
    if found is None:
        not_run(
            "PgBouncer tests",
            "pgbouncer is not installed (Debian: apt-get install pgbouncer)",
            require_env=REQUIRE,
        )
    return found


def _exists(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie not yet reaped included, as PostgreSQL's
    lock-file check sees it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run(args: list[str], *, timeout: float = 120) -> None:
    done = subprocess.run(
        as_postgres(args), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout}{done.stderr}"


@dataclass
class Server:
    """One PostgreSQL server: its data directory, port and (while running) process."""

    data: Path
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """libpq URL of the ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        settings = {
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.data.parent),
        }
        args = [pg_binary("postgres"), "-D", str(self.data)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                as_postgres(args), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_for("PostgreSQL to accept connections", self._answers, timeout=60, interval=0.1)

    def _answers(self) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, self.log.read_text()
        try:
            psycopg.connect(self.url, connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once; return once the postmaster is
        gone (the launcher may exit first, and a data directory whose postmaster still exists
        cannot be rewound)."""
        assert self.process is not None
        postmaster = self._postmaster_pid()
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None
        if postmaster is not None:
            wait_for(
                "the killed postmaster to be gone",
                lambda: not _exists(postmaster),
                timeout=10,
                interval=0.05,
            )

    def _postmaster_pid(self) -> int | None:
        """The postmaster's process id from its lock file, None without one."""
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Stop at once if running (``immediate`` shutdown)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGQUIT)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def wal_receiver(self) -> int:
        """The process id of this standby's WAL receiver."""
        rows = self.sql("SELECT pid FROM pg_stat_wal_receiver")
        assert rows, "no WAL receiver"
        pid = rows[0][0]
        assert isinstance(pid, int)
        return pid

    def sql(self, statement: str, *, database: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement (autocommit) and return its rows (none for a command)."""
        url = self.url.rsplit("/", 1)[0] + f"/{database}"
        with psycopg.connect(
            url, autocommit=True, connect_timeout=5, options="-c statement_timeout=60000"
        ) as conn:
            cursor = conn.execute(statement.encode())
            return list(cursor.fetchall()) if cursor.description else []


@dataclass
class Pair:
    """A primary and its streaming standby; after :meth:`fail_over` the roles are swapped."""

    primary: Server
    standby: Server
    synchronous: bool

    @property
    def calmon_url(self) -> str:
        """The SQLAlchemy URL calmon uses: both hosts, the writable one chosen."""
        hosts = "&".join(f"host=127.0.0.1:{s.port}" for s in (self.primary, self.standby))
        return f"postgresql+psycopg://postgres@/{DATABASE}?{hosts}&target_session_attrs=read-write"

    def replicating(self) -> list[tuple[object, ...]]:
        """``(application_name, state, sync_state)`` of the primary's standbys."""
        return self.primary.sql(
            "SELECT application_name, state, sync_state FROM pg_stat_replication"
        )

    def fail_over(self) -> None:
        """Promote the standby; the killed primary becomes the standby-to-be."""
        _run([pg_binary("pg_ctl"), "promote", "-w", "-t", "60", "-D", str(self.standby.data)])
        self.primary, self.standby = self.standby, self.primary

    def rejoin(self) -> None:
        """Rewind the old primary (stopped) onto the new one's timeline, start it as its
        standby, and make that standby synchronous again once it streams (as Patroni does)."""
        assert self.standby.process is None
        # pg_rewind reads the new timeline from the source's control file, which the
        # checkpoint after promotion writes: before it, it would find nothing to rewind.
        self.primary.sql("CHECKPOINT")
        _run(
            [
                pg_binary("pg_rewind"),
                "--target-pgdata",
                str(self.standby.data),
                "--source-server",
                f"host=127.0.0.1 port={self.primary.port} user=postgres dbname=postgres",
                "--write-recovery-conf",
            ]
        )
        self.standby.start()
        wait_for(
            "the old primary streaming from the new one",
            lambda: [row[1] for row in self.replicating()] == ["streaming"],
            timeout=60,
        )
        if self.synchronous:
            self.primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
            self.primary.sql("SELECT pg_reload_conf()")
            wait_for(
                "the old primary synchronous",
                lambda: [row[2] for row in self.replicating()] == ["sync"],
                timeout=30,
            )

    def stop(self) -> None:
        """Stop both servers and remove their directory."""
        self.primary.stop()
        self.standby.stop()
        shutil.rmtree(self.primary.data.parents[1], ignore_errors=True)


def server_directory() -> Path:
    """A new temporary directory the ``postgres`` user can reach (pytest's are private to
    the user running the tests)."""
    directory = Path(tempfile.mkdtemp(prefix="calmon-ha-"))
    directory.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
    return directory


def start_pair(*, synchronous: bool) -> Pair:
    """A new primary (database :data:`DATABASE`) and a standby streaming from it, synchronous
    (``synchronous_standby_names = '*'``, ``synchronous_commit = on``) or not, in a
    temporary directory that :meth:`Pair.stop` removes."""
    directory = server_directory()
    primary = Server(directory / "a" / "data", free_port(), directory / "a.log")
    standby = Server(directory / "b" / "data", free_port(), directory / "b.log")
    for server in (primary, standby):
        server.data.parent.mkdir()
        if os.geteuid() == 0:
            shutil.chown(server.data.parent, "postgres")
    _run([pg_binary("initdb"), "-D", str(primary.data), "-U", "postgres", "-A", "trust", "-k"])
    # In the configuration file, not on the command line: the base backup copies it to the
    # standby, and pg_rewind's crash recovery of a killed primary reads it (and must keep the
    # WAL back to the last common checkpoint).
    with (primary.data / "postgresql.conf").open("a", encoding="utf-8") as config:
        config.write(SERVER_SETTINGS)
    pair = Pair(primary=primary, standby=standby, synchronous=synchronous)
    try:
        primary.start()
        primary.sql(f"CREATE DATABASE {DATABASE}")
        _run(
            [
                pg_binary("pg_basebackup"),
                "-D",
                str(standby.data),
                "-d",
                f"host=127.0.0.1 port={primary.port} user=postgres",
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
            ]
        )
        standby.start()
        # Synchronous once the standby streams (commits would wait for it before), set on the
        # primary only: a promoted standby accepts writes alone until the old primary is back
        # (rejoin() then makes that one synchronous).
        if synchronous:
            primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
            primary.sql("SELECT pg_reload_conf()")
        wanted = "sync" if synchronous else "async"
        wait_for(
            "the standby streaming",
            lambda: [row[1:] for row in pair.replicating()] == [("streaming", wanted)],
            timeout=60,
        )
    except BaseException:
        pair.stop()
        raise
    return pair


@dataclass
class Bouncer:
    """A PgBouncer in transaction mode, its directory and (while running) process."""

    directory: Path
    port: int
    process: subprocess.Popen[bytes]

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` through this PgBouncer."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        """Stop at once and remove the directory."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_bouncer(*, target_port: int, databases: list[str], pool_size: int) -> Bouncer:
    """PgBouncer in ``transaction`` pool mode in front of 127.0.0.1:``target_port``, serving
    ``databases`` with ``pool_size`` server connections each (fewer than calmon's clients, so
    that consecutive transactions of one client run on different server sessions)."""
    binary = pgbouncer_binary()
    directory = server_directory()
    port = free_port()
    entries = "\n".join(
        f"{name} = host=127.0.0.1 port={target_port} dbname={name} user=postgres"
        for name in databases
    )
    (directory / "userlist.txt").write_text('"postgres" ""\n', encoding="utf-8")
    config = directory / "pgbouncer.ini"
    config.write_text(
        f"""[databases]
{entries}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir = {directory}
auth_type = trust
auth_file = {directory / "userlist.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
server_reset_query =
logfile = {directory / "pgbouncer.log"}
""",
        encoding="utf-8",
    )
    for path in directory.iterdir():
        if os.geteuid() == 0:
            shutil.chown(path, "postgres")
    process = subprocess.Popen(
        as_postgres([binary, str(config)]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    bouncer = Bouncer(directory=directory, port=port, process=process)

    def answers() -> bool:
        assert process.poll() is None, (directory / "pgbouncer.log").read_text()
        try:
            psycopg.connect(
                f"postgresql://postgres@127.0.0.1:{port}/{databases[0]}", connect_timeout=2
            ).close()
        except psycopg.OperationalError:
            return False
        return True

    try:
        wait_for("PgBouncer to accept connections", answers, timeout=30)
    except BaseException:
        bouncer.stop()
        raise
    return bouncer
