"""Storage statements of ingestion: the per-connection stage tables and their loading (binary
``COPY`` on PostgreSQL, written from the batch's columns; ``executemany`` on SQLite), the
model's advisory lock, and the SQL texts that move a staged batch into ``predictions`` (one
table on SQLite; on PostgreSQL day partitions and the id registry ``prediction_keys``) and
labels onto stored predictions.

No value is ever part of a statement's text. The statements, their order and their locks are in
``docs/reference/storage.md`` ("Ingestion path").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql as pg_sql
from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Double,
    MetaData,
    SmallInteger,
    Table,
    Text,
    bindparam,
    insert,
    text,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateTable
from sqlalchemy.sql.selectable import TextualSelect

from calmon.db import locks
from calmon.db.models import UTCDateTime
from calmon.db.stage_columns import StageColumn, binary_copy, column_rows

_stage_metadata = MetaData()
prediction_stage = Table(
    "calmon_prediction_stage",
    _stage_metadata,
    Column("client_id", Text),
    Column("ts", UTCDateTime()),
    Column("score", Double),
    Column("label", SmallInteger),
    Column("segment", Text),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
label_stage = Table(
    "calmon_label_stage",
    _stage_metadata,
    Column("client_id", Text),
    Column("label", SmallInteger),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
_PG_TYPES: Final[dict[str, list[str]]] = {
    prediction_stage.name: ["text", "timestamptz", "float8", "int2", "text"],
    label_stage.name: ["text", "int2"],
}


#: per stage table on PostgreSQL: its ``CREATE … IF NOT EXISTS`` (compiled on first use) and
#: its ``DELETE``, and its binary ``COPY``
_PG_EMPTY: dict[str, list[pg_sql.Composable]] = {}
_PG_COPY: Final[dict[str, pg_sql.Composed]] = {
    table.name: pg_sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
        pg_sql.Identifier(table.name),
        pg_sql.SQL(", ").join(pg_sql.Identifier(c.name) for c in table.columns),
    )
    for table in (prediction_stage, label_stage)
}
#: the savepoint :func:`load_stage` opens before the ``COPY`` when asked: rolling back to it
#: undoes what came after (the staged rows included), and keeps the locks and the stage table
BATCH_SAVEPOINT: Final = "calmon_batch"
_PG_SAVEPOINT: Final = pg_sql.SQL("SAVEPOINT {}").format(pg_sql.Identifier(BATCH_SAVEPOINT))
_PG_ROLLBACK_TO: Final = pg_sql.SQL("ROLLBACK TO SAVEPOINT {}").format(
    pg_sql.Identifier(BATCH_SAVEPOINT)
)


@dataclass(frozen=True, slots=True)
class ModelLock:
    """The model's advisory lock a batch takes before its stage is loaded: shared for a
    prediction batch, exclusive for a label batch with ids not stored yet. With ``row_of``
    (the model's name), its row is locked ``FOR SHARE`` first, as
    :func:`calmon.services.model_registry.get_model` locks it, and read back."""

    model_id: int
    exclusive: bool
    row_of: str | None = None


#: a model's row as :class:`ModelLock` reads it: id, score kind, window
ModelRow = tuple[int, str, str]
_PG_SHARE_MODEL_ROW: Final = (
    'SELECT id, score_kind, "window" FROM models WHERE name = %(name)s FOR SHARE'
)

_MODEL_ROW: Final = text('SELECT id, score_kind, "window" FROM models WHERE name = :name')


def load_stage(
    connection: Connection,
    table: Table,
    columns: Sequence[StageColumn],
    *,
    lock: ModelLock | None = None,
    savepoint: bool = False,
) -> ModelRow | None:
    """Empty ``table`` (created on first use in this connection) and fill it with the batch
    ``columns`` (one per column of the table, in its order); take the model's ``lock`` first,
    when given, and with ``savepoint`` open :data:`BATCH_SAVEPOINT` after emptying the table
    (PostgreSQL only: SQLite takes no lock, and its callers no savepoint). Returns the
    model's row as the lock read it (None without ``lock.row_of``, or without the model).

    On PostgreSQL the table is also emptied at each commit (``ON COMMIT DELETE ROWS``), so the
    ``DELETE`` here only has work when one transaction ingests several batches. Everything
    before the rows (locks, ``CREATE``, ``DELETE``, savepoint, and the ``BEGIN`` of a
    transaction not begun yet) goes in one round trip (a psycopg pipeline), then the rows in
    one binary ``COPY`` whose stream is written from the columns
    (:func:`~calmon.db.stage_columns.binary_copy`). On SQLite the rows go in by
    ``executemany``.
    """
    pg_types = _PG_TYPES[table.name]
    if connection.dialect.name == "postgresql":
        driver_connection: Any = connection.connection.driver_connection
        empty = _PG_EMPTY.get(table.name)
        if empty is None:
            create = CreateTable(table, if_not_exists=True).compile(dialect=connection.dialect)
            empty = [
                pg_sql.SQL(str(create)),
                pg_sql.SQL("DELETE FROM {}").format(pg_sql.Identifier(table.name)),
            ]
            _PG_EMPTY[table.name] = empty
        stream = binary_copy(columns, pg_types)
        row: ModelRow | None = None
        with driver_connection.cursor() as model_cursor, driver_connection.cursor() as cursor:
            with driver_errors(), driver_connection.pipeline():
                if lock is not None and lock.row_of is not None:
                    model_cursor.execute(_PG_SHARE_MODEL_ROW, {"name": lock.row_of})
                if lock is not None:
                    cursor.execute(
                        *locks.driver_statement(
                            locks.MODEL, lock.model_id, shared=not lock.exclusive
                        )
                    )
                for statement in empty:
                    cursor.execute(statement)
                if savepoint:
                    cursor.execute(_PG_SAVEPOINT)
            if lock is not None and lock.row_of is not None:
                found = model_cursor.fetchone()
                row = None if found is None else (found[0], found[1], found[2])
            with cursor.copy(_PG_COPY[table.name]) as copy:
                copy.write(stream)
        return row
    connection.execute(CreateTable(table, if_not_exists=True))
    connection.execute(table.delete())
    rows = column_rows(columns, pg_types)
    if rows:
        names = [c.name for c in table.columns]
        connection.execute(insert(table), [dict(zip(names, row, strict=True)) for row in rows])
    return None


def get_model_row(connection: Connection, name: str) -> ModelRow | None:
    """The row of the model called ``name`` as :class:`ModelLock` reads it (SQLite: its
    writing transactions are serialised whole, so there is no row to lock)."""
    found = connection.execute(_MODEL_ROW, {"name": name}).first()
    return None if found is None else (found[0], found[1], found[2])


def rollback_to_batch_savepoint(connection: Connection) -> None:
    """Undo everything since :func:`load_stage` opened :data:`BATCH_SAVEPOINT` (the staged
    rows included), which stays open."""
    connection.exec_driver_sql(_PG_ROLLBACK_TO.as_string(None))


@contextmanager
def driver_errors() -> Iterator[None]:
    """Raise a psycopg error of statements sent past SQLAlchemy (a pipeline) as SQLAlchemy
    raises those of its own: wrapped in the :class:`~sqlalchemy.exc.DBAPIError` of its kind,
    so that a deadlock is run again and a lock timeout answered as any other."""
    try:
        yield
    except psycopg.Error as exc:
        raise DBAPIError.instance(None, None, exc, psycopg.Error) from exc


def lock_model(connection: Connection, model_id: int, *, exclusive: bool) -> None:
    if connection.dialect.name != "postgresql":
        return
    locks.wait_for(connection, locks.MODEL, model_id, shared=not exclusive)


_NOW = bindparam("now", type_=UTCDateTime())
#: the event-time range of a batch: bounds the day partitions a statement may touch
_LO = bindparam("lo", type_=UTCDateTime())
_HI = bindparam("hi", type_=UTCDateTime())
#: the earliest event time retention keeps: older predictions take no label
_EARLIEST = bindparam("earliest", type_=UTCDateTime())

# SQLite: one table keyed by (model_id, client_id).

#: the staged rows into ``predictions`` (a constant: no value is ever part of the text)
_INSERT_STAGED: Final = (
    "INSERT INTO predictions (model_id, client_id, ts, score, label, segment, received_at,"
    " labelled_at, changed_at)"
    " SELECT :model_id, client_id, ts, score, label, segment, :now,"
    " CASE WHEN label IS NULL THEN NULL ELSE :now END, :now"
    " FROM calmon_prediction_stage WHERE true ORDER BY client_id, label IS NULL"
)
INSERT_NEW_ONLY = text(_INSERT_STAGED + " ON CONFLICT (model_id, client_id) DO NOTHING").bindparams(
    _NOW
)

CONFLICTING_IDS = text(
    "SELECT DISTINCT s.client_id FROM calmon_prediction_stage s"
    " JOIN predictions p ON p.model_id = :model_id AND p.client_id = s.client_id"
    " WHERE p.ts <> s.ts OR p.score <> s.score"
    " OR COALESCE(p.segment, '') <> COALESCE(s.segment, '')"
    " OR (s.label IS NOT NULL AND COALESCE(p.label, -1) <> s.label)"
    " ORDER BY s.client_id"
)

# PostgreSQL: ``predictions`` is partitioned by day and has no unique index; ``prediction_keys``
# holds the ids (and each one's event time, which names its partition). Statements that find a
# stored prediction by id go through the registry and bound ``ts`` to the batch's range, so
# only the partitions of those days are read.

_PG_INSERT_ALL_OR_FAIL: Final = (
    "WITH keys AS (INSERT INTO prediction_keys (model_id, client_id, ts)"
    " SELECT :model_id, client_id, ts FROM calmon_prediction_stage ORDER BY client_id),"
    " stored AS (INSERT INTO predictions (model_id, client_id, ts, score, label, segment,"
    " received_at, labelled_at, changed_at)"
    " SELECT :model_id, client_id, ts, score, label, segment, :now,"
    " CASE WHEN label IS NULL THEN NULL ELSE :now END, :now FROM calmon_prediction_stage),"
    " changes AS ({record})"
    " SELECT EXISTS (SELECT 1 FROM pending_labels WHERE model_id = :model_id)"
)


def pg_insert_all_or_fail(record_changes: str) -> TextualSelect:
    """The insert of a batch whose ids are all new (a unique violation otherwise), with the
    statement ``record_changes`` that records its windows (parameters ``model_id``, ``now``,
    ``length``), in one statement that answers whether the model has pending labels: one
    round trip for the usual batch. The answer reads the snapshot the statement began with,
    after the model's advisory lock was granted: a label batch that stores pending labels
    holds that lock exclusively, so none can commit one for these ids unseen."""
    return (
        text(_PG_INSERT_ALL_OR_FAIL.format(record=record_changes))
        .bindparams(_NOW)
        .columns(pending=Boolean())
    )


PG_INSERT_NEW_ONLY = text(
    "WITH new AS (INSERT INTO prediction_keys (model_id, client_id, ts)"
    " SELECT :model_id, client_id, ts FROM calmon_prediction_stage"
    " ORDER BY client_id, label IS NULL ON CONFLICT (model_id, client_id) DO NOTHING"
    " RETURNING client_id, ts)"
    " INSERT INTO predictions (model_id, client_id, ts, score, label, segment, received_at,"
    " labelled_at, changed_at)"
    " SELECT DISTINCT ON (s.client_id) :model_id, s.client_id, s.ts, s.score, s.label,"
    " s.segment, :now, CASE WHEN s.label IS NULL THEN NULL ELSE :now END, :now"
    " FROM calmon_prediction_stage s JOIN new ON new.client_id = s.client_id AND new.ts = s.ts"
    " ORDER BY s.client_id, s.label IS NULL"
).bindparams(_NOW)

PG_STORED_RANGE = text(
    "SELECT min(k.ts), max(k.ts) FROM calmon_prediction_stage s JOIN prediction_keys k"
    " ON k.model_id = :model_id AND k.client_id = s.client_id"
)
PG_CONFLICTING_IDS = text(
    "SELECT DISTINCT s.client_id FROM calmon_prediction_stage s"
    " JOIN prediction_keys k ON k.model_id = :model_id AND k.client_id = s.client_id"
    " JOIN predictions p ON p.model_id = :model_id AND p.client_id = k.client_id"
    " AND p.ts = k.ts"
    " WHERE p.ts >= :lo AND p.ts <= :hi AND (p.ts <> s.ts OR p.score <> s.score"
    " OR COALESCE(p.segment, '') <> COALESCE(s.segment, '')"
    " OR (s.label IS NOT NULL AND COALESCE(p.label, -1) <> s.label))"
    " ORDER BY s.client_id"
).bindparams(_LO, _HI)

PG_APPLY_PENDING = text(
    "UPDATE predictions p SET label = pl.label, labelled_at = pl.received_at, changed_at = :now"
    " FROM pending_labels pl JOIN prediction_keys k"
    " ON k.model_id = pl.model_id AND k.client_id = pl.client_id"
    " WHERE pl.model_id = :model_id AND p.model_id = :model_id"
    " AND p.client_id = k.client_id AND p.ts = k.ts AND p.ts >= :lo AND p.ts <= :hi"
    " AND p.label IS NULL"
    " AND pl.client_id IN (SELECT client_id FROM calmon_prediction_stage)"
).bindparams(_NOW, _LO, _HI)

PG_UNKNOWN_LABEL_IDS = text(
    "SELECT s.client_id FROM calmon_label_stage s WHERE NOT EXISTS"
    " (SELECT 1 FROM prediction_keys k WHERE k.model_id = :model_id"
    " AND k.client_id = s.client_id)"
    " ORDER BY s.client_id"
)
PG_LABELLED_RANGE = text(
    "SELECT min(k.ts), max(k.ts) FROM calmon_label_stage s JOIN prediction_keys k"
    " ON k.model_id = :model_id AND k.client_id = s.client_id"
)
#: the batch's stored predictions, locked in id order before they are updated (an ``UPDATE …
#: FROM`` locks rows in the order of its join, which differs between batches)
PG_LOCK_LABELLED = text(
    "SELECT 1 FROM calmon_label_stage s"
    " JOIN prediction_keys k ON k.model_id = :model_id AND k.client_id = s.client_id"
    " JOIN predictions p ON p.model_id = :model_id AND p.client_id = k.client_id"
    " AND p.ts = k.ts"
    " WHERE p.ts >= :lo AND p.ts <= :hi"
    " ORDER BY p.client_id FOR NO KEY UPDATE OF p"
).bindparams(_LO, _HI)
#: returns the event time of every prediction whose label changed (their windows changed)
PG_UPDATE_LABELS = (
    text(
        "UPDATE predictions p SET label = s.label, labelled_at = :now, changed_at = :now"
        " FROM calmon_label_stage s JOIN prediction_keys k"
        " ON k.model_id = :model_id AND k.client_id = s.client_id"
        " WHERE p.model_id = :model_id AND p.client_id = k.client_id AND p.ts = k.ts"
        " AND p.ts >= :lo AND p.ts <= :hi AND COALESCE(p.label, -1) <> s.label RETURNING p.ts"
    )
    .bindparams(_NOW, _LO, _HI)
    .columns(ts=UTCDateTime())
)
PG_EXPIRED_LABELS = text(
    "SELECT count(*) FROM calmon_label_stage s JOIN prediction_keys k"
    " ON k.model_id = :model_id AND k.client_id = s.client_id WHERE k.ts < :earliest"
).bindparams(_EARLIEST)
PG_REPEATED_PENDING = text(
    "SELECT count(*) FROM calmon_label_stage s JOIN pending_labels pl"
    " ON pl.model_id = :model_id AND pl.client_id = s.client_id AND pl.label = s.label"
    " WHERE NOT EXISTS (SELECT 1 FROM prediction_keys k WHERE k.model_id = :model_id"
    " AND k.client_id = s.client_id)"
)
PG_UPSERT_PENDING = text(
    "INSERT INTO pending_labels (model_id, client_id, label, received_at)"
    " SELECT :model_id, s.client_id, s.label, :now FROM calmon_label_stage s WHERE NOT EXISTS"
    " (SELECT 1 FROM prediction_keys k WHERE k.model_id = :model_id"
    " AND k.client_id = s.client_id)"
    " ORDER BY s.client_id ON CONFLICT (model_id, client_id)"
    " DO UPDATE SET label = excluded.label, received_at = excluded.received_at"
).bindparams(_NOW)

HAS_PENDING = text("SELECT 1 FROM pending_labels WHERE model_id = :model_id LIMIT 1")

APPLY_PENDING = text(
    "UPDATE predictions SET label = pl.label, labelled_at = pl.received_at, changed_at = :now"
    " FROM pending_labels pl"
    " WHERE pl.model_id = :model_id AND predictions.model_id = :model_id"
    " AND predictions.client_id = pl.client_id AND predictions.label IS NULL"
    " AND pl.client_id IN (SELECT client_id FROM calmon_prediction_stage)"
).bindparams(_NOW)

DROP_APPLIED_PENDING = text(
    "DELETE FROM pending_labels WHERE model_id = :model_id"
    " AND client_id IN (SELECT client_id FROM calmon_prediction_stage)"
)

UNKNOWN_LABEL_IDS = text(
    "SELECT s.client_id FROM calmon_label_stage s WHERE NOT EXISTS"
    " (SELECT 1 FROM predictions p WHERE p.model_id = :model_id AND p.client_id = s.client_id)"
    " ORDER BY s.client_id"
)

#: returns the event time of every prediction whose label changed. SQLite only: the unary ``+``
#: keeps the planner off the (model_id, ts) index, which would scan every prediction of the model
#: in range and search the unindexed stage for each; the primary key finds each staged id.
UPDATE_LABELS = (
    text(
        "UPDATE predictions SET label = s.label, labelled_at = :now, changed_at = :now"
        " FROM calmon_label_stage s"
        " WHERE predictions.model_id = :model_id AND predictions.client_id = s.client_id"
        " AND +predictions.ts >= :earliest"
        " AND COALESCE(predictions.label, -1) <> s.label RETURNING predictions.ts"
    )
    .bindparams(_NOW, _EARLIEST)
    .columns(ts=UTCDateTime())
)

#: labels of stored predictions older than retention keeps (ignored); SQLite only (``+`` as in
#: :data:`UPDATE_LABELS`)
EXPIRED_LABELS = text(
    "SELECT count(*) FROM calmon_label_stage s JOIN predictions p"
    " ON p.model_id = :model_id AND p.client_id = s.client_id WHERE +p.ts < :earliest"
).bindparams(_EARLIEST)

REPEATED_PENDING = text(
    "SELECT count(*) FROM calmon_label_stage s JOIN pending_labels pl"
    " ON pl.model_id = :model_id AND pl.client_id = s.client_id AND pl.label = s.label"
    " WHERE NOT EXISTS"
    " (SELECT 1 FROM predictions p WHERE p.model_id = :model_id AND p.client_id = s.client_id)"
)

UPSERT_PENDING = text(
    "INSERT INTO pending_labels (model_id, client_id, label, received_at)"
    " SELECT :model_id, s.client_id, s.label, :now FROM calmon_label_stage s WHERE NOT EXISTS"
    " (SELECT 1 FROM predictions p WHERE p.model_id = :model_id AND p.client_id = s.client_id)"
    " ORDER BY s.client_id ON CONFLICT (model_id, client_id)"
    " DO UPDATE SET label = excluded.label, received_at = excluded.received_at"
).bindparams(_NOW)
