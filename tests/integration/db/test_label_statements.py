"""The SQLite label statements find each staged id by the primary key.

With a condition on ``ts`` the planner may prefer the (model_id, ts) index: it then scans
every prediction of the model in range and searches the unindexed stage table for each, so a
batch of 5,000 labels on a model with 120,000 predictions took about 20 s instead of
milliseconds. The plans must drive from the stage instead.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, create_engine

from calmon.db.ingest_statements import EXPIRED_LABELS, UPDATE_LABELS, label_stage
from tests.support.databases import upgraded


def _plan(connection: Connection, statement: str) -> str:
    rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}").all()
    return " | ".join(str(row[-1]) for row in rows)


def test_label_updates_search_predictions_by_primary_key(tmp_path: Path) -> None:
    url = upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    engine = create_engine(url)
    with engine.begin() as connection:
        label_stage.create(connection)
        for statement in (UPDATE_LABELS, EXPIRED_LABELS):
            sql = str(statement.compile(dialect=connection.dialect))
            plan = _plan(connection, sql.replace("?", "NULL"))
            assert "SCAN s" in plan, plan
            assert "ix_predictions_model_id_ts" not in plan, plan
            assert "(model_id=? AND client_id=?)" in plan, plan
    engine.dispose()
