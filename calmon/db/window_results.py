"""The statements over stored window results (``window_results``) read by the API and by a
window's computation: a page of records in the API's order, and one stored record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from calmon.db.backend import bytewise
from calmon.db.models import CURRENT_RECORD, WindowResult


def result_page(
    session: Session,
    *,
    model_id: int,
    start: datetime | None,
    end: datetime | None,
    segment: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[tuple[datetime, str, dict[str, Any]]]:
    """The (start, segment, record) of at most ``limit`` stored results of a model's windows
    overlapping ``[start, end)`` (of ``segment`` only, when given), oldest first and, within
    a window, by segment name bytewise, after ``after`` (start, segment) when given; records of
    the current shape only (:data:`~calmon.db.models.CURRENT_RECORD`)."""
    segment_order = bytewise(session, WindowResult.segment)
    query = select(WindowResult.starts_at, WindowResult.segment, WindowResult.record).where(
        WindowResult.model_id == model_id, CURRENT_RECORD
    )
    if start is not None:
        query = query.where(WindowResult.ends_at > start)
    if end is not None:
        query = query.where(WindowResult.starts_at < end)
    if segment is not None:
        query = query.where(WindowResult.segment == segment)
    if after is not None:
        after_start, after_segment = after
        query = query.where(
            or_(
                WindowResult.starts_at > after_start,
                and_(WindowResult.starts_at == after_start, segment_order > after_segment),
            )
        )
    rows = session.execute(query.order_by(WindowResult.starts_at, segment_order).limit(limit)).all()
    return [(starts_at, name, record) for starts_at, name, record in rows]


def stored_record(
    session: Session, *, model_id: int, start: datetime, segment: str, current_only: bool
) -> dict[str, Any] | None:
    """The stored record of ``segment`` in a model's window starting at ``start``, by primary
    key (None: none stored, or, with ``current_only``, one of an older shape)."""
    query = select(WindowResult.record).where(
        WindowResult.model_id == model_id,
        WindowResult.starts_at == start,
        WindowResult.segment == segment,
    )
    if current_only:
        query = query.where(CURRENT_RECORD)
    return session.scalar(query)
