"""A throwaway PostgreSQL server of the test's own, which a fault test may stop and start again
without touching the server other tests share (``initdb`` in a temporary directory, a free
port; run as the ``postgres`` user when the tests run as root, as ``scripts/test`` does)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from harness.processes import free_port
from tests.support.skips import not_run

#: where Debian puts the server's programs when they are not on PATH
PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/").glob(PG_BIN_GLOB.lstrip("/")))
    return candidates[-1] if candidates and (candidates[-1] / "initdb").exists() else None


class PostgresServer:
    """A PostgreSQL server on 127.0.0.1 with its data in ``directory`` (trust auth, user
    ``postgres``, fsync off: a test's data need not survive a power cut)."""

    def __init__(self, directory: Path) -> None:
        pg_bin = _pg_bin()
        if pg_bin is None:
            not_run(
                "a test on a PostgreSQL server of its own",
                "initdb is not installed",
                require_env="CALMON_REQUIRE_POSTGRES",
            )
        self._bin = pg_bin
        self._root = os.geteuid() == 0
        self.directory = directory
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o777)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust")

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def admin_url(self) -> str:
        """libpq URL of the maintenance database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.directory / "server.log"),
            "-w",
            "-o",
            f"-h 127.0.0.1 -p {self.port} -k {self.directory} -F",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop (``fast``: open transactions are rolled back and connections closed)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        """Stop if running and delete the data."""
        subprocess.run(
            self._command("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.directory, ignore_errors=True)

    def _command(self, program: str, *args: str) -> list[str]:
        command = [str(self._bin / program), *args]
        return ["runuser", "-u", "postgres", "--", *command] if self._root else command

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            self._command(program, *args), capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, (program, done.stdout, done.stderr)
