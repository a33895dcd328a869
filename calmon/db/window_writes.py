"""The statements of a window's write step, in its one transaction: the check that the model's
configuration is the one the window was computed with, and the replacement of its stored
records and sorted scores. When and why: :mod:`calmon.services.windows.compute`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from calmon.db.models import Model, WindowResult, WindowScores


def model_updated_at_for_share(session: Session, *, model_id: int) -> datetime | None:
    """When the model's configuration last changed (None: the model is gone), its row locked
    ``FOR SHARE`` until the transaction ends on PostgreSQL, so a change waits for it."""
    return session.scalar(
        select(Model.updated_at).where(Model.id == model_id).with_for_update(read=True)
    )


def replace_results(
    session: Session,
    *,
    model_id: int,
    start: datetime,
    rows: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> None:
    """Replace the stored results and sorted scores of a model's window starting at ``start``
    with ``rows``: per segment, the values of its ``window_results`` row and of its
    ``window_scores`` row."""
    for table in (WindowResult, WindowScores):
        session.execute(delete(table).where(table.model_id == model_id, table.starts_at == start))
    for result, scores in rows:
        session.execute(insert(WindowResult).values(**result))
        session.execute(insert(WindowScores).values(**scores))
