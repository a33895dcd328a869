"""The repository's three Python trees import one way: ``tests`` -> ``bench`` -> ``calmon``.

- no module under ``bench/`` imports ``tests``: what a benchmark shares with the tests (the
  studies, the running stack, records of the documented shape) lives under ``bench/`` and the
  tests import it from there;
- no module under ``calmon/`` imports ``bench`` or ``tests``: the service runs without them.

Every module is parsed with :mod:`ast` (:func:`~tests.unit.test_import_graph.imported_names`);
every ``import`` counts, at module level and inside functions or ``if TYPE_CHECKING:`` blocks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_import_graph import imported_names

ROOT = Path(__file__).resolve().parents[2]


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
    assert "bench.studies.coverage" in tests["tests.unit.metrics.test_interval_coverage"]
    assert "tests.support.databases" in tests["tests.integration.conftest"]
    assert "bench.harness.processes" in imports_of("bench")["bench.ui"]
    assert len(imports_of("calmon")) > 50


@pytest.mark.parametrize(
    ("tree", "forbidden"), [("bench", ("tests",)), ("calmon", ("bench", "tests"))]
)
def test_a_tree_imports_none_of_those_above_it(tree: str, forbidden: tuple[str, ...]) -> None:
    assert offenders(tree, forbidden) == []
