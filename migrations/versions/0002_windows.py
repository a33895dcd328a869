"""Window results, window states, tracked segments, scan marks and sorted window scores.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from calmon.db.models import PENDING_WINDOW, UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _model_id() -> sa.Column[int]:
    return sa.Column(
        "model_id",
        sa.Integer(),
        sa.ForeignKey("models.id", ondelete="CASCADE"),
        primary_key=True,
    )


def upgrade() -> None:
    """Create the scheduler's tables."""
    op.create_table(
        "model_segments",
        _model_id(),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("first_seen_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("model_id", "position"),
    )
    op.create_table(
        "model_scans",
        _model_id(),
        sa.Column("scanned_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "window_states",
        _model_id(),
        sa.Column("starts_at", UTCDateTime(), primary_key=True),
        sa.Column("ends_at", UTCDateTime(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("computed_version", sa.Integer(), nullable=True),
        sa.Column("checkpoint_at", UTCDateTime(), nullable=False),
        sa.Column("band_count", sa.BigInteger(), nullable=True),
        sa.Column("band_sum", sa.String(40), nullable=True),
        sa.Column("requested_at", UTCDateTime(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("retry_at", UTCDateTime(), nullable=True),
    )
    op.create_index(
        "ix_window_states_pending",
        "window_states",
        ["model_id", "starts_at"],
        postgresql_where=PENDING_WINDOW,
        sqlite_where=PENDING_WINDOW,
    )
    op.create_table(
        "window_results",
        _model_id(),
        sa.Column("segment", sa.String(64), primary_key=True),
        sa.Column("starts_at", UTCDateTime(), primary_key=True),
        sa.Column("ends_at", UTCDateTime(), nullable=False),
        sa.Column("computed_at", UTCDateTime(), nullable=False),
        sa.Column("computed_by", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("n_pos", sa.BigInteger(), nullable=False),
        sa.Column("unlabelled", sa.BigInteger(), nullable=False),
        sa.Column("prior", sa.Double(), nullable=True),
        sa.Column("record", sa.JSON(), nullable=False),
    )
    op.create_index(
        "ix_window_results_model_id_starts_at", "window_results", ["model_id", "starts_at"]
    )
    op.create_table(
        "window_scores",
        _model_id(),
        sa.Column("segment", sa.String(64), primary_key=True),
        sa.Column("starts_at", UTCDateTime(), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("positives", sa.LargeBinary(), nullable=False),
        sa.Column("negatives", sa.LargeBinary(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        # Sorted float64 scores do not compress: store them out of line without trying.
        op.execute("ALTER TABLE window_scores ALTER COLUMN positives SET STORAGE EXTERNAL")
        op.execute("ALTER TABLE window_scores ALTER COLUMN negatives SET STORAGE EXTERNAL")


def downgrade() -> None:
    """Drop everything ``upgrade`` created."""
    op.drop_table("window_scores")
    op.drop_index("ix_window_results_model_id_starts_at", table_name="window_results")
    op.drop_table("window_results")
    op.drop_index("ix_window_states_pending", table_name="window_states")
    op.drop_table("window_states")
    op.drop_table("model_scans")
    op.drop_table("model_segments")
