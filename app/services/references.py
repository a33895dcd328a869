"""Reference sets: what each window's metrics are compared with, and how its rows are read.

A reference is the pooled trailing K computed windows or a fixed period, restricted to each
segment. It is never loaded at once: it is streamed into a :class:`~app.metrics.ranking.Ranking`
and :class:`~app.metrics.evaluation.SetSums` (positives first, then negatives window by window),
a trailing one from the sorted scores each window stores (``window_scores``), and cached under a
data version. How and why: ``docs/scheduler.md`` ("Reference sets", "Pooling without holding
the rows").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from sqlalchemy import (
    LargeBinary,
    SmallInteger,
    and_,
    case,
    cast,
    exists,
    func,
    select,
)
from sqlalchemy.orm import Session

from app.arrays import FloatArray
from app.db.models import Model, ModelSegment, Prediction, WindowResult, WindowScores, WindowState
from app.metrics.evaluation import SetSums, evaluate_ranked, set_sums
from app.metrics.label_free import LabelShiftReference, label_shift_reference
from app.metrics.ranking import Ranking, RankingAccumulator
from app.services.planning import Fingerprint, fingerprint, fingerprint_columns
from app.timeline import iso, window_length

ALL: Final = "*"
#: segment code of a prediction without a segment, and of one in a segment beyond the cap
NO_SEGMENT: Final = -1
UNTRACKED: Final = -2
UNLABELLED: Final = -1
#: how sorted scores are stored in ``window_scores``
STORED_DTYPE: Final = np.dtype("<f8")
CACHE_ENTRIES: Final = 256
_EMPTY: Final = np.empty(0, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class WindowRows:
    """The predictions of one period, as arrays of one length n.

    Attributes:
        scores: (n,) float64.
        labels: (n,) int8, 0, 1, or -1 for no label yet.
        segments: (n,) int16, the position of the prediction's tracked segment
            (``ModelSegment.position``), -1 without a segment, -2 for a segment beyond the cap.
    """

    scores: FloatArray
    labels: npt.NDArray[np.int8]
    segments: npt.NDArray[np.int16]
    band: Fingerprint | None = None


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


def load_rows(
    session: Session,
    *,
    model: Model,
    start: datetime,
    end: datetime,
    label: int | None = None,
    band_since: datetime | None = None,
) -> WindowRows:
    """The predictions of ``model`` with ``start <= ts < end`` (only those with ``label``
    when given), with their tracked segment's position, and with ``band_since`` the
    :class:`~app.services.planning.Fingerprint` of those changed since then, read in the
    same statement (PostgreSQL) or the same transaction.

    PostgreSQL sends the scores and a packed (label, segment) code each as one binary array
    (``array_send(array_agg(…))``), parsed by NumPy without a Python object per row, through
    the (model_id, ts) index; SQLite rows are fetched as tuples. Segment names are only
    matched against the tracked segments when the model has any.
    """
    tracked = session.execute(
        select(
            exists().where(
                ModelSegment.model_id == model.id, ModelSegment.position < model.max_segments
            )
        )
    ).scalar_one()
    query = select(Prediction.score)
    segment_code: Any
    if tracked:
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
    label_code = func.coalesce(Prediction.label, UNLABELLED)
    query = query.where(
        Prediction.model_id == model.id, Prediction.ts >= start, Prediction.ts < end
    )
    if label is not None:
        query = query.where(Prediction.label == label)
    if session.get_bind().dialect.name == "postgresql":

        def sent(expr: Any) -> Any:
            return func.array_send(func.array_agg(expr), type_=LargeBinary)

        packed = (segment_code - UNTRACKED) * 4 + (label_code - UNLABELLED)
        columns = [sent(Prediction.score), sent(cast(packed, SmallInteger))]
        if band_since is not None:
            columns += fingerprint_columns(session, since=band_since)
        with _planner_settings(session):
            row = session.execute(query.with_only_columns(*columns)).one()
        codes = _array_from_send(row[1], ">i2")
        return WindowRows(
            scores=_array_from_send(row[0], ">f8"),
            labels=((codes & 3) + UNLABELLED).astype(np.int8),
            segments=((codes >> 2) + UNTRACKED).astype(np.int16),
            band=None if band_since is None else Fingerprint(int(row[2]), str(int(row[3]))),
        )
    rows = session.execute(
        query.with_only_columns(Prediction.score, label_code, segment_code)
    ).all()
    band = None
    if band_since is not None:
        band = fingerprint(session, model_id=model.id, start=start, end=end, since=band_since)
    if not rows:
        return WindowRows(
            scores=_EMPTY.copy(),
            labels=np.empty(0, dtype=np.int8),
            segments=np.empty(0, dtype=np.int16),
            band=band,
        )
    table = np.array(rows, dtype=np.float64)
    return WindowRows(
        scores=np.ascontiguousarray(table[:, 0]),
        labels=table[:, 1].astype(np.int8),
        segments=table[:, 2].astype(np.int16),
        band=band,
    )


def tracked_segments(session: Session, *, model: Model) -> dict[int, str]:
    """The model's tracked segments: position -> name, for positions below ``max_segments``."""
    rows = session.execute(
        select(ModelSegment.position, ModelSegment.name).where(
            ModelSegment.model_id == model.id, ModelSegment.position < model.max_segments
        )
    )
    return {int(position): str(name) for position, name in rows}


def encode_scores(sorted_scores: FloatArray) -> bytes:
    """Sorted scores as stored in ``window_scores``."""
    return np.ascontiguousarray(sorted_scores, dtype=STORED_DTYPE).tobytes()


def decode_scores(data: bytes) -> FloatArray:
    """Scores stored by :func:`encode_scores` (ascending)."""
    return np.frombuffer(data, dtype=STORED_DTYPE).astype(np.float64)


@dataclass(frozen=True, slots=True)
class Reference:
    """The reference set of one segment, pooled.

    Attributes:
        kind: ``trailing`` or ``fixed``.
        start, end: the period it covers (trailing: from the first pooled window's start to
            the last one's end).
        windows: how many windows were pooled (trailing), else None.
        ranking, sums: the pooled set, for the split and its intervals.
        evaluation: its regular metrics (:func:`app.metrics.evaluation.evaluate_ranked`).
        label_shift: its isotonic levels for the label-free estimates of a window
            (:func:`app.metrics.label_free.label_shift_reference`), None without both classes.
    """

    kind: str
    start: datetime
    end: datetime
    windows: int | None
    ranking: Ranking
    sums: SetSums
    evaluation: dict[str, Any]
    label_shift: LabelShiftReference | None = None

    @property
    def n(self) -> int:
        """Labelled predictions in the reference set."""
        return self.ranking.n_pos + self.ranking.n_neg

    def summary(self) -> dict[str, Any]:
        """The ``reference`` part of a window record."""
        return {
            "kind": self.kind,
            "start": iso(self.start),
            "end": iso(self.end),
            "windows": self.windows,
            "n": self.n,
            "n_pos": self.ranking.n_pos,
            "prior": self.evaluation["prior"],
            "regular": self.evaluation["regular"],
        }


class Pool:
    """Accumulates one segment's pooled set: all positives first, then negatives by parts."""

    def __init__(self, pos_sorted: FloatArray, *, threshold: float, score_kind: str) -> None:
        self._threshold = threshold
        self._score_kind = score_kind
        self._ranking = RankingAccumulator(pos_sorted)
        self.sums = set_sums(pos_sorted, _EMPTY, threshold=threshold, score_kind=score_kind)

    def add_negatives(self, neg_sorted: FloatArray) -> None:
        """Count one ascending part of the negatives."""
        self._ranking.add_negatives(neg_sorted)
        self.sums = self.sums + set_sums(
            _EMPTY, neg_sorted, threshold=self._threshold, score_kind=self._score_kind
        )

    def ranking(self) -> Ranking:
        """The pooled ranking so far."""
        return self._ranking.ranking()


class ReferenceCache:
    """Built references in memory, least recently used first out (thread-safe)."""

    def __init__(self, entries: int = CACHE_ENTRIES) -> None:
        self._entries = entries
        self._items: OrderedDict[Hashable, Reference | None] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0

    def get(self, key: Hashable) -> tuple[bool, Reference | None]:
        """(found, reference) for ``key``."""
        with self._lock:
            if key not in self._items:
                return False, None
            self._items.move_to_end(key)
            return True, self._items[key]

    def put(self, key: Hashable, reference: Reference | None) -> None:
        """Remember ``reference`` (None: there is none) under ``key``."""
        with self._lock:
            self._items[key] = reference
            self._items.move_to_end(key)
            self.builds += 1
            while len(self._items) > self._entries:
                self._items.popitem(last=False)


def _finish(
    pool: Pool,
    *,
    kind: str,
    start: datetime,
    end: datetime,
    windows: int | None,
    threshold: float,
    score_kind: str,
) -> Reference:
    ranking = pool.ranking()
    evaluation = evaluate_ranked(
        ranking, pool.sums, threshold=threshold, pi0=(), score_kind=score_kind
    )
    return Reference(
        kind=kind,
        start=start,
        end=end,
        windows=windows,
        ranking=ranking,
        sums=pool.sums,
        evaluation=evaluation,
        label_shift=label_shift_reference(ranking),
    )


@dataclass(frozen=True, slots=True)
class StoredWindow:
    """A computed window: its bounds and the version its results were computed from."""

    start: datetime
    end: datetime
    version: int


def trailing_windows(
    session: Session, *, model: Model, before: datetime, count: int
) -> list[StoredWindow]:
    """The ``count`` most recent computed windows of ``model`` that start before ``before``,
    oldest first."""
    rows = session.execute(
        select(WindowResult.starts_at, WindowResult.ends_at, WindowResult.version)
        .where(
            WindowResult.model_id == model.id,
            WindowResult.segment == ALL,
            WindowResult.starts_at < before,
        )
        .order_by(WindowResult.starts_at.desc())
        .limit(count)
    ).all()
    return [StoredWindow(start, end, version) for start, end, version in reversed(rows)]


def _stored_negatives(
    session: Session, *, model: Model, segment: str, starts: Sequence[datetime]
) -> Iterator[FloatArray]:
    for start in starts:
        data = session.scalar(
            select(WindowScores.negatives).where(
                WindowScores.model_id == model.id,
                WindowScores.segment == segment,
                WindowScores.starts_at == start,
            )
        )
        if data is not None:
            yield decode_scores(data)


def _trailing_reference(
    session: Session, *, model: Model, segment: str, windows: Sequence[StoredWindow]
) -> Reference:
    starts = [w.start for w in windows]
    positives = session.scalars(
        select(WindowScores.positives).where(
            WindowScores.model_id == model.id,
            WindowScores.segment == segment,
            WindowScores.starts_at.in_(starts),
        )
    ).all()
    pos_sorted = np.sort(np.concatenate([decode_scores(p) for p in positives] or [_EMPTY]))
    pool = Pool(pos_sorted, threshold=model.threshold, score_kind=model.score_kind)
    del positives, pos_sorted
    for negatives in _stored_negatives(session, model=model, segment=segment, starts=starts):
        pool.add_negatives(negatives)
    return _finish(
        pool,
        kind="trailing",
        start=windows[0].start,
        end=windows[-1].end,
        windows=len(windows),
        threshold=model.threshold,
        score_kind=model.score_kind,
    )


def _chunks(
    start: datetime, end: datetime, length: timedelta
) -> Iterator[tuple[datetime, datetime]]:
    cursor = start
    while cursor < end:
        yield cursor, min(cursor + length, end)
        cursor += length


def _fixed_references(
    session: Session, *, model: Model, segments: dict[int, str]
) -> dict[str, Reference]:
    """Every segment's reference over the model's fixed period, read in window-sized chunks:
    positives in one pass, then negatives chunk by chunk."""
    assert model.reference_start is not None
    assert model.reference_end is not None
    start, end = model.reference_start, model.reference_end
    positives = load_rows(session, model=model, start=start, end=end, label=1)
    names = {ALL: None, **{name: position for position, name in segments.items()}}
    pools: dict[str, Pool] = {}
    for name, position in names.items():
        scores = (
            positives.scores
            if position is None
            else positives.scores[positives.segments == position]
        )
        pools[name] = Pool(np.sort(scores), threshold=model.threshold, score_kind=model.score_kind)
    del positives
    for chunk_start, chunk_end in _chunks(start, end, window_length(model.window)):
        negatives = load_rows(session, model=model, start=chunk_start, end=chunk_end, label=0)
        for name, position in names.items():
            scores = (
                negatives.scores
                if position is None
                else negatives.scores[negatives.segments == position]
            )
            pools[name].add_negatives(np.sort(scores))
        del negatives
    return {
        name: _finish(
            pool,
            kind="fixed",
            start=start,
            end=end,
            windows=None,
            threshold=model.threshold,
            score_kind=model.score_kind,
        )
        for name, pool in pools.items()
    }


def _fixed_version(session: Session, *, model: Model) -> tuple[int, int]:
    """Data version of the fixed period: how many windows overlapping it hold predictions
    and the sum of their versions (both only grow while its predictions change)."""
    assert model.reference_start is not None
    assert model.reference_end is not None
    length = window_length(model.window)
    count, total = session.execute(
        select(func.count(), func.coalesce(func.sum(WindowState.version), 0)).where(
            WindowState.model_id == model.id,
            WindowState.starts_at > model.reference_start - length,
            WindowState.starts_at < model.reference_end,
        )
    ).one()
    return int(count), int(total)


def references_for(
    session: Session,
    *,
    model: Model,
    window_start: datetime,
    segments: dict[int, str],
    cache: ReferenceCache,
) -> dict[str, Reference | None]:
    """The reference of segment ``*`` and of each tracked segment (``segments``: position ->
    name) for the window of ``model`` starting at ``window_start``; None while a trailing
    reference has no computed window before it. A reference may hold no labelled prediction
    (n = 0: an empty fixed period, or trailing windows not labelled yet).

    Reads happen in the session's transaction, so a reference and the window it is used for
    see one snapshot.
    """
    names = [ALL, *segments.values()]
    config = (model.threshold, model.score_kind, model.max_segments)
    if model.reference_kind == "fixed":
        key = (
            model.id,
            "fixed",
            model.reference_start,
            model.reference_end,
            _fixed_version(session, model=model),
            config,
            tuple(sorted(segments.items())),
        )
        out: dict[str, Reference | None] = {}
        for name in names:
            found, reference = cache.get((*key, name))
            if not found:
                built = _fixed_references(session, model=model, segments=segments)
                for built_name, built_reference in built.items():
                    cache.put((*key, built_name), built_reference)
                return {name: built[name] for name in names}
            out[name] = reference
        return out
    windows = trailing_windows(
        session, model=model, before=window_start, count=model.reference_windows or 1
    )
    if not windows:
        return dict.fromkeys(names)
    version = tuple((w.start, w.version) for w in windows)
    trailing: dict[str, Reference | None] = {}
    for name in names:
        trailing_key = (model.id, "trailing", name, version, config)
        found, reference = cache.get(trailing_key)
        if not found:
            reference = _trailing_reference(session, model=model, segment=name, windows=windows)
            cache.put(trailing_key, reference)
        trailing[name] = reference
    return trailing
