"""PostgreSQL: daily partitions of predictions and the id registry prediction_keys.

``predictions`` becomes range-partitioned by ``ts`` (one partition per UTC day,
``predictions_yyyymmdd``, with local ``(model_id, ts)`` and ``(model_id, changed_at)``
indexes and no unique index); ``prediction_keys (model_id, client_id, ts)`` holds every stored
id with its event time, hash-partitioned on ``client_id``, and keeps ids unique per model across
days. Neither has a foreign key to ``models`` on PostgreSQL: the check costs some 3 µs per
row on every insert, ingestion only writes for a model it holds locked, and models are never
deleted (``docs/reference/storage.md``). Existing rows are moved: the old table is renamed,
partitions are made for the days it holds (and today's and the next 7), its rows are copied, and it
is dropped. The downgrade moves the rows back into one table, with its key and foreign key.
SQLite keeps its single table: nothing to do there.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

from alembic import op
from psycopg import sql as pg_sql
from sqlalchemy import text

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: hash partitions of the registry
KEY_PARTITIONS = 32
AHEAD_DAYS = 7
_COPY_COLUMNS = (
    "INSERT INTO predictions (model_id, client_id, ts, score, label, segment, received_at,"
    " labelled_at, changed_at) SELECT model_id, client_id, ts, score, label, segment,"
    " received_at, labelled_at, changed_at"
)
_OLD_INDEXES = (
    "pk_predictions",
    "ix_predictions_model_id_ts",
    "ix_predictions_model_id_changed_at",
)


def _execute(statement: pg_sql.Composable | str) -> None:
    """Run a composed statement on the migration's connection."""
    connection = op.get_bind()
    driver = connection.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor:
        cursor.execute(statement)


def _midnight(day: date) -> str:
    return datetime.combine(day, time(), tzinfo=UTC).isoformat()


def _create_day(day: date) -> None:
    _execute(
        pg_sql.SQL("CREATE TABLE {} PARTITION OF predictions FOR VALUES FROM ({}) TO ({})").format(
            pg_sql.Identifier(f"predictions_{day:%Y%m%d}"),
            pg_sql.Literal(_midnight(day)),
            pg_sql.Literal(_midnight(day + timedelta(days=1))),
        )
    )


#: the columns of ``predictions``, the same before and after the partitioning
_COLUMNS = (
    " model_id INTEGER NOT NULL,"
    " client_id VARCHAR(128) NOT NULL,"
    " ts TIMESTAMP WITH TIME ZONE NOT NULL,"
    " score DOUBLE PRECISION NOT NULL,"
    " label SMALLINT,"
    " segment VARCHAR(64),"
    " received_at TIMESTAMP WITH TIME ZONE NOT NULL,"
    " labelled_at TIMESTAMP WITH TIME ZONE,"
    " changed_at TIMESTAMP WITH TIME ZONE NOT NULL,"
)


def upgrade() -> None:
    """Partition ``predictions`` by day and fill the registry (PostgreSQL only)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE predictions RENAME TO predictions_single")
    for index in _OLD_INDEXES:
        op.execute(f"ALTER INDEX {index} RENAME TO {index}_single")
    op.execute(
        "CREATE TABLE predictions ("
        + _COLUMNS
        + " CONSTRAINT ck_predictions_label CHECK (label IN (0, 1))"
        ") PARTITION BY RANGE (ts)"
    )
    op.execute(
        "CREATE TABLE prediction_keys ("
        " model_id INTEGER NOT NULL,"
        " client_id VARCHAR(128) NOT NULL,"
        " ts TIMESTAMP WITH TIME ZONE NOT NULL,"
        " CONSTRAINT pk_prediction_keys PRIMARY KEY (model_id, client_id)"
        ") PARTITION BY HASH (client_id)"
    )
    for remainder in range(KEY_PARTITIONS):
        _execute(
            pg_sql.SQL(
                "CREATE TABLE {} PARTITION OF prediction_keys"
                " FOR VALUES WITH (MODULUS {}, REMAINDER {})"
            ).format(
                pg_sql.Identifier(f"prediction_keys_p{remainder:02d}"),
                pg_sql.Literal(KEY_PARTITIONS),
                pg_sql.Literal(remainder),
            )
        )
    today = datetime.now(UTC).date()
    days = {today + timedelta(days=k) for k in range(AHEAD_DAYS + 1)}
    stored = op.get_bind().execute(
        text("SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM predictions_single")
    )
    days.update(day for (day,) in stored)
    for day in sorted(days):
        _create_day(day)
    op.execute(
        "INSERT INTO prediction_keys (model_id, client_id, ts)"
        " SELECT model_id, client_id, ts FROM predictions_single"
    )
    op.execute(_COPY_COLUMNS + " FROM predictions_single ORDER BY model_id, ts")
    op.execute("DROP TABLE predictions_single")
    op.execute("CREATE INDEX ix_predictions_model_id_ts ON predictions (model_id, ts)")
    op.execute(
        "CREATE INDEX ix_predictions_model_id_changed_at ON predictions (model_id, changed_at)"
    )
    op.execute("ANALYZE predictions")
    op.execute("ANALYZE prediction_keys")


def downgrade() -> None:
    """Move the rows back into one table keyed by ``(model_id, client_id)``."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE predictions RENAME TO predictions_parted")
    for index in _OLD_INDEXES[1:]:
        op.execute(f"ALTER INDEX {index} RENAME TO {index}_parted")
    op.execute(
        "CREATE TABLE predictions ("
        + _COLUMNS
        + " CONSTRAINT pk_predictions PRIMARY KEY (model_id, client_id),"
        " CONSTRAINT ck_predictions_label CHECK (label IN (0, 1)),"
        " CONSTRAINT fk_predictions_model_id_models FOREIGN KEY (model_id)"
        " REFERENCES models (id) ON DELETE CASCADE"
        ")"
    )
    op.execute(_COPY_COLUMNS + " FROM predictions_parted")
    op.execute("DROP TABLE predictions_parted")
    op.execute("DROP TABLE prediction_keys")
    op.execute("CREATE INDEX ix_predictions_model_id_ts ON predictions (model_id, ts)")
    op.execute(
        "CREATE INDEX ix_predictions_model_id_changed_at ON predictions (model_id, changed_at)"
    )
