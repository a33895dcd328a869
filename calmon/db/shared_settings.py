"""The statements of the ``shared_settings`` table: a setting's value and when it was stored,
read by name, stored unless another process stored it first, and changed. What a setting means
and when it may change is its owner's (the retention period:
:mod:`calmon.services.retention_bound`); these run in the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from calmon.db.backend import insert_ignoring_duplicates
from calmon.db.models import SharedSetting


def read_setting(session: Session, *, name: str) -> tuple[int, datetime] | None:
    """The value of the setting ``name`` and when it was stored, or None when it is not."""
    row = session.execute(
        select(SharedSetting.value, SharedSetting.changed_at).where(SharedSetting.name == name)
    ).one_or_none()
    return None if row is None else (row.value, row.changed_at)


def insert_setting(session: Session, *, name: str, value: int, now: datetime) -> None:
    """Store ``value`` as the setting ``name`` unless a value is stored already (whichever
    transaction commits first keeps its value)."""
    session.execute(
        insert_ignoring_duplicates(session.get_bind(), SharedSetting).values(
            name=name, value=value, changed_at=now
        )
    )


def update_setting(session: Session, *, name: str, value: int, now: datetime) -> None:
    """Store ``value`` as the setting ``name``, changed ``now``."""
    session.execute(
        update(SharedSetting).where(SharedSetting.name == name).values(value=value, changed_at=now)
    )
