"""The scheduler's leader lease: table scheduler_leader.

``scheduler_leader (role, instance, acquired_at, expires_at)``: one row per role, the lease of
the scheduler process that leads (``docs/reference/scheduler.md``, "The leader lock"). It replaces a
session-level advisory lock, which a transaction-pooling PgBouncer cannot hold and a failover
of the database loses. The downgrade drops the table; schedulers of an older version lead by
their advisory lock again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from calmon.db.models import UTCDateTime

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``scheduler_leader``."""
    op.create_table(
        "scheduler_leader",
        sa.Column("role", sa.String(32), primary_key=True),
        sa.Column("instance", sa.String(200), nullable=False),
        sa.Column("acquired_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    """Drop ``scheduler_leader`` (no process leads until one of the older version locks)."""
    op.drop_table("scheduler_leader")
