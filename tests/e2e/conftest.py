"""Fixtures for the container tests: a Docker engine, the Python base image, the calmon image.

Without a Docker engine that answers (or without a way to get a base image) the ``docker``
tests skip and the run ends with a loud warning, unless ``CALMON_REQUIRE_DOCKER=1``, which
turns that into a failure. The base image is ``CALMON_TEST_PYTHON_IMAGE`` when set (e.g. the
official ``python:3.11-slim-bookworm`` or a mirror of it), else the Debian image that
``scripts/docker-base`` builds once (needs root and debootstrap; later runs reuse it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.skips import NOTES, not_run_reasons

REPO = Path(__file__).resolve().parents[2]
#: the tag the tests build the image under (rebuilt each run; Docker's layer cache makes an
#: unchanged rebuild take seconds)
IMAGE = "calmon:container-test"
DEFAULT_BASE = "calmon-base:bookworm"

_skipped = not_run_reasons("container (docker) tests")
#: seconds each stage took in this run, for the summary
timings: dict[str, float] = {}


def _missing(reason: str) -> NoReturn:
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


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The engine's version; skips (or fails in CI) when no engine answers."""
    return find_engine()


def find_engine() -> str:
    """The version of the engine the docker client reaches; :func:`_missing` when none does."""
    if shutil.which("docker") is None:
        _missing("the docker client is not installed (Debian: apt-get install docker.io)")
    probe = docker("version", "--format", "{{.Server.Version}}", timeout=60, check=False)
    if probe.returncode != 0:
        _missing(f"no Docker engine answers (start dockerd): {probe.stderr.strip()[:200]}")
    return probe.stdout.strip()


def _pip_index_url() -> str | None:
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


@pytest.fixture(scope="session")
def python_image(docker_engine: str) -> str:
    """The base image of the build: ``CALMON_TEST_PYTHON_IMAGE``, else scripts/docker-base's."""
    image = os.environ.get("CALMON_TEST_PYTHON_IMAGE") or DEFAULT_BASE
    if docker("image", "inspect", image, check=False).returncode == 0:
        return image
    if image != DEFAULT_BASE:
        _missing(f"the base image {image} (CALMON_TEST_PYTHON_IMAGE) is not available")
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        _missing(f"{DEFAULT_BASE} is missing and scripts/docker-base needs root and debootstrap")
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / "scripts" / "docker-base"), DEFAULT_BASE],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    timings["base image"] = time.monotonic() - started
    return image


@pytest.fixture(scope="session")
def calmon_image(python_image: str) -> str:
    """The image of this tree's Dockerfile, built on :func:`python_image`."""
    args = ["--build-arg", f"PYTHON_IMAGE={python_image}"]
    index = _pip_index_url()
    if index is not None:
        args += ["--build-arg", f"PIP_INDEX_URL={index}"]
    started = time.monotonic()
    docker("build", *args, "--tag", IMAGE, str(REPO), timeout=1800)
    timings["image build"] = time.monotonic() - started
    return IMAGE


def pytest_sessionfinish() -> None:
    """How long the image took, for the end of the run (the root conftest shows it, and that
    the container tests did not run, from :data:`_skipped`)."""
    if timings:
        spent = ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in timings.items())
        NOTES.append(f"container tests: {spent}")
