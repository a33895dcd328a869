"""Fixtures for the container tests: a Docker engine, the Python base image, the calmon image.

Without a Docker engine that answers (or without a way to get a base image) the ``docker``
tests skip and the run ends with a loud warning, unless ``CALMON_REQUIRE_DOCKER=1``, which
turns that into a failure. The base image is ``CALMON_TEST_PYTHON_IMAGE`` when set (e.g. the
official ``python:3.11-slim-bookworm`` or a mirror of it), else the Debian image that
``scripts/docker-base`` builds once (needs root and debootstrap; later runs reuse it). The
docker client and the engine lookup are :mod:`tests.e2e.docker_client`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.e2e.docker_client import (
    DEFAULT_BASE,
    IMAGE,
    REPO,
    docker,
    find_engine,
    missing,
    pip_index_url,
    timings,
)
from tests.support.skips import NOTES


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The engine's version; skips (or fails in CI) when no engine answers."""
    return find_engine()


@pytest.fixture(scope="session")
def python_image(docker_engine: str) -> str:
    """The base image of the build: ``CALMON_TEST_PYTHON_IMAGE``, else scripts/docker-base's."""
    image = os.environ.get("CALMON_TEST_PYTHON_IMAGE") or DEFAULT_BASE
    if docker("image", "inspect", image, check=False).returncode == 0:
        return image
    if image != DEFAULT_BASE:
        missing(f"the base image {image} (CALMON_TEST_PYTHON_IMAGE) is not available")
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        missing(f"{DEFAULT_BASE} is missing and scripts/docker-base needs root and debootstrap")
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
    index = pip_index_url()
    if index is not None:
        args += ["--build-arg", f"PIP_INDEX_URL={index}"]
    started = time.monotonic()
    docker("build", *args, "--tag", IMAGE, str(REPO), timeout=1800)
    timings["image build"] = time.monotonic() - started
    return IMAGE


def pytest_sessionfinish() -> None:
    """How long the image took, for the end of the run (the root conftest shows it, and that
    the container tests did not run, from :data:`tests.e2e.docker_client._skipped`)."""
    if timings:
        spent = ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in timings.items())
        NOTES.append(f"container tests: {spent}")
