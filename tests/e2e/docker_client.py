"""Docker for the container tests: the client, the engine it reaches, the image names and what
each stage took; a missing engine is a skip remembered for the run's closing warning, or a
failure under ``CALMON_REQUIRE_DOCKER=1``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.skips import not_run_reasons

REPO = Path(__file__).resolve().parents[2]
#: the tag the tests build the image under (rebuilt each run; Docker's layer cache makes an
#: unchanged rebuild take seconds)
IMAGE = "calmon:container-test"
DEFAULT_BASE = "calmon-base:bookworm"

_skipped = not_run_reasons("container (docker) tests")
#: seconds each stage took in this run, for the summary
timings: dict[str, float] = {}


def missing(reason: str) -> NoReturn:
    """Skip, remembering why for the summary; fail instead under CALMON_REQUIRE_DOCKER=1."""
    if os.environ.get("CALMON_REQUIRE_DOCKER") == "1":
        pytest.fail(f"{reason} and CALMON_REQUIRE_DOCKER=1")
    _skipped.append(reason)
    pytest.skip(reason)


def docker(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the docker client; with ``check``, fail the test with its output on an error."""
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        pytest.fail(f"docker {' '.join(args[:3])} failed:\n{done.stdout[-4000:]}{done.stderr}")
    return done


def find_engine() -> str:
    """The version of the engine the docker client reaches; :func:`missing` when none does."""
    if shutil.which("docker") is None:
        missing("the docker client is not installed (Debian: apt-get install docker.io)")
    probe = docker("version", "--format", "{{.Server.Version}}", timeout=60, check=False)
    if probe.returncode != 0:
        missing(f"no Docker engine answers (start dockerd): {probe.stderr.strip()[:200]}")
    return probe.stdout.strip()


def pip_index_url() -> str | None:
    """The package index pip uses on this machine (environment, then pip's configuration), or
    None for pip's default; the image build uses the same one."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    url = done.stdout.strip() if done.returncode == 0 else ""
    return url or None
