"""Backend differences live in ``calmon.db``: no module elsewhere in ``app`` reads the
dialect's name (each asks :mod:`calmon.db.backend` a named question instead)."""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).resolve().parents[3] / "calmon"


def test_no_module_outside_app_db_reads_the_dialect_name() -> None:
    readers = sorted(
        str(path.relative_to(APP.parent))
        for path in APP.rglob("*.py")
        if "dialect.name" in path.read_text(encoding="utf-8")
        and path.relative_to(APP).parts[0] != "db"
    )
    assert readers == []


def test_the_check_sees_a_reader() -> None:
    db = APP / "db"
    assert any("dialect.name" in path.read_text(encoding="utf-8") for path in db.rglob("*.py"))
