"""The wheels: calmon's, which the image installs: one top-level package, ``calmon``, with the
Alembic migrations inside it as ``calmon.migrations`` (setup.py maps the repository's
``migrations/`` folder there), so that no top-level ``migrations`` package can collide with
another distribution's; and calmon-client's (``client/``), typed (``py.typed``) and alone."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from calmon.db.migrate import MIGRATIONS_PACKAGE, migrations_directory
from tests.integration.deploy.conftest import REPO

#: what the Dockerfile copies into the build context
SOURCES = ("pyproject.toml", "setup.py", "README.md", "calmon", "migrations")


def _build_wheel(tmp_path: Path, root: Path = REPO, sources: tuple[str, ...] = SOURCES) -> Path:
    """`pip wheel --no-deps` of a copy of ``sources`` of ``root`` (the build writes into its
    tree)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in sources:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tree / name)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "--wheel-dir",
         str(tmp_path / "dist"), str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return wheel


# slow: builds a wheel with pip
@pytest.mark.slow
def test_wheel_ships_the_migrations_inside_app(tmp_path: Path) -> None:
    with zipfile.ZipFile(_build_wheel(tmp_path)) as wheel:
        names = set(wheel.namelist())
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert wheel.read(top_level).decode().split() == ["calmon"]
    assert {"calmon/migrations/__init__.py", "calmon/migrations/env.py"} <= names
    assert "calmon/migrations/script.py.mako" in names
    versions = sorted(p.name for p in (REPO / "migrations" / "versions").glob("*.py"))
    assert "0001_initial.py" in versions
    assert {f"calmon/migrations/versions/{v}" for v in versions} <= names
    assert not [n for n in names if n.startswith("migrations/")]
    # the start-up script of /docs, which its policy allows only as a file of the server
    assert "calmon/ui/static/docs/swagger-init.js" in names
    packages = {
        str(init.parent.relative_to(REPO))
        for init in (REPO / "calmon").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    missing = {p for p in packages if f"{p}/__init__.py" not in names}
    assert not missing, f"packages left out of the wheel: {sorted(missing)}"


def test_code_finds_the_migrations_through_the_package() -> None:
    assert MIGRATIONS_PACKAGE == "calmon.migrations"
    directory = migrations_directory()
    assert (directory / "env.py").is_file()
    installed = sorted(p.name for p in (directory / "versions").glob("*.py"))
    assert installed == sorted(p.name for p in (REPO / "migrations" / "versions").glob("*.py"))
    assert "0001_initial.py" in installed


# slow: builds a wheel with pip
@pytest.mark.slow
def test_the_client_wheel_is_typed_and_holds_its_package_alone(tmp_path: Path) -> None:
    client = REPO / "client"
    wheel_path = _build_wheel(tmp_path, client, ("pyproject.toml", "README.md", "calmon_client"))
    assert wheel_path.name.startswith("calmon_client-")
    with zipfile.ZipFile(wheel_path) as wheel:
        names = set(wheel.namelist())
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [
            line.split(":", 1)[1].strip()
            for line in wheel.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    modules = {f"calmon_client/{p.name}" for p in (client / "calmon_client").glob("*.py")}
    assert {"calmon_client/__init__.py", "calmon_client/_core.py"} <= modules
    assert modules | {"calmon_client/py.typed"} <= names
    assert {n.split("/")[0] for n in names if not n.startswith("calmon_client-")} == {
        "calmon_client"
    }
    assert [r.split(">")[0].split("<")[0] for r in requires] == ["httpx"]
