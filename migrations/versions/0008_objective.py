"""A model's objective for threshold advice: column models.objective.

``models.objective`` (JSON, nullable): ``{"target_precision": p}``,
``{"costs": {"false_positive": c, "false_negative": c}}`` or ``{"alert_rate": r}``
(``docs/reference/acting.md``); null, the default, gives no advice. The downgrade drops the column.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``models.objective``."""
    op.add_column("models", sa.Column("objective", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop ``models.objective``."""
    op.drop_column("models", "objective")
