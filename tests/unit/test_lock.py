"""The lock files of requirements/ agree with pyproject.toml, so that they cannot drift apart.

``runtime.txt`` (the image) pins every dependency of ``[project]`` and of the ``arrow`` extra
at a version inside its range; ``test.txt`` (scripts/test, CI) pins the same versions plus the
``test`` extra;
``build.txt`` pins the build system. Every pin is exact and carries hashes (pip's
``--require-hashes`` mode refuses anything else). Refresh with ``scripts/lock``.

calmon-client, a dependency published from this repository (``client/``), is in no lock: every
install line installs it from its source (``--no-deps``), and its range in ``pyproject.toml``
holds the version of ``client/pyproject.toml``; its own dependencies are locked.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCKS = REPO / "requirements"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
CLIENT = tomllib.loads((REPO / "client" / "pyproject.toml").read_text(encoding="utf-8"))
#: dependencies built from this repository rather than taken from the index
FROM_SOURCE = frozenset({canonicalize_name(CLIENT["project"]["name"])})
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


def parse_lock(text: str) -> dict[str, tuple[Version, int]]:
    """Canonical name -> (pinned version, number of hashes) of a hashed requirements file.

    Continuation lines are joined; comments and blank lines are ignored. Raises ValueError on
    a requirement that is not an exact ``==`` pin, or on a name pinned twice."""
    pins: dict[str, tuple[Version, int]] = {}
    joined = re.sub(r"\\\n", " ", text)
    for raw in joined.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        if match is None:
            raise ValueError(f"not an exact pin: {line!r}")
        name = canonicalize_name(match[1])
        if name in pins:
            raise ValueError(f"{name} pinned twice")
        pins[name] = (Version(match[3]), line.count("--hash=sha256:"))
    return pins


def _lock(name: str) -> dict[str, tuple[Version, int]]:
    return parse_lock((LOCKS / name).read_text(encoding="utf-8"))


def _check_covers(requirements: list[str], lock: dict[str, tuple[Version, int]]) -> None:
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{requirement.name} is not in the lock: run scripts/lock"
        version = lock[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{name}=={version} is outside {requirement.specifier}: run scripts/lock"
        )


def test_parse_lock_reads_pins_and_hashes_and_refuses_ranges() -> None:
    text = (
        "# header\nnumpy==2.1.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n"
        "    # via calmon\nUvicorn[standard]==0.30.1 --hash=sha256:cc\n"
    )
    assert parse_lock(text) == {"numpy": (Version("2.1.0"), 2), "uvicorn": (Version("0.30.1"), 1)}
    with pytest.raises(ValueError, match="not an exact pin"):
        parse_lock("numpy>=2 --hash=sha256:aa\n")
    with pytest.raises(ValueError, match="pinned twice"):
        parse_lock("numpy==2 --hash=sha256:aa\nNumPy==2 --hash=sha256:aa\n")


def _from_index(requirements: list[str]) -> list[str]:
    return [r for r in requirements if canonicalize_name(Requirement(r).name) not in FROM_SOURCE]


def test_runtime_lock_covers_the_dependencies_within_their_ranges() -> None:
    _check_covers(_from_index(PYPROJECT["project"]["dependencies"]), _lock("runtime.txt"))


def test_the_client_is_a_dependency_from_source_whose_own_dependencies_are_locked() -> None:
    (client,) = [
        Requirement(r)
        for r in PYPROJECT["project"]["dependencies"]
        if canonicalize_name(Requirement(r).name) in FROM_SOURCE
    ]
    assert client.specifier.contains(CLIENT["project"]["version"])
    assert not client.specifier.contains("0.0.1")
    for name in ("runtime.txt", "test.txt"):
        assert canonicalize_name(client.name) not in _lock(name), name
    _check_covers(CLIENT["project"]["dependencies"], _lock("runtime.txt"))


def test_runtime_lock_covers_the_arrow_extra_the_image_serves() -> None:
    _check_covers(PYPROJECT["project"]["optional-dependencies"]["arrow"], _lock("runtime.txt"))


def test_test_lock_is_the_runtime_lock_plus_the_test_extra() -> None:
    runtime, test = _lock("runtime.txt"), _lock("test.txt")
    _check_covers(PYPROJECT["project"]["optional-dependencies"]["test"], test)
    different = {
        name: (pin[0], test.get(name, (None,))[0])
        for name, pin in runtime.items()
        if test.get(name, (None,))[0] != pin[0]
    }
    assert not different, f"the test lock runs other versions than the image: {different}"


def test_build_lock_covers_the_build_system() -> None:
    _check_covers(PYPROJECT["build-system"]["requires"], _lock("build.txt"))


@pytest.mark.parametrize("name", ["runtime.txt", "test.txt", "build.txt"])
def test_every_pin_has_hashes(name: str) -> None:
    lock = _lock(name)
    assert lock
    assert all(hashes >= 1 for _, hashes in lock.values()), name
