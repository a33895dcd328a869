"""The repository's Python trees import one way: ``tests`` and ``bench`` -> ``harness`` and
``studies`` -> ``calmon``.

- ``tests`` and ``bench`` import each other in neither direction: what a benchmark shares
  with the tests lives in ``harness`` (the running stack, Chromium, records of the documented
  shape, the Prometheus contract) or ``studies`` (the studies the benchmarks print in full and
  the slow tests run small), and both import it from there;
- ``harness`` and ``studies`` import neither ``tests`` nor ``bench``, nor each other;
- ``calmon`` imports none of them: the service runs without them.

Every module is parsed with :mod:`ast` (:func:`~tests.unit.test_import_graph.imported_names`);
every ``import`` counts, at module level and inside functions or ``if TYPE_CHECKING:`` blocks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_import_graph import imported_names

ROOT = Path(__file__).resolve().parents[2]

#: top-level tree -> the top-level trees it must not import
FORBIDDEN = {
    "tests": ("bench",),
    "bench": ("tests",),
    "harness": ("tests", "bench", "studies"),
    "studies": ("tests", "bench", "harness"),
    "calmon": ("tests", "bench", "harness", "studies"),
}


def imports_of(tree: str) -> dict[str, set[str]]:
    """Module under ``tree`` (a top-level folder of the repository) -> the modules it imports."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / tree).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        syntax = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        out[module] = imported_names(syntax, module, is_package=is_package, known=())
    return out


def offenders(tree: str, forbidden: tuple[str, ...]) -> list[str]:
    """``importer -> imported`` for each import under ``tree`` of a package in ``forbidden``."""
    return sorted(
        f"{importer} -> {imported}"
        for importer, imported_modules in imports_of(tree).items()
        for imported in imported_modules
        if imported.split(".")[0] in forbidden
    )


def test_the_parser_sees_the_imports_of_each_tree() -> None:
    tests = imports_of("tests")
    assert "studies.coverage" in tests["tests.unit.metrics.test_interval_coverage"]
    assert "harness.processes" in tests["tests.support"]
    assert "tests.support.databases" in tests["tests.integration.conftest"]
    bench = imports_of("bench")
    assert "harness.processes" in bench["bench.ui"]
    assert "studies.label_shift" in bench["bench.label_shift"]
    assert "harness.processes" in imports_of("harness")["harness.stack"]
    assert "studies.coverage" in imports_of("studies")["studies.decision"]
    assert len(imports_of("calmon")) > 50


def test_an_import_inside_a_function_counts() -> None:
    module = "tests.unit.example"
    syntax = ast.parse("def f() -> None:\n    from bench.ui import main\n")
    assert "bench.ui" in imported_names(syntax, module, is_package=False, known=())


@pytest.mark.parametrize(("tree", "forbidden"), FORBIDDEN.items())
def test_a_tree_imports_none_of_those_it_must_not(tree: str, forbidden: tuple[str, ...]) -> None:
    assert offenders(tree, forbidden) == []


def test_every_top_level_python_tree_has_its_rule() -> None:
    trees = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in ("migrations", "examples")
    }
    assert trees == set(FORBIDDEN)
