"""The import graph of ``app`` points one way: api and commands -> services -> db, and a pure
metric engine that imports nothing else of the service.

Every module under ``calmon/`` is parsed with :mod:`ast`; every ``import`` and ``from ... import``
counts, at module level and inside functions or ``if TYPE_CHECKING:`` blocks alike. The rules:

- ``calmon.metrics`` (the metric engine) imports nothing from ``app`` but itself,
  ``calmon.arrays``, ``calmon.catalogue`` (names only) and ``calmon.verdict`` (the verdicts'
  codes, thresholds and predicates on numbers);
- ``calmon.db`` imports none of ``calmon.services``, ``calmon.api``, ``calmon.scheduler``,
  ``calmon.commands``;
- ``calmon.services`` imports none of ``calmon.api``, ``calmon.commands``, ``calmon.scheduler``;
- ``calmon.services`` imports of the metric engine only its entry points
  (:data:`SERVICE_ENGINE_ENTRY_POINTS`): the package ``calmon.metrics`` (the names it exports)
  and the modules ``window_evaluation`` (a window's evaluation, its pooled decision
  included), ``advice`` and ``recalibration``;
- ``calmon.scheduler`` imports neither ``calmon.api`` nor FastAPI;
- the web view (``calmon.api.routes.ui``, ``calmon.ui``) imports nothing of ``calmon.exporter``:
  both read stored windows through ``calmon.services.stored_windows``;
- a window's computation (``calmon.services.windows``) imports of the other services only the
  model registry (a model's configuration) and the service errors; the web view and the
  exporter import nothing of it (they read stored windows, never compute one);
- no window module is left flat in ``calmon.services`` (``window_*``): they live in
  ``calmon.services.windows``;
- the top-level parts of ``app`` (its subpackages and top-level modules) form no import cycle:
  every import between two parts of one strongly connected component is a violation;
- the metric engine, the offline report and the window record's builder
  (:data:`DATABASE_FREE`) reach neither ``calmon.db`` nor SQLAlchemy, directly or through
  anything they import (packages included): the builder takes the model's settings as the
  engine's frozen config, so the offline report builds records without a database row.

KNOWN_VIOLATIONS lists accepted exceptions, each with its reason (none today); the tests fail
on any violation outside that list and on any listed one that no longer exists, so the list
stays accurate.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "calmon"

#: violation -> why it is still there. A violation is "rule: importer -> imported".
KNOWN_VIOLATIONS: dict[str, str] = {}


def module_name(path: Path) -> str:
    """``calmon/a/b.py`` -> ``calmon.a.b``; ``calmon/a/__init__.py`` -> ``calmon.a``."""
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def app_modules() -> dict[str, Path]:
    """Every module of ``app`` by dotted name."""
    return {module_name(path): path for path in sorted(APP.rglob("*.py"))}


def imported_names(
    tree: ast.AST, module: str, *, is_package: bool, known: Iterable[str]
) -> set[str]:
    """The modules ``module`` imports anywhere in ``tree`` (dotted names, absolute).

    ``from a.b import c`` imports ``a.b``, and ``a.b.c`` too when that is a module of ``known``;
    relative imports are resolved against ``module`` (a package resolves against itself).
    """
    modules = set(known)
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            out.add(base)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if candidate in modules:
                    out.add(candidate)
    return out


def import_graph() -> dict[str, set[str]]:
    """module of ``app`` -> the modules (of ``app`` or not) it imports."""
    modules = app_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[name] = imported_names(
            tree, name, is_package=path.name == "__init__.py", known=modules
        )
    return graph


def within(name: str, *prefixes: str) -> bool:
    """Whether dotted ``name`` is one of ``prefixes`` or inside one of them."""
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def part(name: str) -> str:
    """The top-level part of ``app`` a module belongs to: ``calmon.services.windows.compute`` ->
    ``calmon.services``; ``app`` itself is its own part."""
    return ".".join(name.split(".")[:2])


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph`` (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    nodes = set(graph) | {m for targets in graph.values() for m in targets}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


#: (rule, importers, forbidden imports, exceptions to the forbidden ones), as dotted prefixes.
RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "metrics",
        ("calmon.metrics",),
        ("calmon",),
        ("calmon.metrics", "calmon.arrays", "calmon.catalogue", "calmon.verdict"),
    ),
    (
        "db",
        ("calmon.db",),
        ("calmon.services", "calmon.api", "calmon.scheduler", "calmon.commands"),
        (),
    ),
    ("services", ("calmon.services",), ("calmon.api", "calmon.commands", "calmon.scheduler"), ()),
    ("scheduler", ("calmon.scheduler",), ("calmon.api", "fastapi"), ()),
    # the web view reads stored windows through calmon.services.stored_windows, as the
    # exporter does, never through the exporter
    ("web view", ("calmon.api.routes.ui", "calmon.ui"), ("calmon.exporter",), ()),
    # a window's computation needs of the other services a model's configuration only
    (
        "windows",
        ("calmon.services.windows",),
        ("calmon.services",),
        ("calmon.services.windows", "calmon.services.model_registry", "calmon.services.errors"),
    ),
    # the readers of stored windows never reach into their computation
    (
        "stored reads",
        ("calmon.api.routes.ui", "calmon.ui", "calmon.exporter"),
        ("calmon.services.windows",),
        (),
    ),
)


#: What ``calmon.services`` may import of the metric engine, exactly (a module inside one of these
#: is not allowed): the package, whose names are what the service needs to build and cache
#: reference sets and to check a configuration, and the engine's entry modules (a window's
#: evaluation with its pooled decision, the advice and the recalibration map).
SERVICE_ENGINE_ENTRY_POINTS: frozenset[str] = frozenset(
    {
        "calmon.metrics",
        "calmon.metrics.window_evaluation",
        "calmon.metrics.advice",
        "calmon.metrics.recalibration",
    }
)


#: What never reaches the database, directly or through what it imports: the metric engine, the
#: offline report, and the window record's builder (``calmon.services.windows.record``) with the
#: reference sets it reads (``calmon.services.windows.reference_cache``).
DATABASE_FREE: tuple[str, ...] = (
    "calmon.metrics",
    "calmon.offline",
    "calmon.services.windows.record",
    "calmon.services.windows.reference_cache",
)
#: What :data:`DATABASE_FREE` must not reach.
DATABASE: tuple[str, ...] = ("calmon.db", "sqlalchemy", "alembic")


def reachable(graph: Mapping[str, Iterable[str]], roots: Iterable[str]) -> set[str]:
    """Every module importing ``roots`` loads: what they import, what that imports, and so on,
    with the packages each one lives in (importing ``a.b.c`` runs ``a`` and ``a.b`` first)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        todo.extend(graph.get(name, ()))
    return seen


def database_reaches(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """The modules of :data:`DATABASE` that some module of :data:`DATABASE_FREE` loads."""
    roots = [name for name in graph if within(name, *DATABASE_FREE)]
    return sorted(name for name in reachable(graph, roots) if within(name, *DATABASE))


def layering_violations(graph: Mapping[str, Iterable[str]]) -> set[str]:
    """Every import that breaks one of RULES, or imports into ``calmon.services`` an engine
    module other than SERVICE_ENGINE_ENTRY_POINTS (rule ``engine entry``), as
    ``"rule: importer -> imported"``."""
    found: set[str] = set()
    for importer, targets in graph.items():
        if within(importer, "calmon.services"):
            found.update(
                f"engine entry: {importer} -> {target}"
                for target in targets
                if within(target, "calmon.metrics") and target not in SERVICE_ENGINE_ENTRY_POINTS
            )
        for rule, importers, forbidden, allowed in RULES:
            if not within(importer, *importers):
                continue
            found.update(
                f"{rule}: {importer} -> {target}"
                for target in targets
                if within(target, *forbidden) and not within(target, *allowed)
            )
    return found


def cycle_violations(graph: Mapping[str, Iterable[str]]) -> set[str]:
    """Every import between two top-level parts of ``app`` that lie on one import cycle, as
    ``"cycle: importer -> imported"`` (module names)."""
    parts: dict[str, set[str]] = {}
    for importer, targets in graph.items():
        for target in targets:
            if within(target, "calmon") and part(target) != part(importer):
                parts.setdefault(part(importer), set()).add(part(target))
    component_of = {
        member: frozenset(component)
        for component in strongly_connected(parts)
        if len(component) > 1
        for member in component
    }
    found: set[str] = set()
    for importer, targets in graph.items():
        for target in targets:
            source, dest = part(importer), part(target)
            same_cycle = source in component_of and component_of[source] == component_of.get(dest)
            if within(target, "calmon") and source != dest and same_cycle:
                found.add(f"cycle: {importer} -> {target}")
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_parser_sees_imports_at_module_level_and_inside_functions(
    graph: dict[str, set[str]],
) -> None:
    assert "calmon.metrics.prepared" in graph["calmon.metrics.evaluation"]
    # ``check_pi0`` is imported inside a function of the command, from the prepared set.
    assert "calmon.metrics.prepared" in graph["calmon.commands.evaluate"]
    assert {"calmon.arrays", "numpy"} <= graph["calmon.metrics.ranking"]
    assert len(graph) > 50


def test_relative_imports_resolve_against_the_package() -> None:
    tree = ast.parse("from . import b\nfrom .c import d\nfrom .. import e\n")
    known = {"calmon.x.b", "calmon.x.c", "calmon.e"}
    assert imported_names(tree, "calmon.x.a", is_package=False, known=known) == {
        "calmon.x",
        "calmon.x.b",
        "calmon.x.c",
        "calmon",
        "calmon.e",
    }
    assert imported_names(tree, "calmon.x", is_package=True, known=known) == {
        "calmon.x",
        "calmon.x.b",
        "calmon.x.c",
        "calmon",
        "calmon.e",
    }


def test_strongly_connected_components_find_cycles_and_only_them() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    components = sorted(sorted(c) for c in strongly_connected(graph))
    assert components == [["a", "b", "c"], ["d", "e"], ["f"]]
    cycles = cycle_violations(
        {"calmon.a.x": {"calmon.b.y"}, "calmon.b.y": {"calmon.a.z"}, "calmon.c": {"calmon.a"}}
    )
    assert cycles == {"cycle: calmon.a.x -> calmon.b.y", "cycle: calmon.b.y -> calmon.a.z"}


def test_the_rules_catch_each_kind_of_violation() -> None:
    graph = {
        "calmon.metrics.x": {"calmon.metrics.y", "calmon.arrays", "calmon.db.models", "numpy"},
        "calmon.db.models": {"calmon.services.a"},
        "calmon.services.a": {"calmon.scheduler.planning", "calmon.db.models"},
        "calmon.scheduler.runner": {"fastapi", "calmon.services.a"},
        "calmon.api.routes.ui": {"calmon.exporter.snapshot", "calmon.services.a"},
        "calmon.services.windows.compute": {
            "calmon.services.windows.rows",
            "calmon.services.model_registry",
            "calmon.services.retention",
        },
        "calmon.exporter.snapshot": {
            "calmon.services.stored_windows",
            "calmon.services.windows.results",
        },
    }
    assert layering_violations(graph) == {
        "metrics: calmon.metrics.x -> calmon.db.models",
        "db: calmon.db.models -> calmon.services.a",
        "services: calmon.services.a -> calmon.scheduler.planning",
        "scheduler: calmon.scheduler.runner -> fastapi",
        "web view: calmon.api.routes.ui -> calmon.exporter.snapshot",
        "windows: calmon.services.windows.compute -> calmon.services.retention",
        "stored reads: calmon.exporter.snapshot -> calmon.services.windows.results",
    }


def test_the_services_reach_the_engine_only_through_its_entry_points() -> None:
    graph = {
        "calmon.services.a": {
            "calmon.metrics",
            "calmon.metrics.window_evaluation",
            "calmon.metrics.ranking",
        },
        "calmon.services.b": {"calmon.metrics.prepared", "calmon.metrics.advice"},
        "calmon.api.c": {"calmon.metrics.prepared"},
    }
    assert layering_violations(graph) == {
        "engine entry: calmon.services.a -> calmon.metrics.ranking",
        "engine entry: calmon.services.b -> calmon.metrics.prepared",
    }


def test_every_engine_entry_point_is_used_by_the_services(graph: dict[str, set[str]]) -> None:
    """The list stays as short as the code allows: each entry is imported by a service."""
    used = {
        target
        for importer, targets in graph.items()
        if within(importer, "calmon.services")
        for target in targets
        if within(target, "calmon.metrics")
    }
    assert used == SERVICE_ENGINE_ENTRY_POINTS


def test_the_metric_engine_imports_only_itself_and_the_array_aliases(
    graph: dict[str, set[str]],
) -> None:
    found = {
        v for v in layering_violations(graph) | cycle_violations(graph) if "calmon.metrics" in v
    }
    assert found == set()
    assert not any("calmon.metrics" in known for known in KNOWN_VIOLATIONS)


def test_no_import_breaks_the_layering_beyond_the_known_violations(
    graph: dict[str, set[str]],
) -> None:
    found = layering_violations(graph) | cycle_violations(graph)
    assert sorted(found - KNOWN_VIOLATIONS.keys()) == []


def test_every_known_violation_still_exists(graph: dict[str, set[str]]) -> None:
    found = layering_violations(graph) | cycle_violations(graph)
    assert sorted(KNOWN_VIOLATIONS.keys() - found) == []


def test_the_window_modules_live_in_their_package(graph: dict[str, set[str]]) -> None:
    services = {name for name in graph if within(name, "calmon.services")}
    assert sorted(n for n in services if n.startswith("calmon.services.window_")) == []
    assert {
        "calmon.services.windows.compute",
        "calmon.services.windows.locks",
        "calmon.services.windows.planning",
        "calmon.services.windows.rows",
    } <= services


def test_the_metric_engine_has_no_import_cycle_inside(graph: dict[str, set[str]]) -> None:
    engine = {
        name: {t for t in targets if within(t, "calmon.metrics")}
        for name, targets in graph.items()
        if within(name, "calmon.metrics")
    }
    assert [sorted(c) for c in strongly_connected(engine) if len(c) > 1] == []


def test_reachability_follows_imports_and_the_packages_they_live_in() -> None:
    graph = {"calmon.offline.a": {"calmon.ui.b"}, "calmon.ui.b": {"calmon.db.models"}}
    assert database_reaches(graph) == ["calmon.db", "calmon.db.models"]
    assert database_reaches({"calmon.services.windows.record": {"calmon.x"}, "calmon": {"c"}}) == []
    via_package = {
        "calmon.offline.a": {"calmon.services.windows.record"},
        "calmon.services": {"sqlalchemy"},
    }
    assert database_reaches(via_package) == ["sqlalchemy"]


def test_the_engine_the_offline_report_and_the_record_builder_never_reach_the_database(
    graph: dict[str, set[str]],
) -> None:
    assert {"calmon.offline.html_report", "calmon.services.windows.record"} <= graph.keys()
    assert "calmon.services.windows.record" in graph["calmon.offline.html_report"]
    assert database_reaches(graph) == []
