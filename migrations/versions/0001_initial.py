"""Models, predictions and pending labels.

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from calmon.db.models import UTCDateTime

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the three tables and their indexes."""
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("score_kind", sa.String(16), nullable=False),
        sa.Column("window", sa.String(8), nullable=False),
        sa.Column("threshold", sa.Double(), nullable=False),
        sa.Column("pi0", sa.JSON(), nullable=False),
        sa.Column("reference_kind", sa.String(16), nullable=False),
        sa.Column("reference_windows", sa.Integer(), nullable=True),
        sa.Column("reference_start", UTCDateTime(), nullable=True),
        sa.Column("reference_end", UTCDateTime(), nullable=True),
        sa.Column("grace_seconds", sa.Integer(), nullable=False),
        sa.Column("max_segments", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("score_kind IN ('probability', 'score')", name="score_kind"),
        sa.CheckConstraint("reference_kind IN ('trailing', 'fixed')", name="reference_kind"),
        sa.CheckConstraint("max_segments BETWEEN 1 AND 1000", name="max_segments"),
        sa.CheckConstraint("grace_seconds >= 0", name="grace_seconds"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "predictions",
        sa.Column(
            "model_id",
            sa.Integer(),
            sa.ForeignKey("models.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("client_id", sa.String(128), primary_key=True),
        sa.Column("ts", UTCDateTime(), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=True),
        sa.Column("segment", sa.String(64), nullable=True),
        sa.Column("received_at", UTCDateTime(), nullable=False),
        sa.Column("labelled_at", UTCDateTime(), nullable=True),
        sa.Column("changed_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("label IN (0, 1)", name="label"),
    )
    op.create_index("ix_predictions_model_id_ts", "predictions", ["model_id", "ts"])
    op.create_index("ix_predictions_model_id_changed_at", "predictions", ["model_id", "changed_at"])
    op.create_table(
        "pending_labels",
        sa.Column(
            "model_id",
            sa.Integer(),
            sa.ForeignKey("models.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("client_id", sa.String(128), primary_key=True),
        sa.Column("label", sa.SmallInteger(), nullable=False),
        sa.Column("received_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("label IN (0, 1)", name="label"),
    )


def downgrade() -> None:
    """Drop everything ``upgrade`` created."""
    op.drop_table("pending_labels")
    op.drop_index("ix_predictions_model_id_changed_at", table_name="predictions")
    op.drop_index("ix_predictions_model_id_ts", table_name="predictions")
    op.drop_table("predictions")
    op.drop_table("models")
