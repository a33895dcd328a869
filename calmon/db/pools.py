"""The statements a pooled reference or decision reads back of computed windows: which windows
are computed (bounds, version), their positives counts (``window_results.n_pos``) and their
sorted scores (``window_scores``, as stored bytes). What is pooled and why:
:mod:`calmon.services.windows.references` and :mod:`calmon.services.windows.decisions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from calmon.db.models import WindowResult, WindowScores
from calmon.db.session import binary_rows
from calmon.names import ALL_SEGMENTS


def computed_windows_before(
    session: Session, *, model_id: int, before: datetime, count: int
) -> list[tuple[datetime, datetime, int]]:
    """The (start, end, version) of the ``count`` most recent computed windows of a model
    that start before ``before``, newest first."""
    rows = session.execute(
        select(WindowResult.starts_at, WindowResult.ends_at, WindowResult.version)
        .where(
            WindowResult.model_id == model_id,
            WindowResult.segment == ALL_SEGMENTS,
            WindowResult.starts_at < before,
        )
        .order_by(WindowResult.starts_at.desc())
        .limit(count)
    ).all()
    return [(start, end, version) for start, end, version in rows]


def stored_positive_counts(
    session: Session, *, model_id: int, segment: str, first: datetime, before: datetime
) -> dict[datetime, int]:
    """The stored positives count of ``segment`` in each computed window of a model starting
    from ``first`` and before ``before``, by start."""
    return dict(
        session.execute(
            select(WindowResult.starts_at, WindowResult.n_pos).where(
                WindowResult.model_id == model_id,
                WindowResult.segment == segment,
                WindowResult.starts_at < before,
                WindowResult.starts_at >= first,
            )
        ).all()
    )


def stored_positives(
    session: Session, *, model_id: int, segment: str, starts: Sequence[datetime]
) -> list[bytes]:
    """The stored sorted positives of ``segment`` in the windows starting at ``starts``."""
    return list(
        session.scalars(
            binary_rows(
                select(WindowScores.positives).where(
                    WindowScores.model_id == model_id,
                    WindowScores.segment == segment,
                    WindowScores.starts_at.in_(starts),
                )
            )
        ).all()
    )


def stored_negatives(
    session: Session, *, model_id: int, segment: str, start: datetime
) -> bytes | None:
    """The stored sorted negatives of ``segment`` in the window starting at ``start`` (None:
    none stored)."""
    return session.scalar(
        binary_rows(
            select(WindowScores.negatives).where(
                WindowScores.model_id == model_id,
                WindowScores.segment == segment,
                WindowScores.starts_at == start,
            )
        )
    )


def stored_scores(
    session: Session, *, model_id: int, segment: str, starts: Sequence[datetime]
) -> list[tuple[bytes, bytes]]:
    """The stored sorted (positives, negatives) of ``segment`` in the windows starting at
    ``starts``."""
    rows = session.execute(
        binary_rows(
            select(WindowScores.positives, WindowScores.negatives).where(
                WindowScores.model_id == model_id,
                WindowScores.segment == segment,
                WindowScores.starts_at.in_(starts),
            )
        )
    ).all()
    return [(positives, negatives) for positives, negatives in rows]
