"""The statements over one period's predictions: its rows read as arrays (score, label code,
tracked segment code), and the model's tracked segments they are coded by. Why the PostgreSQL
read looks as it does: ``docs/reference/scheduler.md`` ("Computing a window", step 2).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from sqlalchemy import (
    LargeBinary,
    Row,
    Select,
    SmallInteger,
    and_,
    case,
    cast,
    exists,
    func,
    select,
)
from sqlalchemy.orm import Session

from calmon.arrays import FloatArray
from calmon.db.models import Model, ModelSegment, Prediction
from calmon.db.session import binary_rows
from calmon.db.window_states import Fingerprint, fingerprint_columns

#: segment code of a prediction without a segment, and of one in a segment beyond the cap
NO_SEGMENT: Final = -1
UNTRACKED: Final = -2
UNLABELLED: Final = -1


@dataclass(frozen=True, slots=True)
class WindowRows:
    """The predictions of one period, as arrays of one length n.

    Attributes:
        scores: (n,) float64.
        labels: (n,) int8, 0, 1, or -1 for no label yet.
        segments: (n,) int16, the position of the prediction's tracked segment
            (``ModelSegment.position``), -1 without a segment, -2 for a segment beyond the cap.
        band: the :class:`~calmon.db.window_states.Fingerprint` of the rows changed since
            an instant, when read with them.
    """

    scores: FloatArray
    labels: npt.NDArray[np.int8]
    segments: npt.NDArray[np.int16]
    band: Fingerprint | None = None


@dataclass(frozen=True, slots=True)
class _Selection:
    """The statement selecting a period's predictions, and its per-row label and segment codes
    (columns to choose from)."""

    query: Select[Any]
    label_code: Any
    segment_code: Any


def _array_from_send(data: bytes | None, element: str) -> npt.NDArray[Any]:
    """The elements of a one-dimensional PostgreSQL array in binary form (``array_send``):
    a 20-byte header, then per element its length (int4) and its big-endian value."""
    if data is None or int.from_bytes(data[0:4], "big") == 0:
        return np.empty(0, dtype=np.dtype(element).newbyteorder("="))
    layout = np.dtype([("length", ">i4"), ("value", element)])
    values = np.frombuffer(data, dtype=layout, offset=20)["value"]
    return values.astype(np.dtype(element).newbyteorder("="))


_PLANNER_SETTINGS: Final = {"enable_seqscan": "off", "jit": "off"}
"""PostgreSQL settings for reading one window's rows: a window is a narrow slice of a table
that holds months of predictions, which the (model_id, ts) index reads in physical order; the
planner may still price a parallel scan of the whole table lower once a window is a few
percent of it, and JIT compilation of the aggregate costs more than it saves."""


@contextmanager
def _planner_settings(session: Session) -> Iterator[None]:
    """Apply ``_PLANNER_SETTINGS`` for the statements inside, then restore the previous
    values (transaction-local, so nothing outlives the transaction either way)."""
    names = list(_PLANNER_SETTINGS)
    previous = session.execute(select(*(func.current_setting(name) for name in names))).one()
    session.execute(
        select(*(func.set_config(name, _PLANNER_SETTINGS[name], True) for name in names))
    )
    try:
        yield
    finally:
        restore = zip(names, previous, strict=True)
        session.execute(select(*(func.set_config(name, str(old), True) for name, old in restore)))


def _has_tracked_segments(session: Session, *, model: Model) -> bool:
    """Whether the model tracks any segment (below ``max_segments``)."""
    return bool(
        session.execute(
            select(
                exists().where(
                    ModelSegment.model_id == model.id,
                    ModelSegment.position < model.max_segments,
                )
            )
        ).scalar_one()
    )


def _selection(
    session: Session, *, model: Model, start: datetime, end: datetime, label: int | None
) -> _Selection:
    """The period's predictions (with ``label`` only, when given); segment names are joined
    with the tracked segments only when the model has any."""
    query = select(Prediction.score)
    segment_code: Any
    if _has_tracked_segments(session, model=model):
        segment_code = case(
            (Prediction.segment.is_(None), NO_SEGMENT),
            (ModelSegment.position.is_(None), UNTRACKED),
            else_=ModelSegment.position,
        )
        query = query.outerjoin(
            ModelSegment,
            and_(
                ModelSegment.model_id == Prediction.model_id,
                ModelSegment.name == Prediction.segment,
                ModelSegment.position < model.max_segments,
            ),
        )
    else:
        segment_code = case((Prediction.segment.is_(None), NO_SEGMENT), else_=UNTRACKED)
    query = query.where(
        Prediction.model_id == model.id, Prediction.ts >= start, Prediction.ts < end
    )
    if label is not None:
        query = query.where(Prediction.label == label)
    return _Selection(
        query=query,
        label_code=func.coalesce(Prediction.label, UNLABELLED),
        segment_code=segment_code,
    )


def _sent(expr: Any) -> Any:
    """``expr`` over the selected rows as one binary PostgreSQL array."""
    return func.array_send(func.array_agg(expr), type_=LargeBinary)


def read_sent_rows(
    session: Session,
    *,
    model: Model,
    start: datetime,
    end: datetime,
    label: int | None,
    band_since: datetime | None,
) -> WindowRows:
    """PostgreSQL: the predictions of ``model`` with ``start <= ts < end`` (only those with
    ``label`` when given), the scores and a packed (label, segment) code each as one binary
    array, parsed by NumPy without a Python object per row, and with ``band_since`` their
    fingerprint, in one statement through the (model_id, ts) index."""
    selection = _selection(session, model=model, start=start, end=end, label=label)
    packed = (selection.segment_code - UNTRACKED) * 4 + (selection.label_code - UNLABELLED)
    columns = [_sent(Prediction.score), _sent(cast(packed, SmallInteger))]
    if band_since is not None:
        columns += fingerprint_columns(session, since=band_since)
    with _planner_settings(session):
        row = session.execute(binary_rows(selection.query.with_only_columns(*columns))).one()
    codes = _array_from_send(row[1], ">i2")
    return WindowRows(
        scores=_array_from_send(row[0], ">f8"),
        labels=((codes & 3) + UNLABELLED).astype(np.int8),
        segments=((codes >> 2) + UNTRACKED).astype(np.int16),
        band=None if band_since is None else Fingerprint(int(row[2]), str(int(row[3]))),
    )


def read_row_tuples(
    session: Session, *, model: Model, start: datetime, end: datetime, label: int | None
) -> WindowRows:
    """SQLite: the predictions of ``model`` with ``start <= ts < end`` (only those with
    ``label`` when given), fetched as tuples. The statement runs on the session's connection,
    not through the ORM's execution, which would wrap every row of these plain columns once
    more (a third of the read of a 192,000-row reference)."""
    selection = _selection(session, model=model, start=start, end=end, label=label)
    rows = (
        session.connection()
        .execute(
            selection.query.with_only_columns(
                Prediction.score, selection.label_code, selection.segment_code
            )
        )
        .all()
    )
    return _rows_from_tuples(rows)


def _rows_from_tuples(rows: Sequence[Row[Any]]) -> WindowRows:
    """(score, label code, segment code) tuples as arrays, read through one flat iterator: a
    ``Row`` handed to ``np.array`` is probed attribute by attribute (about 0.1 ms a row)."""
    if not rows:
        return WindowRows(
            scores=np.empty(0, dtype=np.float64),
            labels=np.empty(0, dtype=np.int8),
            segments=np.empty(0, dtype=np.int16),
        )
    table = np.fromiter(chain.from_iterable(rows), dtype=np.float64, count=3 * len(rows)).reshape(
        -1, 3
    )
    return WindowRows(
        scores=np.ascontiguousarray(table[:, 0]),
        labels=table[:, 1].astype(np.int8),
        segments=table[:, 2].astype(np.int16),
    )


def tracked_segments(session: Session, *, model: Model) -> dict[int, str]:
    """The model's tracked segments: position -> name, for positions below ``max_segments``."""
    rows = session.execute(
        select(ModelSegment.position, ModelSegment.name).where(
            ModelSegment.model_id == model.id, ModelSegment.position < model.max_segments
        )
    )
    return {int(position): str(name) for position, name in rows}


def segment_count(session: Session, *, model_id: int) -> int:
    """How many segments of a model are registered, tracked or beyond the cap."""
    return session.scalar(select(func.count()).where(ModelSegment.model_id == model_id)) or 0


def new_segments(
    session: Session, *, model_id: int, start: datetime, end: datetime, limit: int
) -> list[str]:
    """At most ``limit`` segments of a model's predictions with ``start <= ts < end`` not
    registered yet, first received first."""
    first_seen = func.min(Prediction.received_at)
    rows = session.execute(
        select(Prediction.segment, first_seen)
        .where(
            Prediction.model_id == model_id,
            Prediction.ts >= start,
            Prediction.ts < end,
            Prediction.segment.is_not(None),
            ~exists().where(
                ModelSegment.model_id == model_id, ModelSegment.name == Prediction.segment
            ),
        )
        .group_by(Prediction.segment)
        .order_by(first_seen, Prediction.segment)
        .limit(limit)
    ).all()
    return [str(name) for name, _ in rows]


def last_segment_position(session: Session, *, model_id: int) -> int | None:
    """The highest position of a model's registered segments (None: none registered)."""
    return session.scalar(
        select(func.max(ModelSegment.position)).where(ModelSegment.model_id == model_id)
    )


def untracked_segment_count(
    session: Session, *, model: Model, start: datetime, end: datetime
) -> int:
    """Distinct segments of the predictions of ``model`` with ``start <= ts < end`` beyond the
    model's cap."""
    tracked = exists().where(
        ModelSegment.model_id == model.id,
        ModelSegment.name == Prediction.segment,
        ModelSegment.position < model.max_segments,
    )
    count = session.scalar(
        select(func.count(func.distinct(Prediction.segment))).where(
            Prediction.model_id == model.id,
            Prediction.ts >= start,
            Prediction.ts < end,
            Prediction.segment.is_not(None),
            ~tracked,
        )
    )
    return int(count or 0)
