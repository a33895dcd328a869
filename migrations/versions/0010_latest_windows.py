"""The latest window of each model and segment: table window_results_latest, kept by triggers.

``window_results_latest (model_id, segment, starts_at, ends_at, computed_at, alerts,
position)``: one row per (model, segment) that has a stored window, describing its latest one
(the greatest ``starts_at``), with the segment's tracked position (NULL for ``*``), so that
the model list and the exporter read one row per pair instead of probing ``window_results``
for every pair, and the list counts a model's current segments in an index
(``docs/reference/storage.md``, "The latest windows").

``window_results.alerts`` (new, nullable): the record's alert states as the window's writer
judged them (a JSON array of texts, ``[]`` when quiet); NULL for a row written without it (the
reader then judges the record).

The table is kept by triggers on ``window_results``, so it changes in the transaction that
changes the records, whoever writes them (a window's computation, a recompute, retention, a
model's deletion through the foreign key), and never disagrees with them:

- after an insert, the pair's row takes the new window when it is as new as the one it holds
  or newer; on PostgreSQL the row is written in any case (unchanged when older), so that two
  concurrent transactions that touch one pair always conflict (a serialisation failure in
  the window's repeatable-read transaction, which the scheduler plans again) and neither can
  keep a row computed from a snapshot missing the other's records;
- after a delete of the window a pair's row holds, the row is replaced by the pair's latest
  remaining window, or removed when none is left;
- after an update, the rows of the old and the new pair are read again from
  ``window_results``;
- a segment tracked after its windows were stored (``model_segments`` insert) gets its
  position in its row.

The upgrade fills the table from the stored records (the latest row of each pair) and judges
those latest records' alert states once (:func:`calmon.ui.verdict.alerts`); older rows keep
NULL until they are the latest again. The downgrade drops the triggers, the table and the
column.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28 06:30:00
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa
from alembic import op

from calmon.db.models import UTCDateTime

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BACKFILL: Final = (
    "INSERT INTO window_results_latest"
    " (model_id, segment, starts_at, ends_at, computed_at, alerts, position)"
    " SELECT r.model_id, r.segment, r.starts_at, r.ends_at, r.computed_at, r.alerts,"
    " (SELECT g.position FROM model_segments g"
    " WHERE g.model_id = r.model_id AND g.name = r.segment)"
    " FROM window_results r"
    " WHERE r.starts_at = (SELECT max(i.starts_at) FROM window_results i"
    " WHERE i.model_id = r.model_id AND i.segment = r.segment)"
)
#: records judged per statement while the upgrade fills ``alerts``
_JUDGED_PER_BATCH: Final = 2000
#: the latest windows with alert states, or not judged: what the model list reads of them
FLAGGED: Final = sa.text("alerts IS NULL OR alerts <> '[]'")

_SQLITE_TRIGGERS: Final = (
    """
    CREATE TRIGGER window_results_latest_insert AFTER INSERT ON window_results
    BEGIN
        INSERT INTO window_results_latest
            (model_id, segment, starts_at, ends_at, computed_at, alerts, position)
        VALUES (NEW.model_id, NEW.segment, NEW.starts_at, NEW.ends_at, NEW.computed_at,
                NEW.alerts,
                (SELECT position FROM model_segments
                 WHERE model_id = NEW.model_id AND name = NEW.segment))
        ON CONFLICT (model_id, segment) DO UPDATE SET
            starts_at = excluded.starts_at, ends_at = excluded.ends_at,
            computed_at = excluded.computed_at, alerts = excluded.alerts
        WHERE excluded.starts_at >= window_results_latest.starts_at;
    END
    """,
    """
    CREATE TRIGGER window_results_latest_delete AFTER DELETE ON window_results
    WHEN EXISTS (SELECT 1 FROM window_results_latest WHERE model_id = OLD.model_id
                 AND segment = OLD.segment AND starts_at = OLD.starts_at)
    BEGIN
        DELETE FROM window_results_latest
        WHERE model_id = OLD.model_id AND segment = OLD.segment;
        INSERT INTO window_results_latest
            (model_id, segment, starts_at, ends_at, computed_at, alerts, position)
        SELECT *, (SELECT position FROM model_segments
                   WHERE model_id = OLD.model_id AND name = OLD.segment)
        FROM (
            SELECT model_id, segment, starts_at, ends_at, computed_at, alerts
            FROM window_results
            WHERE model_id = OLD.model_id AND segment = OLD.segment
            ORDER BY starts_at DESC LIMIT 1)
        WHERE EXISTS (SELECT 1 FROM models WHERE id = OLD.model_id);
    END
    """,
    """
    CREATE TRIGGER window_results_latest_update AFTER UPDATE ON window_results
    BEGIN
        DELETE FROM window_results_latest
        WHERE (model_id = OLD.model_id AND segment = OLD.segment)
           OR (model_id = NEW.model_id AND segment = NEW.segment);
        INSERT INTO window_results_latest
            (model_id, segment, starts_at, ends_at, computed_at, alerts, position)
        SELECT *, (SELECT position FROM model_segments
                   WHERE model_id = OLD.model_id AND name = OLD.segment)
        FROM (
            SELECT model_id, segment, starts_at, ends_at, computed_at, alerts
            FROM window_results
            WHERE model_id = OLD.model_id AND segment = OLD.segment
            ORDER BY starts_at DESC LIMIT 1);
        INSERT INTO window_results_latest
            (model_id, segment, starts_at, ends_at, computed_at, alerts, position)
        SELECT *, (SELECT position FROM model_segments
                   WHERE model_id = NEW.model_id AND name = NEW.segment)
        FROM (
            SELECT model_id, segment, starts_at, ends_at, computed_at, alerts
            FROM window_results
            WHERE model_id = NEW.model_id AND segment = NEW.segment
            ORDER BY starts_at DESC LIMIT 1)
        WHERE NEW.model_id <> OLD.model_id OR NEW.segment <> OLD.segment;
    END
    """,
    """
    CREATE TRIGGER window_results_latest_position AFTER INSERT ON model_segments
    BEGIN
        UPDATE window_results_latest SET position = NEW.position
        WHERE model_id = NEW.model_id AND segment = NEW.name;
    END
    """,
)

_POSTGRESQL_FUNCTIONS: Final = (
    """
    CREATE FUNCTION window_results_latest_refresh(m integer, s varchar) RETURNS void
    LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM window_results_latest WHERE model_id = m AND segment = s;
        INSERT INTO window_results_latest
            (model_id, segment, starts_at, ends_at, computed_at, alerts, position)
        SELECT model_id, segment, starts_at, ends_at, computed_at, alerts,
               (SELECT position FROM model_segments WHERE model_id = m AND name = s)
        FROM window_results
        WHERE model_id = m AND segment = s ORDER BY starts_at DESC LIMIT 1;
    END $$
    """,
    """
    CREATE FUNCTION window_results_latest_write() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO window_results_latest AS l
                (model_id, segment, starts_at, ends_at, computed_at, alerts, position)
            VALUES (NEW.model_id, NEW.segment, NEW.starts_at, NEW.ends_at, NEW.computed_at,
                    NEW.alerts,
                    (SELECT position FROM model_segments
                     WHERE model_id = NEW.model_id AND name = NEW.segment))
            ON CONFLICT (model_id, segment) DO UPDATE SET
                ends_at = CASE WHEN excluded.starts_at >= l.starts_at
                          THEN excluded.ends_at ELSE l.ends_at END,
                computed_at = CASE WHEN excluded.starts_at >= l.starts_at
                              THEN excluded.computed_at ELSE l.computed_at END,
                alerts = CASE WHEN excluded.starts_at >= l.starts_at
                         THEN excluded.alerts ELSE l.alerts END,
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
    """,
    """
    CREATE TRIGGER window_results_latest AFTER INSERT OR UPDATE OR DELETE ON window_results
    FOR EACH ROW EXECUTE FUNCTION window_results_latest_write()
    """,
    """
    CREATE FUNCTION window_results_latest_position() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE window_results_latest SET position = NEW.position
        WHERE model_id = NEW.model_id AND segment = NEW.name;
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER window_results_latest_position AFTER INSERT ON model_segments
    FOR EACH ROW EXECUTE FUNCTION window_results_latest_position()
    """,
)


def _judge(connection: sa.Connection) -> None:
    """Fill ``alerts`` of every latest window (both tables) from its record, a batch of pairs
    at a time in key order; the rows are matched on the stored instants themselves."""
    from calmon.ui.verdict import alerts

    results = sa.table(
        "window_results",
        sa.column("model_id", sa.Integer()),
        sa.column("segment", sa.String()),
        sa.column("starts_at", sa.String()),
        sa.column("record", sa.JSON()),
        sa.column("alerts", sa.Text()),
    )
    latest = sa.table(
        "window_results_latest",
        sa.column("model_id", sa.Integer()),
        sa.column("segment", sa.String()),
        sa.column("starts_at", sa.String()),
        sa.column("alerts", sa.Text()),
    )
    pair = sa.and_(
        latest.c.model_id == sa.bindparam("m", type_=sa.Integer()),
        latest.c.segment == sa.bindparam("s", type_=sa.String()),
    )
    write_latest = sa.update(latest).where(pair).values(alerts=sa.bindparam("a"))
    write_result = (
        sa.update(results)
        .where(
            results.c.model_id == sa.bindparam("m", type_=sa.Integer()),
            results.c.segment == sa.bindparam("s", type_=sa.String()),
            results.c.starts_at == sa.select(latest.c.starts_at).where(pair).scalar_subquery(),
        )
        .values(alerts=sa.bindparam("a"))
    )
    after: tuple[int, str] | None = None
    while True:
        query = (
            sa.select(results.c.model_id, results.c.segment, results.c.record)
            .join(
                latest,
                sa.and_(
                    latest.c.model_id == results.c.model_id,
                    latest.c.segment == results.c.segment,
                    latest.c.starts_at == results.c.starts_at,
                ),
            )
            .order_by(results.c.model_id, results.c.segment)
            .limit(_JUDGED_PER_BATCH)
        )
        if after is not None:
            query = query.where(sa.tuple_(results.c.model_id, results.c.segment) > after)
        rows = connection.execute(query).all()
        if not rows:
            return
        judged: list[dict[str, Any]] = [
            {"m": m, "s": s, "a": json.dumps(alerts(record))} for m, s, record in rows
        ]
        connection.execute(write_latest, judged)
        connection.execute(write_result, judged)
        after = (rows[-1][0], rows[-1][1])


def upgrade() -> None:
    """Add ``window_results.alerts``, create and fill ``window_results_latest``, then the
    triggers that keep it."""
    op.add_column("window_results", sa.Column("alerts", sa.Text(), nullable=True))
    op.create_table(
        "window_results_latest",
        sa.Column(
            "model_id",
            sa.Integer(),
            sa.ForeignKey("models.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("segment", sa.String(64), primary_key=True),
        sa.Column("starts_at", UTCDateTime(), nullable=False),
        sa.Column("ends_at", UTCDateTime(), nullable=False),
        sa.Column("computed_at", UTCDateTime(), nullable=False),
        sa.Column("alerts", sa.Text(), nullable=True),
        sa.Column("position", sa.Integer(), nullable=True),
    )
    op.create_index(
        "ix_window_results_latest_model_id_starts_at_position",
        "window_results_latest",
        ["model_id", "starts_at", "position"],
    )
    op.create_index(
        "ix_window_results_latest_model_id_computed_at",
        "window_results_latest",
        ["model_id", "computed_at", "starts_at", "position"],
    )
    op.create_index(
        "ix_window_results_latest_flagged",
        "window_results_latest",
        ["model_id"],
        sqlite_where=FLAGGED,
        postgresql_where=FLAGGED,
    )
    connection = op.get_bind()
    op.execute(_BACKFILL)
    _judge(connection)
    statements = (
        _POSTGRESQL_FUNCTIONS if connection.dialect.name == "postgresql" else _SQLITE_TRIGGERS
    )
    for statement in statements:
        op.execute(statement)
    if connection.dialect.name == "postgresql":
        op.execute("ANALYZE window_results_latest")


def downgrade() -> None:
    """Drop the triggers, ``window_results_latest`` and ``window_results.alerts``."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER window_results_latest_position ON model_segments")
        op.execute("DROP FUNCTION window_results_latest_position()")
        op.execute("DROP TRIGGER window_results_latest ON window_results")
        op.execute("DROP FUNCTION window_results_latest_write()")
        op.execute("DROP FUNCTION window_results_latest_refresh(integer, varchar)")
    else:
        for name in ("insert", "delete", "update", "position"):
            op.execute(f"DROP TRIGGER window_results_latest_{name}")
    op.drop_table("window_results_latest")
    with op.batch_alter_table("window_results") as batch:
        batch.drop_column("alerts")
