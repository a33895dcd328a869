"""The wheel the image installs and users install beside their own code: one top-level
package, ``calmon``, with the Alembic migrations inside it as ``calmon.migrations`` (setup.py
maps the repository's ``migrations/`` folder there), so that no top-level ``migrations``
package can collide with another distribution's. Installed into a fresh environment, the wheel
alone gives the public API (``import calmon``, ``calmon.__version__``, ``evaluate_frame``,
``report``) and the ``calmon`` command, whose commands that speak to a server send through its
dependency calmon-client, built from ``client/`` and installed beside it. And calmon-client's
wheel: typed (``py.typed``) and alone."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from calmon.db.migrate import MIGRATIONS_PACKAGE, migrations_directory
from harness.processes import free_port
from tests.integration.deploy.tools import REPO

#: what the Dockerfile copies into the build context for calmon's wheel
SOURCES = ("pyproject.toml", "setup.py", "README.md", "calmon", "migrations")
#: the folder of calmon-client, which the Dockerfile copies too, and what its wheel is built from
CLIENT = "client"
CLIENT_SOURCES = ("pyproject.toml", "README.md", "calmon_client")


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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once for the tests of this module that need it."""
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def client_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """calmon-client's wheel, built once from ``client/``."""
    return _build_wheel(tmp_path_factory.mktemp("client-wheel"), REPO / CLIENT, CLIENT_SOURCES)


# slow: builds a wheel with pip
@pytest.mark.slow
def test_wheel_ships_the_migrations_inside_calmon(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["calmon"]
    assert {"calmon/migrations/__init__.py", "calmon/migrations/env.py"} <= names
    assert "calmon/migrations/script.py.mako" in names
    assert "calmon/py.typed" in names  # PEP 561: code using calmon is checked against it
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


#: run by the fresh environment's Python: what a user's code sees after ``pip install``
FRESH_CHECK = """
import json, sys
import calmon
loaded = sorted(m for m in ("fastapi", "sqlalchemy", "pandas", "numpy") if m in sys.modules)
from calmon import evaluate_frame, report
from importlib.metadata import distribution
from calmon.db.migrate import migrations_directory
try:
    import app
    app_error = None
except ModuleNotFoundError as exc:
    app_error = exc.name
frame = {"score": [0.1, 0.4, 0.35, 0.8] * 25, "label": [0, 0, 1, None] * 25}
record = evaluate_frame(frame, pi0=[0.1])
page = report(frame, frame).html
dist = distribution("calmon")
import calmon_client
print(json.dumps({
    "file": calmon.__file__,
    "version": calmon.__version__,
    "loaded_by_import": loaded,
    "app_error": app_error,
    "record": [record["n"], record["unlabelled"], sorted(record["calibrated"])],
    "page": page[:15],
    "migrations": str(migrations_directory()),
    "dist_at": str(dist.locate_file("")),
    "top_level": dist.read_text("top_level.txt").split(),
    "requires": dist.requires,
    "client_file": calmon_client.__file__,
    "client_version": distribution("calmon-client").version,
}))
"""


def _fresh_environment(root: Path, *wheels: Path) -> Path:
    """A new virtual environment with ``wheels`` installed by pip (``--no-deps --no-index``); their
    dependencies, the locked runtime ones, come from this test environment's site-packages,
    which a ``.pth`` file puts after its own on the path (a plain path entry: the ``.pth``
    files there, such as the editable install of this checkout, are not run). Returns its
    Python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120
    )
    python = root / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--disable-pip-version-check", "--quiet", *map(str, wheels)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    dependencies = sysconfig.get_path("purelib")
    (Path(purelib) / "locked-dependencies.pth").write_text(dependencies + "\n", encoding="utf-8")
    return python


# slow: builds a wheel and installs it into a new environment
@pytest.mark.slow
def test_a_fresh_install_of_the_wheel_gives_the_public_api(
    wheel: Path, client_wheel: Path, tmp_path: Path
) -> None:
    root = tmp_path / "venv"
    python = _fresh_environment(root, wheel, client_wheel)
    # -I: neither this checkout (the working directory, PYTHONPATH) nor the user's site
    done = subprocess.run(
        [str(python), "-I", "-c", FRESH_CHECK],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    installed = str(root.resolve())
    assert seen["file"].startswith(installed), seen["file"]
    assert seen["dist_at"].startswith(installed)
    assert seen["migrations"].startswith(installed)
    assert seen["version"] == version
    assert seen["loaded_by_import"] == []
    assert seen["app_error"] == "app"
    assert seen["record"] == [75, 25, ["0.1"]]
    assert seen["page"] == "<!doctype html>"
    assert seen["top_level"] == ["calmon"]
    command = subprocess.run(
        [str(root / "bin" / "calmon"), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=tmp_path,
    )
    assert command.stdout.strip() == f"calmon {version}"
    # calmon requires calmon-client within a range holding the version built from client/,
    # and its commands that speak to a server find it in the environment
    client_version = tomllib.loads((REPO / CLIENT / "pyproject.toml").read_text("utf-8"))[
        "project"
    ]["version"]
    assert seen["client_file"].startswith(installed), seen["client_file"]
    assert seen["client_version"] == client_version
    (client,) = [Requirement(r) for r in seen["requires"] if r.startswith("calmon-client")]
    assert client.specifier.contains(client_version)
    unreachable = subprocess.run(
        [str(root / "bin" / "calmon"), "windows", "m", "--url", f"http://127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert unreachable.returncode == 1, unreachable.stderr
    assert ": ConnectError" in unreachable.stderr
    _check_user_code_types(python, tmp_path)


#: a user's module: right where the types say so, and one wrong key
USER_CODE = """
from typing import assert_type

import calmon
from calmon import evaluate_frame, report
from calmon.records import EvaluationRecord, WindowRecord

frame = {"score": [0.2, 0.9], "label": [0, 1]}
record = assert_type(evaluate_frame(frame, pi0=[0.01]), EvaluationRecord)
roc_auc: float | None = record["regular"]["roc_auc"]
windows: list[WindowRecord] = report(frame, frame).records
version: str = calmon.__version__
record["no_such_key"]
"""


def _check_user_code_types(python: Path, directory: Path) -> None:
    """mypy --strict, run on a user's module against the installed package (its ``py.typed``),
    sees the root names' types: only the wrong key is an error."""
    user = directory / "user_code.py"
    user.write_text(USER_CODE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--python-executable", str(python),
         "--cache-dir", str(directory / "mypy-cache"), "--no-error-summary", user.name],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=directory,
    )  # fmt: skip
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, done.stdout + done.stderr
    assert '"EvaluationRecord" has no key "no_such_key"' in errors[0]


# slow: builds a wheel with pip
@pytest.mark.slow
def test_the_client_wheel_is_typed_and_holds_its_package_alone(client_wheel: Path) -> None:
    client = REPO / CLIENT
    wheel_path = client_wheel
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
    required = [r for r in requires if "extra ==" not in r]
    optional = [r for r in requires if "extra ==" in r]
    assert [r.split(">")[0].split("<")[0] for r in required] == ["httpx"]
    # pyarrow only with the ``arrow`` extra (Arrow bodies; JSON without it)
    assert [re.split(r"[<>=;, ]", r)[0] for r in optional] == ["pyarrow"]
    assert 'extra == "arrow"' in optional[0]
