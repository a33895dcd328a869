"""Server-side sessions of the web view's login: table web_sessions.

``web_sessions (id_hash, token_key, scopes, created_at, expires_at)``: one row per login of
``/ui/login`` (``docs/reference/ui.md``); the cookie holds the session id, the row its SHA-256. The
downgrade drops the table, which logs every browser out.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 22:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from calmon.db.models import UTCDateTime

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``web_sessions`` and its expiry index."""
    op.create_table(
        "web_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("token_key", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_web_sessions_expires_at", "web_sessions", ["expires_at"])


def downgrade() -> None:
    """Drop ``web_sessions`` (every web session ends)."""
    op.drop_index("ix_web_sessions_expires_at", table_name="web_sessions")
    op.drop_table("web_sessions")
