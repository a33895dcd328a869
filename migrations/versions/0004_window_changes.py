"""The change record window_changes replaces the (model_id, changed_at) index of predictions.

``window_changes (model_id, changed_at, starts_at)`` holds one row per window of a model that a
batch changed (``docs/reference/scheduler.md``, "Finding changed windows"); not partitioned. It is
back-filled with what the next change scan must still see: per model and window, the latest
``changed_at`` of the predictions changed since the model's last scan minus the default scan
margin, or of all its predictions when it was never scanned. Then the index goes (from the
partitioned parent on PostgreSQL, which drops the partitions' copies). The downgrade builds
the index again and drops the table.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

from calmon.db.backend import WINDOW_START_SQL, backend
from calmon.db.models import UTCDateTime
from calmon.timeline import WINDOW_SECONDS

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: the default ``CALMON_SCHEDULER_SCAN_MARGIN`` when this revision was written
DEFAULT_MARGIN = timedelta(seconds=300)
_NEVER = datetime(1970, 1, 1, tzinfo=UTC)
_MODELS = sa.text(
    'SELECT m.id, m."window", s.scanned_at FROM models m'
    " LEFT JOIN model_scans s ON s.model_id = m.id ORDER BY m.id"
).columns(id=sa.Integer(), window=sa.String(), scanned_at=UTCDateTime())
_BACK_FILL = (
    "INSERT INTO window_changes (model_id, changed_at, starts_at)"
    " SELECT :model_id, max(changed_at), {start} AS starts_at"
    " FROM predictions WHERE model_id = :model_id AND changed_at >= :since GROUP BY starts_at"
)


def _back_fill(connection: sa.Connection) -> None:
    statement = sa.text(_BACK_FILL.format(start=WINDOW_START_SQL[backend(connection)])).bindparams(
        sa.bindparam("since", type_=UTCDateTime())
    )
    for model_id, window, scanned_at in connection.execute(_MODELS).all():
        since = _NEVER if scanned_at is None else scanned_at - DEFAULT_MARGIN
        connection.execute(
            statement,
            {"model_id": model_id, "length": WINDOW_SECONDS[window], "since": since},
        )


def upgrade() -> None:
    """Create and fill ``window_changes``; drop ``ix_predictions_model_id_changed_at``."""
    op.create_table(
        "window_changes",
        sa.Column(
            "model_id",
            sa.Integer(),
            sa.ForeignKey("models.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("changed_at", UTCDateTime(), primary_key=True),
        sa.Column("starts_at", UTCDateTime(), primary_key=True),
    )
    _back_fill(op.get_bind())
    op.drop_index("ix_predictions_model_id_changed_at", table_name="predictions")


def downgrade() -> None:
    """Build the ``changed_at`` index again and drop ``window_changes``."""
    op.create_index("ix_predictions_model_id_changed_at", "predictions", ["model_id", "changed_at"])
    op.drop_table("window_changes")
