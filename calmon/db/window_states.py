"""The statements over a model's window states (``window_states``): the fingerprints a scan
checkpoints, the states it reads and adds, the due windows a plan lists and the requests that
mark windows pending. What a plan decides from them: :mod:`calmon.services.windows.planning`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    and_,
    case,
    exists,
    func,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.orm import Session

from calmon.db.backend import epoch_microseconds, insert_ignoring_duplicates, window_start_seconds
from calmon.db.models import PENDING_WINDOW, Model, Prediction, WindowResult, WindowState
from calmon.timeline import EPOCH

_MICROSECOND = timedelta(microseconds=1)


def _microseconds(moment: datetime) -> int:
    """Exact microseconds since the epoch of an aware instant."""
    return (moment - EPOCH) // _MICROSECOND


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Predictions of a window changed at or after an instant: how many, and the sum of their
    ``changed_at`` in microseconds past that instant (exact, as decimal text)."""

    count: int
    total: str


def fingerprint_columns(session: Session, *, since: datetime) -> list[Any]:
    """SQL aggregates over predictions: the :class:`Fingerprint` parts (count, total) of the rows
    changed at or after ``since``, to add to a query over a window's rows."""
    recent = Prediction.changed_at >= since
    offset = epoch_microseconds(session, Prediction.changed_at) - literal(
        _microseconds(since), BigInteger
    )
    return [
        func.count().filter(recent),
        func.coalesce(func.sum(offset).filter(recent), 0),
    ]


def fingerprints(
    session: Session,
    *,
    model_id: int,
    start: datetime,
    end: datetime,
    since: Sequence[datetime],
) -> list[Fingerprint]:
    """The :class:`Fingerprint` of the window ``[start, end)`` of a model since each instant
    of ``since``, read in one statement."""
    row = session.execute(
        select(
            *(column for moment in since for column in fingerprint_columns(session, since=moment))
        ).where(
            Prediction.model_id == model_id,
            Prediction.changed_at >= min(since),
            Prediction.ts >= start,
            Prediction.ts < end,
        )
    ).one()
    return [
        Fingerprint(count=int(row[2 * index]), total=str(int(row[2 * index + 1])))
        for index in range(len(since))
    ]


def fingerprints_by_window(
    session: Session, *, model_id: int, length: int, first: datetime, end: datetime, since: datetime
) -> dict[datetime, Fingerprint]:
    """The :class:`Fingerprint` since ``since`` of each window of length ``length`` (seconds) of a
    model from ``first`` to ``end`` that holds such predictions, in one grouped statement."""
    bucket = window_start_seconds(session, Prediction.ts, length).label("bucket")
    rows = session.execute(
        select(bucket, *fingerprint_columns(session, since=since))
        .where(
            Prediction.model_id == model_id,
            Prediction.changed_at >= since,
            Prediction.ts >= first,
            Prediction.ts < end,
        )
        .group_by(bucket)
    ).all()
    return {
        EPOCH + timedelta(seconds=int(seconds)): Fingerprint(
            count=int(count), total=str(int(total))
        )
        for seconds, count, total in rows
    }


def states_between(
    session: Session, *, model_id: int, first: datetime, last: datetime
) -> dict[datetime, WindowState]:
    """The states of a model's windows starting from ``first`` to ``last``, by start."""
    return {
        state.starts_at: state
        for state in session.scalars(
            select(WindowState).where(
                WindowState.model_id == model_id,
                WindowState.starts_at >= first,
                WindowState.starts_at <= last,
            )
        )
    }


def states_at(
    session: Session, *, model_id: int, starts: Sequence[datetime]
) -> dict[datetime, WindowState]:
    """The states of a model's windows starting at ``starts`` (those that exist), by start."""
    return {
        state.starts_at: state
        for state in session.scalars(
            select(WindowState).where(
                WindowState.model_id == model_id, WindowState.starts_at.in_(starts)
            )
        )
    }


def known_starts(
    session: Session, *, model_id: int, first: datetime, last: datetime
) -> set[datetime]:
    """The starts of a model's windows with a state, from ``first`` to ``last``."""
    return set(
        session.scalars(
            select(WindowState.starts_at).where(
                WindowState.model_id == model_id,
                WindowState.starts_at >= first,
                WindowState.starts_at <= last,
            )
        )
    )


def starts_holding_predictions(
    session: Session, *, model_id: int, length: int, first: datetime, end: datetime
) -> set[datetime]:
    """The starts of a model's windows of length ``length`` (seconds) from ``first`` to
    ``end`` that hold a prediction, found in one grouped statement."""
    bucket = window_start_seconds(session, Prediction.ts, length)
    return {
        EPOCH + timedelta(seconds=int(epoch_seconds))
        for epoch_seconds in session.scalars(
            select(bucket)
            .where(
                Prediction.model_id == model_id,
                Prediction.ts >= first,
                Prediction.ts < end,
            )
            .group_by(bucket)
        )
    }


def add_states(session: Session, *, states: Sequence[WindowState]) -> None:
    """Insert ``states`` in one statement, leaving a state another writer added meanwhile as
    it is."""
    columns = WindowState.__table__.columns
    session.execute(
        insert_ignoring_duplicates(session, WindowState),
        [{column.key: getattr(state, column.key) for column in columns} for state in states],
    )


def _due(model: Model, now: datetime, expired_before: datetime | None = None) -> Any:
    """SQL: the window state is pending, ended ``grace`` ago (or ended, when a recompute was
    requested), after ``expired_before`` (the retention cutoff, if any), and not waiting for a
    retry."""
    grace = timedelta(seconds=model.grace_seconds)
    return and_(
        WindowState.model_id == model.id,
        PENDING_WINDOW,
        true() if expired_before is None else WindowState.ends_at > expired_before,
        or_(
            WindowState.ends_at <= now - grace,
            and_(WindowState.requested_at.is_not(None), WindowState.ends_at <= now),
        ),
        or_(WindowState.retry_at.is_(None), WindowState.retry_at <= now),
    )


def due_bounds(
    session: Session,
    *,
    model: Model,
    now: datetime,
    expired_before: datetime | None,
    limit: int,
) -> list[tuple[datetime, datetime]]:
    """The (start, end) of at most ``limit`` due windows of ``model``: under a fixed reference
    the windows of its period first, then the newest; otherwise the oldest first."""
    query = select(WindowState.starts_at, WindowState.ends_at).where(
        _due(model, now, expired_before)
    )
    if model.reference_kind == "fixed":
        assert model.reference_start is not None
        assert model.reference_end is not None
        in_period = and_(
            WindowState.ends_at > model.reference_start,
            WindowState.starts_at < model.reference_end,
        )
        query = query.order_by(case((in_period, 0), else_=1), WindowState.starts_at.desc())
    else:
        query = query.order_by(WindowState.starts_at)
    return [(start, end) for start, end in session.execute(query.limit(limit)).all()]


def due_before(session: Session, *, model: Model, now: datetime, before: datetime) -> bool:
    """Whether a window of ``model`` that starts before ``before`` is due."""
    older = session.scalar(
        select(WindowState.starts_at)
        .where(_due(model, now), WindowState.starts_at < before)
        .limit(1)
    )
    return older is not None


def mark_requested(
    session: Session, *, model_id: int, starts: Sequence[datetime], now: datetime
) -> None:
    """Bump the version of a model's windows at ``starts``, mark them requested ``now`` and
    clear their failure back-off, in one statement."""
    session.execute(
        update(WindowState)
        .where(WindowState.model_id == model_id, WindowState.starts_at.in_(starts))
        .values(
            version=WindowState.version + 1,
            requested_at=now,
            failures=0,
            retry_at=None,
        )
    )


def starts_with_older_records(
    session: Session, *, model_id: int, record_version: int
) -> list[datetime]:
    """The starts of a model's computed windows holding a record of a shape older than
    ``record_version``."""
    return list(
        session.scalars(
            select(WindowState.starts_at).where(
                WindowState.model_id == model_id,
                WindowState.computed_version >= WindowState.version,
                exists().where(
                    WindowResult.model_id == model_id,
                    WindowResult.starts_at == WindowState.starts_at,
                    WindowResult.record_version < record_version,
                ),
            )
        ).all()
    )


def _in_period(after: datetime, before: datetime) -> Any:
    """SQL: the window state starts after ``after`` and before ``before``."""
    return and_(WindowState.starts_at > after, WindowState.starts_at < before)


def period_checkpoint(
    session: Session, *, model_id: int, after: datetime, before: datetime
) -> tuple[datetime | None, int]:
    """Of a model's windows starting after ``after`` and before ``before``: the latest
    checkpoint (None: no window) and how many are pending."""
    latest, pending = session.execute(
        select(
            func.max(WindowState.checkpoint_at),
            func.count().filter(PENDING_WINDOW),
        ).where(WindowState.model_id == model_id, _in_period(after, before))
    ).one()
    return latest, int(pending)


def computed_before_checkpoint(
    session: Session,
    *,
    model_id: int,
    checkpoint: datetime,
    since: datetime,
    after: datetime,
    before: datetime,
) -> list[datetime]:
    """The starts of a model's current computed windows starting at or after ``since``,
    checkpointed before ``checkpoint``, outside the windows starting after ``after`` and
    before ``before``."""
    return list(
        session.scalars(
            select(WindowState.starts_at).where(
                WindowState.model_id == model_id,
                WindowState.computed_version == WindowState.version,
                WindowState.checkpoint_at < checkpoint,
                WindowState.starts_at >= since,
                ~_in_period(after, before),
            )
        ).all()
    )


def period_versions(
    session: Session, *, model_id: int, after: datetime, before: datetime
) -> tuple[int, int]:
    """How many windows of a model starting after ``after`` and before ``before`` have a
    state, and the sum of their versions."""
    count, total = session.execute(
        select(func.count(), func.coalesce(func.sum(WindowState.version), 0)).where(
            WindowState.model_id == model_id,
            WindowState.starts_at > after,
            WindowState.starts_at < before,
        )
    ).one()
    return int(count), int(total)


def outdated_between(
    session: Session, *, model_id: int, first: datetime, before: datetime
) -> dict[datetime, bool]:
    """Of each window of a model with a state starting from ``first`` and before ``before``,
    whether its stored result is missing or older than its rows, by start."""
    outdated = WindowState.computed_version.is_(None) | (
        WindowState.computed_version < WindowState.version
    )
    return dict(
        session.execute(
            select(WindowState.starts_at, outdated).where(
                WindowState.model_id == model_id,
                WindowState.starts_at < before,
                WindowState.starts_at >= first,
            )
        ).all()
    )


def stored_version(session: Session, *, model_id: int, start: datetime) -> int | None:
    """The version of a window's state as stored (None: no state)."""
    return session.scalar(
        select(WindowState.version).where(
            WindowState.model_id == model_id, WindowState.starts_at == start
        )
    )
