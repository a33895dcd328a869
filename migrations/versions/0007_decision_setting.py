"""The pooled decision's per-model setting: column models.decision.

``models.decision`` (JSON, nullable) holds ``{"min_positives", "max_span_seconds"}`` of a model
whose ``decision`` setting differs from the defaults (``docs/reference/metrics.md``, "Decisions at
few positives"); null means the defaults, which every existing model keeps. The downgrade drops
the column (models then use the defaults).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``models.decision``."""
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("decision", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop ``models.decision``."""
    with op.batch_alter_table("models") as batch:
        batch.drop_column("decision")
