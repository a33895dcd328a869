"""One home for the HTTP client of the calmon API: ``calmon_client`` (``client/``).

The commands that speak to a running server (`calmon simulate`, `calmon windows`) use
:class:`calmon_client.Api`, so the server package builds no HTTP client of its own and holds no
retry policy of its own: no module under ``calmon/`` imports httpx (hence none constructs an
``httpx.Client`` or ``httpx.AsyncClient``), and only the client-side parts of the package
(``calmon.commands``, ``calmon.simulation``) import ``calmon_client``; the service itself
(API, services, scheduler, exporter, storage) never calls a server.

Every module is parsed with :mod:`ast`; imports count wherever they are (module level,
functions, ``if TYPE_CHECKING:`` blocks).
"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "calmon"
#: the parts of the package that act as clients of a running server
CLIENT_SIDE = ("calmon.commands", "calmon.simulation")
#: constructors of an HTTP client
CONSTRUCTORS = frozenset({"Client", "AsyncClient"})


def _module(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def http_problems(source: str) -> list[str]:
    """What in ``source`` builds or could build an httpx client: an import of httpx (or of a
    submodule), and a call of ``Client(``/``AsyncClient(`` reached through httpx."""
    tree = ast.parse(source)
    problems: list[str] = []
    #: names bound to the httpx module, and to its client classes
    httpx_names: set[str] = set()
    constructors: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "httpx":
                    problems.append(f"line {node.lineno}: import {alias.name}")
                    httpx_names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "httpx":
            problems.append(f"line {node.lineno}: from {node.module} import ...")
            constructors.update(
                alias.asname or alias.name for alias in node.names if alias.name in CONSTRUCTORS
            )
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in CONSTRUCTORS
            and isinstance(func.value, ast.Name)
            and func.value.id in httpx_names
        ) or (isinstance(func, ast.Name) and func.id in constructors):
            problems.append(f"line {node.lineno}: an httpx client is built")
    return problems


def client_imports(source: str) -> list[int]:
    """The lines of ``source`` that import ``calmon_client``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            if any(alias.name.split(".")[0] == "calmon_client" for alias in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == (
            "calmon_client"
        ):
            lines.append(node.lineno)
    return lines


def test_the_detectors_see_what_they_look_for() -> None:
    source = (
        "import httpx\nfrom httpx import AsyncClient as A\n"
        "def f():\n    httpx.Client(base_url='x')\n    A()\n    import calmon_client\n"
    )
    assert http_problems(source) == [
        "line 1: import httpx",
        "line 2: from httpx import ...",
        "line 4: an httpx client is built",
        "line 5: an httpx client is built",
    ]
    assert http_problems("from calmon_client import Api\nApi(url='x')\n") == []
    assert client_imports(source) == [6]
    assert client_imports("from calmon_client._core import MAX_BATCH\n") == [1]


def test_the_server_package_builds_no_http_client() -> None:
    found = {
        _module(path): problems
        for path in sorted(APP.rglob("*.py"))
        if (problems := http_problems(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "HTTP requests of calmon go through calmon_client.Api"


def test_only_the_client_side_of_the_package_uses_the_client() -> None:
    users = {
        _module(path)
        for path in sorted(APP.rglob("*.py"))
        if client_imports(path.read_text(encoding="utf-8"))
    }
    assert users, "calmon simulate and calmon windows use calmon_client.Api"
    outside = {m for m in users if not m.startswith(CLIENT_SIDE)}
    assert outside == set()
    assert {"calmon.commands.windows", "calmon.simulation.sender"} <= users
