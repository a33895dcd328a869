"""The shape of each latest window's record: column window_results_latest.record_version.

``window_results_latest.record_version`` (new, not null): the ``record_version`` of the
``window_results`` row the pair's row describes, so that the model list, which reads the
stored alert states of ``window_results_latest`` without the records, leaves out a pair whose
latest window holds a record of an older shape as every other reader does (the pair has no
window computed yet until the scheduler computes it again).

The upgrade adds the column (on SQLite with the default 0, which no record has and which
stays: dropping it would copy the table; the triggers always give the version), fills it from
``window_results``, adds it last to the two indexes the model list counts and dates each
model's current segment windows in (so both stay covering, the condition included), and gives
the triggers of revision 0010 the column: each copies it with the other columns of the latest
window. The downgrade gives the triggers and the indexes back their columns of 0010 and drops
the column.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: the columns of a window the triggers copy into its pair's row, before and after this revision
COPIED_0010: Final = ("starts_at", "ends_at", "computed_at", "alerts")
COPIED: Final = (*COPIED_0010, "record_version")
#: the indexes of ``window_results_latest`` that gain the column: (name, columns at 0010)
INDEXES: Final = (
    ("ix_window_results_latest_model_id_starts_at_position", ("model_id", "starts_at", "position")),
    (
        "ix_window_results_latest_model_id_computed_at",
        ("model_id", "computed_at", "starts_at", "position"),
    ),
)
_FILL: Final = (
    "UPDATE window_results_latest SET record_version = (SELECT r.record_version"
    " FROM window_results r WHERE r.model_id = window_results_latest.model_id"
    " AND r.segment = window_results_latest.segment"
    " AND r.starts_at = window_results_latest.starts_at)"
)


def _joined(prefix: str, columns: Sequence[str]) -> str:
    return ", ".join(f"{prefix}{column}" for column in columns)


def _sqlite_triggers(copied: Sequence[str]) -> tuple[str, ...]:
    """The triggers of ``window_results`` that keep ``window_results_latest`` on SQLite,
    copying ``copied`` (after ``model_id`` and ``segment``); revision 0010's with its columns.
    The statements are formatted with this module's column names only."""
    columns = f"model_id, segment, {_joined('', copied)}, position"
    updated = ", ".join(f"{column} = excluded.{column}" for column in copied)

    def latest_of(row: str) -> str:
        return f"""
        INSERT INTO window_results_latest ({columns})
        SELECT *, (SELECT position FROM model_segments
                   WHERE model_id = {row}.model_id AND name = {row}.segment)
        FROM (
            SELECT model_id, segment, {_joined("", copied)}
            FROM window_results
            WHERE model_id = {row}.model_id AND segment = {row}.segment
            ORDER BY starts_at DESC LIMIT 1)"""  # noqa: S608

    return (
        f"""
        CREATE TRIGGER window_results_latest_insert AFTER INSERT ON window_results
        BEGIN
            INSERT INTO window_results_latest ({columns})
            VALUES (NEW.model_id, NEW.segment, {_joined("NEW.", copied)},
                    (SELECT position FROM model_segments
                     WHERE model_id = NEW.model_id AND name = NEW.segment))
            ON CONFLICT (model_id, segment) DO UPDATE SET {updated}
            WHERE excluded.starts_at >= window_results_latest.starts_at;
        END
        """,  # noqa: S608
        f"""
        CREATE TRIGGER window_results_latest_delete AFTER DELETE ON window_results
        WHEN EXISTS (SELECT 1 FROM window_results_latest WHERE model_id = OLD.model_id
                     AND segment = OLD.segment AND starts_at = OLD.starts_at)
        BEGIN
            DELETE FROM window_results_latest
            WHERE model_id = OLD.model_id AND segment = OLD.segment;
            {latest_of("OLD")}
            WHERE EXISTS (SELECT 1 FROM models WHERE id = OLD.model_id);
        END
        """,  # noqa: S608
        f"""
        CREATE TRIGGER window_results_latest_update AFTER UPDATE ON window_results
        BEGIN
            DELETE FROM window_results_latest
            WHERE (model_id = OLD.model_id AND segment = OLD.segment)
               OR (model_id = NEW.model_id AND segment = NEW.segment);
            {latest_of("OLD")};
            {latest_of("NEW")}
            WHERE NEW.model_id <> OLD.model_id OR NEW.segment <> OLD.segment;
        END
        """,  # noqa: S608
    )


def _postgresql_functions(copied: Sequence[str]) -> tuple[str, ...]:
    """The functions of the trigger on ``window_results`` that keeps
    ``window_results_latest`` on PostgreSQL, copying ``copied``; revision 0010's with its
    columns. On a conflict the row keeps ``starts_at`` and the columns of the newer window."""
    columns = f"model_id, segment, {_joined('', copied)}, position"
    kept = "".join(
        f"{column} = CASE WHEN excluded.starts_at >= l.starts_at"
        f" THEN excluded.{column} ELSE l.{column} END,\n"
        for column in copied
        if column != "starts_at"
    )
    return (
        f"""
        CREATE OR REPLACE FUNCTION window_results_latest_refresh(m integer, s varchar)
        RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM window_results_latest WHERE model_id = m AND segment = s;
            INSERT INTO window_results_latest ({columns})
            SELECT model_id, segment, {_joined("", copied)},
                   (SELECT position FROM model_segments WHERE model_id = m AND name = s)
            FROM window_results
            WHERE model_id = m AND segment = s ORDER BY starts_at DESC LIMIT 1;
        END $$
        """,  # noqa: S608
        f"""
        CREATE OR REPLACE FUNCTION window_results_latest_write() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                INSERT INTO window_results_latest AS l ({columns})
                VALUES (NEW.model_id, NEW.segment, {_joined("NEW.", copied)},
                        (SELECT position FROM model_segments
                         WHERE model_id = NEW.model_id AND name = NEW.segment))
                ON CONFLICT (model_id, segment) DO UPDATE SET
                    {kept}
                    starts_at = greatest(excluded.starts_at, l.starts_at);
                RETURN NULL;
            END IF;
            IF TG_OP = 'DELETE' THEN
                IF EXISTS (SELECT 1 FROM window_results_latest WHERE model_id = OLD.model_id
                           AND segment = OLD.segment AND starts_at = OLD.starts_at) THEN
                    PERFORM window_results_latest_refresh(OLD.model_id, OLD.segment);
                END IF;
                RETURN NULL;
            END IF;
            PERFORM window_results_latest_refresh(OLD.model_id, OLD.segment);
            IF NEW.model_id <> OLD.model_id OR NEW.segment <> OLD.segment THEN
                PERFORM window_results_latest_refresh(NEW.model_id, NEW.segment);
            END IF;
            RETURN NULL;
        END $$
        """,  # noqa: S608
    )


def _keep(copied: Sequence[str]) -> None:
    """Have the triggers copy ``copied``: on PostgreSQL their functions replaced, on SQLite the
    three triggers of ``window_results`` dropped and created again (the one of
    ``model_segments`` copies nothing)."""
    if op.get_bind().dialect.name == "postgresql":
        for statement in _postgresql_functions(copied):
            op.execute(statement)
        return
    for name in ("insert", "delete", "update"):
        op.execute(f"DROP TRIGGER window_results_latest_{name}")
    for statement in _sqlite_triggers(copied):
        op.execute(statement)


def _index(extra: Sequence[str]) -> None:
    """Create :data:`INDEXES` again with their columns of 0010, then ``extra``."""
    for name, columns in INDEXES:
        op.drop_index(name, table_name="window_results_latest")
        op.create_index(name, "window_results_latest", [*columns, *extra])


def upgrade() -> None:
    """Add ``window_results_latest.record_version``, fill it from ``window_results``, add it to
    the model list's two indexes, and have the triggers keep it."""
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.add_column(
        "window_results_latest",
        sa.Column("record_version", sa.Integer(), nullable=False, server_default="0"),
    )
    op.execute(_FILL)
    if postgresql:
        op.alter_column("window_results_latest", "record_version", server_default=None)
    _index(("record_version",))
    _keep(COPIED)


def downgrade() -> None:
    """Give the triggers and the indexes back their columns of revision 0010, then drop
    ``window_results_latest.record_version`` (on SQLite in place, as revision 0011 does)."""
    _keep(COPIED_0010)
    _index(())
    if op.get_bind().dialect.name == "postgresql":
        op.drop_column("window_results_latest", "record_version")
    else:
        op.execute("ALTER TABLE window_results_latest DROP COLUMN record_version")
