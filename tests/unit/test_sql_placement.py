"""SQL is written in one layer: ``calmon/db/`` and the one storage service named in
:data:`STORAGE_SERVICES` (the reads of stored windows), with the reason it reads tables itself.

Every module under ``calmon/`` is parsed with :mod:`ast`. What counts as SQL:

- a call of a statement builder of SQLAlchemy (``text(``, ``select(``, ``insert(``,
  ``update(``, ``delete(``, ``union(``, ``exists(`` …), by the name it was imported under from
  ``sqlalchemy`` or through a module alias (``sa.select(``), or of ``psycopg.sql`` (``SQL(``);
- ``exec_driver_sql(``;
- a string (or an f-string's text) that reads as a statement: it begins with ``SELECT``,
  ``INSERT INTO``, ``UPDATE … SET``, ``DELETE FROM``, ``WITH … AS``, ``CREATE``, ``ALTER``,
  ``DROP``, ``BEGIN``, ``PRAGMA`` …; docstrings are prose, not statements, and do not count.

A method of the same name on another object (``digest.update(``, ``np.insert(``) is not SQL.
The list of allowances is exact: a named module that no longer holds SQL fails the test too.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

CALMON = Path(__file__).resolve().parents[2] / "calmon"

#: statement builders of SQLAlchemy (``sqlalchemy``, ``sqlalchemy.dialects.*``, ``.sql``)
SQLALCHEMY_BUILDERS = frozenset(
    {
        "text",
        "select",
        "insert",
        "update",
        "delete",
        "union",
        "union_all",
        "intersect",
        "except_",
        "exists",
        "values",
        "lateral",
        "literal_column",
        "table",
        "tuple_",
    }
)
#: statement builders of ``psycopg.sql``
PSYCOPG_BUILDERS = frozenset({"SQL", "Identifier", "Composed"})

_STATEMENT = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\b|"
    r"CREATE\s+(TEMP\w*\s+)?(TABLE|INDEX|TRIGGER|FUNCTION|VIEW)\b|ALTER\s+TABLE\s|"
    r"DROP\s+(TABLE|INDEX|TRIGGER|FUNCTION|VIEW)\b|TRUNCATE\s|COPY\s+\w+|LOCK\s+TABLE\s|"
    r"BEGIN\b|PRAGMA\s|VACUUM\b|ANALYZE\b)"
)

#: the storage services: modules outside ``calmon/db/`` that hold SQL, and why each may
STORAGE_SERVICES: dict[str, str] = {
    "calmon/services/stored_windows.py": (
        "every read of stored windows that the exporter and the web view make, in one place"
    ),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree`` (module, classes, functions)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and ast.get_docstring(node, clean=False) is not None
        ):
            first = node.body[0]
            assert isinstance(first, ast.Expr)
            found.add(id(first.value))
    return found


def sql_in(source: str) -> list[str]:
    """Where ``source`` (a module's text) writes SQL, as ``"line: what"``."""
    tree = ast.parse(source)
    builders: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            for alias in node.names:
                if root == "sqlalchemy" and alias.name in SQLALCHEMY_BUILDERS:
                    builders.add(alias.asname or alias.name)
                elif root == "psycopg" and alias.name == "sql":
                    modules.add(alias.asname or alias.name)
                elif node.module == "psycopg.sql" and alias.name in PSYCOPG_BUILDERS:
                    builders.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sqlalchemy" or alias.name == "psycopg.sql":
                    modules.add(alias.asname or alias.name)
    docstrings = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in builders:
                found.append(f"{node.lineno}: {func.id}(")
            elif isinstance(func, ast.Attribute):
                owner = ast.unparse(func.value)
                if func.attr == "exec_driver_sql":
                    found.append(f"{node.lineno}: exec_driver_sql(")
                elif owner in modules and (
                    func.attr in SQLALCHEMY_BUILDERS or func.attr in PSYCOPG_BUILDERS
                ):
                    found.append(f"{node.lineno}: {owner}.{func.attr}(")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _STATEMENT.match(node.value)
        ):
            found.append(f"{node.lineno}: {node.value.strip()[:40]!r}")
    return sorted(found, key=lambda where: (int(where.split(":")[0]), where))


@functools.cache
def _modules() -> dict[str, str]:
    """Every module of ``calmon`` by its path relative to the repository."""
    return {
        path.relative_to(CALMON.parent).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(CALMON.rglob("*.py"))
    }


def test_the_scan_finds_each_form_of_sql() -> None:
    source = '''
import sqlalchemy as sa
from psycopg import sql as pg_sql
from sqlalchemy import select, text as sql_text
from sqlalchemy.dialects.postgresql import insert

def f(session, table, name):
    """SELECT in a docstring is prose."""
    session.execute(sql_text("SELECT 1"))
    session.scalars(select(table))
    insert(table)
    sa.delete(table)
    pg_sql.SQL("DROP TABLE {}").format(pg_sql.Identifier(name))
    session.connection().exec_driver_sql("PRAGMA busy_timeout = 1")
    query = "UPDATE predictions SET label = 1"
    return f"DELETE FROM {name} WHERE true", query
'''
    assert sql_in(source) == [
        "9: 'SELECT 1'",
        "9: sql_text(",
        "10: select(",
        "11: insert(",
        "12: sa.delete(",
        "13: 'DROP TABLE {}'",
        "13: pg_sql.Identifier(",
        "13: pg_sql.SQL(",
        "14: 'PRAGMA busy_timeout = 1'",
        "14: exec_driver_sql(",
        "15: 'UPDATE predictions SET label = 1'",
        "16: 'DELETE FROM'",
    ]


def test_the_scan_leaves_prose_and_other_methods_alone() -> None:
    source = '''
"""SELECT … FOR SHARE, as the module says."""
import hashlib
import numpy as np

METHODS = frozenset({"GET", "DELETE"})

def f(values):
    """DELETE FROM nothing: a docstring."""
    digest = hashlib.sha256()
    digest.update(b"x")
    values.update({"a": 1})
    np.insert(np.zeros(2), 0, 1.0)
    return "select a model first", "Update the threshold"
'''
    assert sql_in(source) == []


@pytest.mark.parametrize("module", sorted(_modules()))
def test_sql_is_only_in_the_db_layer_and_the_storage_services(module: str) -> None:
    if module.startswith("calmon/db/") or module in STORAGE_SERVICES:
        return
    assert sql_in(_modules()[module]) == []


def test_every_storage_service_named_holds_sql_and_exists() -> None:
    """The allowances stay exact: a module moved or cleared of SQL leaves the list."""
    modules = _modules()
    assert [name for name in STORAGE_SERVICES if name not in modules] == []
    assert [name for name in STORAGE_SERVICES if not sql_in(modules[name])] == []


def test_the_db_layer_holds_the_statements_moved_out_of_the_services() -> None:
    """Retention's deletes, the leader lease, a window's claim and its transaction settings,
    the replica's lag, the models table, the web view's logins, the shared settings and every
    statement of a window's planning, reads and writes are statements of ``calmon/db/``; the
    calibration route reads its record through the storage service."""
    modules = _modules()
    for name in (
        "calmon/services/retention.py",
        "calmon/services/windows/locks.py",
        "calmon/services/windows/planning.py",
        "calmon/services/windows/rows.py",
        "calmon/services/windows/references.py",
        "calmon/services/windows/decisions.py",
        "calmon/services/windows/compute.py",
        "calmon/services/windows/results.py",
        "calmon/scheduler/lock.py",
        "calmon/scheduler/runner.py",
        "calmon/exporter/replica.py",
        "calmon/services/advice.py",
        "calmon/services/model_registry.py",
        "calmon/services/web_sessions.py",
        "calmon/services/retention_bound.py",
    ):
        assert sql_in(modules[name]) == [], name
    for name in (
        "calmon/db/expiry.py",
        "calmon/db/locks.py",
        "calmon/db/session.py",
        "calmon/db/model_rows.py",
        "calmon/db/web_sessions.py",
        "calmon/db/shared_settings.py",
        "calmon/db/window_states.py",
        "calmon/db/window_rows.py",
        "calmon/db/pools.py",
        "calmon/db/window_writes.py",
        "calmon/db/window_results.py",
    ):
        assert sql_in(modules[name]) != [], name
