"""The wheel the image installs: one top-level package, ``app``, with the Alembic migrations
inside it as ``calmon.migrations`` (setup.py maps the repository's ``migrations/`` folder there),
so that no top-level ``migrations`` package can collide with another distribution's."""

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


def _build_wheel(tmp_path: Path) -> Path:
    """`pip wheel --no-deps` of a copy of the sources (the build writes into its tree)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in SOURCES:
        source = REPO / name
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
    (wheel,) = (tmp_path / "dist").glob("calmon-*.whl")
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
