"""calmon-client is a package of its own that needs httpx only: its pyproject.toml says so,
its modules import nothing else outside the standard library (but the optional pyarrow, in the
one module that encodes Arrow bodies, guarded), and the httpx that calmon's lock pins lies in its
range."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from tests.unit.test_lock import parse_lock

REPO = Path(__file__).resolve().parents[3]
CLIENT = REPO / "client"


def test_pyproject_declares_httpx_only() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == "calmon-client"
    requirements = [Requirement(r) for r in project["dependencies"]]
    assert [r.name for r in requirements] == ["httpx"]
    locked, _ = parse_lock((REPO / "requirements" / "runtime.txt").read_text())["httpx"]
    assert requirements[0].specifier.contains(locked)
    assert not requirements[0].specifier.contains(Version("1.0"))


def test_pyarrow_is_an_optional_extra_in_calmons_range() -> None:
    client = tomllib.loads((CLIENT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    server = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    [extra] = client["optional-dependencies"]["arrow"]
    assert extra == server["optional-dependencies"]["arrow"][0]
    assert Requirement(extra).name == "pyarrow"


def test_modules_import_the_standard_library_and_httpx_only() -> None:
    allowed = set(sys.stdlib_module_names) | {"httpx", "calmon_client", "__future__"}
    arrow = (CLIENT / "calmon_client" / "_arrow.py").read_text(encoding="utf-8")
    assert "try:\n    import pyarrow\nexcept ImportError:" in arrow
    modules = sorted((CLIENT / "calmon_client").glob("*.py"))
    assert len(modules) >= 4
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, path
                names = [node.module or ""]
            for name in names:
                optional = path.name == "_arrow.py" and name == "pyarrow"
                assert optional or name.split(".")[0] in allowed, (path.name, name)
    assert (CLIENT / "calmon_client" / "py.typed").exists()
