"""Settings every process shares: table shared_settings.

``shared_settings (name, value, changed_at)``: one row per setting that must be the same in
every process of a database; the first is ``retention_days`` (``docs/reference/storage.md``,
"Retention"), which the API's ingestion bounds, the scheduler's planning and the retention run
all read from here. The table starts empty: the first process to start seeds the row from its
``CALMON_RETENTION_DAYS``. The downgrade drops the table (processes of an older version read
their own variable again).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from calmon.db.models import UTCDateTime

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``shared_settings``."""
    op.create_table(
        "shared_settings",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.Column("changed_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    """Drop ``shared_settings``."""
    op.drop_table("shared_settings")
