"""Every read of stored window records that the exporter and the web view make, in one place.

The latest window of each (model, segment) pair is read from ``window_results_latest``
(:class:`~calmon.db.models.WindowLatest`), which triggers keep from ``window_results`` in the
transaction that writes the records (``docs/reference/storage.md``, "The latest windows"): one row
per pair, so a reader of every model's latest windows reads at most models x (1 + max_segments)
small rows instead of probing ``window_results`` once per pair, and the records themselves
only for the windows it shows (:func:`load_records`, by primary key).

Which pairs count: segment ``*`` and each model's tracked segments below ``max_segments``
(:func:`_pairs`); a segment whose latest window started more than ``QUIET_SEGMENT_WINDOWS``
window lengths before the model's ``*`` window is left out (:func:`current_windows`, and the
same rule in SQL where the readers count or rank in the database).

Only records of the current shape are served (:data:`~calmon.db.models.CURRENT_RECORD`): a
window holding a record of an older shape reads as a window not computed yet, until the
scheduler computes it again (the upgrade that bumps :data:`~calmon.records.RECORD_VERSION` and
the scheduler, when it starts leading, request it). A pair whose latest window holds such a
record is left out, not shown with an earlier window in its place; the model list, which reads
the stored alert states of ``window_results_latest`` rather than the records, leaves it out by
the row's own ``record_version`` (:data:`~calmon.db.models.CURRENT_LATEST`).

Readers: the exporter (:mod:`calmon.exporter.snapshot` builds its samples from
:func:`latest_stars`, :func:`ranked_segments`, :func:`latest_keys` and :func:`load_records`),
the model list (:func:`model_list_windows`), a model's page (:func:`load_latest_windows`,
:func:`last_window_records`) and a window's recalibration map (:func:`stored_record`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol, TypeVar, cast

from sqlalchemy import (
    CTE,
    ColumnElement,
    Select,
    Subquery,
    and_,
    case,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    tuple_,
    type_coerce,
    union_all,
)
from sqlalchemy.orm import Session, aliased

from calmon.db import window_results
from calmon.db.backend import lengths_before
from calmon.db.models import (
    CURRENT_LATEST,
    CURRENT_RECORD,
    Model,
    ModelSegment,
    UTCDateTime,
    WindowLatest,
    WindowResult,
)
from calmon.names import ALL_SEGMENTS
from calmon.records import RECORD_VERSION, WindowRecord

#: a segment whose latest window is older than the model's by more windows is not shown
QUIET_SEGMENT_WINDOWS: Final = 7
#: windows whose records one statement reads (three bound parameters each)
RECORDS_PER_STATEMENT: Final = 500
#: the cutoff of a model without a ``*`` window: every segment window is current
EARLIEST: Final = datetime(1, 1, 2, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class LatestWindow:
    """The latest stored window of one model and segment: its record as the API serves it."""

    model: str
    segment: str
    start: datetime
    end: datetime
    computed_at: datetime
    record: WindowRecord


@dataclass(frozen=True, slots=True)
class LatestKey:
    """The latest stored window of one model and segment, without its record."""

    model_id: int
    model: str
    segment: str
    start: datetime
    end: datetime
    computed_at: datetime


class _Dated(Protocol):
    @property
    def model(self) -> str: ...
    @property
    def segment(self) -> str: ...
    @property
    def start(self) -> datetime: ...
    @property
    def end(self) -> datetime: ...


DatedT = TypeVar("DatedT", bound=_Dated)


class Keyed(_Dated, Protocol):
    """A window :func:`load_records` can read: its model's id besides its model and period."""

    @property
    def model_id(self) -> int: ...


def current_windows(windows: Iterable[DatedT]) -> list[DatedT]:
    """The windows still worth showing: every model's ``*`` window, and the segments whose
    latest window started at most ``QUIET_SEGMENT_WINDOWS`` window lengths before it.

    A segment that stopped receiving predictions would otherwise show its last window's
    values, and fire alerts on them, for ever; its history stays in Prometheus and in the
    window API. ``windows`` is read once (a generator is fine).
    """
    windows = list(windows)
    latest = {w.model: w.start for w in windows if w.segment == ALL_SEGMENTS}
    return [
        w
        for w in windows
        if w.segment == ALL_SEGMENTS
        or w.model not in latest
        or w.start >= latest[w.model] - QUIET_SEGMENT_WINDOWS * (w.end - w.start)
    ]


def _pairs(*, model_id: int | None = None, part: str = "both") -> Subquery:
    """Each model's (model, segment) pairs: ``*`` at position -1 and the tracked segments
    below ``max_segments`` at theirs (``part``: ``"stars"`` or ``"segments"`` alone)."""
    models = select(
        Model.id.label("model_id"),
        Model.name.label("model"),
        literal(ALL_SEGMENTS).label("segment"),
        literal(-1).label("position"),
    )
    segments = (
        select(
            ModelSegment.model_id.label("model_id"),
            Model.name.label("model"),
            ModelSegment.name.label("segment"),
            ModelSegment.position.label("position"),
        )
        .join(Model, Model.id == ModelSegment.model_id)
        .where(ModelSegment.position < Model.max_segments)
    )
    if model_id is not None:
        models = models.where(Model.id == model_id)
        segments = segments.where(Model.id == model_id)
    if part == "stars":
        return models.subquery("pairs")
    if part == "segments":
        return segments.subquery("pairs")
    return union_all(models, segments).subquery("pairs")


def _latest_of(pairs: Subquery, *columns: Any) -> Select[Any]:
    """Each pair's columns, then ``columns`` (of ``WindowLatest``) of its latest window;
    pairs without one are left out."""
    return (
        select(pairs, *columns)
        .select_from(WindowLatest)
        .join(
            pairs,
            and_(
                WindowLatest.model_id == pairs.c.model_id, WindowLatest.segment == pairs.c.segment
            ),
        )
    )


def _ordered(windows: list[DatedT]) -> list[DatedT]:
    """By model name, then ``*`` first and the other segments by name."""
    windows.sort(key=lambda w: (w.model, w.segment != ALL_SEGMENTS, w.segment))
    return windows


def latest_keys(session: Session, *, model_id: int | None = None) -> list[LatestKey]:
    """The latest window of each model (only of ``model_id`` when given) and current
    segment, without the records (one statement), ordered by model name, then ``*`` first
    and the other segments by name."""
    rows = session.execute(
        _latest_of(
            _pairs(model_id=model_id),
            WindowLatest.starts_at,
            WindowLatest.ends_at,
            WindowLatest.computed_at,
        )
    ).all()
    keys = [
        LatestKey(model_id, model, segment, start, end, computed_at)
        for model_id, model, segment, _, start, end, computed_at in rows
    ]
    return current_windows(_ordered(keys))


def load_latest_windows(session: Session, *, model_id: int | None = None) -> list[LatestWindow]:
    """:func:`latest_keys` with their records (read by primary key)."""
    return load_records(session, latest_keys(session, model_id=model_id))


def model_series_settings(session: Session) -> list[tuple[int, str, str, list[float] | None]]:
    """Every model's id, name, score kind and configured priors: what bounds the series of
    its windows."""
    rows = session.execute(select(Model.id, Model.name, Model.score_kind, Model.pi0))
    return [tuple(row) for row in rows]  # type: ignore[misc]


def latest_pairs(session: Session) -> list[tuple[int, str, str, int, datetime, datetime]]:
    """Every model's ``*`` window and the latest window of each tracked segment below
    ``max_segments``: (model id, model, segment, position, start, end), quiet ones
    included."""
    rows = session.execute(_latest_of(_pairs(), WindowLatest.starts_at, WindowLatest.ends_at))
    return [tuple(row) for row in rows]


def latest_stars(session: Session) -> list[tuple[int, str, str, int, datetime, datetime]]:
    """Every model's latest ``*`` window: (model id, model, ``*``, -1, start, end)."""
    rows = session.execute(
        _latest_of(_pairs(part="stars"), WindowLatest.starts_at, WindowLatest.ends_at)
    )
    return [tuple(row) for row in rows]


def ranked_segments(session: Session, *, ranks: int) -> Select[Any]:
    """Each model's current segment windows (the latest of each tracked segment below
    ``max_segments``, at most ``QUIET_SEGMENT_WINDOWS`` window lengths before the model's
    ``*`` window, or any without one) with their rank by position and the model's count of
    them: the first ``ranks`` of each model, and its first one in any case (it carries the
    count). Columns: model id, segment, position, start, end, rank, count. Read from
    ``window_results_latest`` alone (its ``position`` column; the models for their
    ``max_segments``)."""
    latest = (
        select(
            WindowLatest.model_id,
            WindowLatest.segment,
            WindowLatest.position,
            WindowLatest.starts_at,
            WindowLatest.ends_at,
        )
        .join(Model, Model.id == WindowLatest.model_id)
        .where(WindowLatest.segment != ALL_SEGMENTS, WindowLatest.position < Model.max_segments)
        .subquery("segment_latest")
    )
    star = (
        select(WindowLatest.model_id, WindowLatest.starts_at)
        .where(WindowLatest.segment == ALL_SEGMENTS)
        .subquery("star_latest")
    )
    # start >= star - QUIET x length, as start + QUIET x length >= star (exact arithmetic)
    quiet_after = lengths_before(
        session, latest.c.starts_at, latest.c.ends_at, -QUIET_SEGMENT_WINDOWS
    )
    current = (
        select(
            latest.c.model_id,
            latest.c.segment,
            latest.c.position,
            latest.c.starts_at,
            latest.c.ends_at,
            func.row_number()
            .over(partition_by=latest.c.model_id, order_by=latest.c.position)
            .label("rank"),
            func.count().over(partition_by=latest.c.model_id).label("current"),
        )
        .select_from(latest.outerjoin(star, star.c.model_id == latest.c.model_id))
        .where(or_(star.c.starts_at.is_(None), quiet_after >= star.c.starts_at))
        .subquery("current")
    )
    return select(current).where(current.c.rank <= max(1, ranks))


def load_records(session: Session, windows: Sequence[Keyed]) -> list[LatestWindow]:
    """The records of ``windows``, in their order, read by primary key
    (:data:`RECORDS_PER_STATEMENT` a statement); a window deleted meanwhile, or holding a
    record of an older shape, is skipped."""
    found: dict[tuple[int, str, datetime], tuple[datetime, WindowRecord]] = {}
    for first in range(0, len(windows), RECORDS_PER_STATEMENT):
        part = windows[first : first + RECORDS_PER_STATEMENT]
        rows = session.execute(
            select(
                WindowResult.model_id,
                WindowResult.segment,
                WindowResult.starts_at,
                WindowResult.computed_at,
                WindowResult.record,
            ).where(
                tuple_(WindowResult.model_id, WindowResult.segment, WindowResult.starts_at).in_(
                    [(c.model_id, c.segment, c.start) for c in part]
                ),
                CURRENT_RECORD,
            )
        )
        for model_id, segment, start, computed_at, record in rows:
            found[(model_id, segment, start)] = (computed_at, cast(WindowRecord, record))
    out = []
    for c in windows:
        row = found.get((c.model_id, c.segment, c.start))
        if row is not None:
            out.append(
                LatestWindow(
                    model=c.model,
                    segment=c.segment,
                    start=c.start,
                    end=c.end,
                    computed_at=row[0],
                    record=row[1],
                )
            )
    return out


def last_window_records(
    session: Session, *, model: Model, segment: str, last: int, since: datetime | None = None
) -> list[WindowRecord]:
    """The stored records of ``segment`` of ``model``'s latest ``last`` windows (those ending
    after ``since`` when given) that hold a record of the current shape, oldest first: one
    query, newest first and limited to ``last`` rows, however long the segment's history."""
    query = select(WindowResult.record).where(
        WindowResult.model_id == model.id, WindowResult.segment == segment, CURRENT_RECORD
    )
    if since is not None:
        query = query.where(WindowResult.ends_at > since)
    records = session.scalars(query.order_by(WindowResult.starts_at.desc()).limit(last)).all()
    return [cast(WindowRecord, record) for record in reversed(records)]


def stored_record(
    session: Session, *, model_id: int, start: datetime, segment: str
) -> WindowRecord | None:
    """The stored record of one window and segment (by primary key); None when there is none
    or it is of an older shape."""
    stored = window_results.stored_record(
        session, model_id=model_id, start=start, segment=segment, current_only=True
    )
    return cast(WindowRecord | None, stored)


def stored_alerts(text: str | None) -> tuple[str, ...] | None:
    """The alert states of ``window_results.alerts`` (None: not judged when written)."""
    return None if text is None else _said(text)


@dataclass(slots=True)
class ModelWindows:
    """What the model list needs of one model's current latest windows: its ``*`` window's
    key, how many current segment windows it has and the newest ``computed_at`` among them
    all, and the windows whose alert states are not quiet or not judged yet (``*`` first,
    then the segments by name; ``alerts`` None for those not judged). A latest window holding
    a record of an older shape counts nowhere: its pair has no window computed yet."""

    star: LatestKey | None = None
    segments: int = 0
    computed: datetime | None = None
    flagged: list[tuple[LatestKey, tuple[str, ...] | None]] = field(default_factory=list)


def model_list_windows(session: Session) -> dict[str, ModelWindows]:
    """Per model name, :class:`ModelWindows` of its current latest windows, read in four
    statements whose rows number the models, plus the windows with alert states (or not
    judged yet): the models, their ``*`` windows, then per model (each an index range of
    ``window_results_latest``) how many current segment windows it has and the newest
    ``computed_at`` among them, then the flagged windows (a partial index). Models without a
    stored window are absent.

    The quiet rule is :func:`current_windows`' with the ``*`` window's length, the length of
    every window of a model (a model's window cannot change once it holds predictions)."""
    models = {
        model_id: (name, max_segments)
        for model_id, name, max_segments in session.execute(
            select(Model.id, Model.name, Model.max_segments)
        )
    }
    out: dict[str, ModelWindows] = {}
    stars = session.execute(
        select(
            WindowLatest.model_id,
            WindowLatest.starts_at,
            WindowLatest.ends_at,
            WindowLatest.computed_at,
            WindowLatest.alerts,
        ).where(WindowLatest.segment == ALL_SEGMENTS, CURRENT_LATEST)
    )
    for model_id, start, end, computed_at, alerts in stars:
        if model_id not in models:
            continue
        key = LatestKey(model_id, models[model_id][0], ALL_SEGMENTS, start, end, computed_at)
        said = stored_alerts(alerts)
        out[key.model] = ModelWindows(
            star=key, computed=computed_at, flagged=[] if said == () else [(key, said)]
        )
    if not models:
        return out
    bounds = _bounds(session)
    for model_id, count, computed_at in session.execute(_current_counts(bounds)):
        if not count or model_id not in models:
            continue
        kept = out.setdefault(models[model_id][0], ModelWindows())
        kept.segments = int(count)
        kept.computed = computed_at if kept.computed is None else max(kept.computed, computed_at)
    limits = {
        model_id: (cutoff, cap)
        for model_id, cutoff, cap in session.execute(select(bounds))
        if model_id in models
    }
    rows = sorted(session.execute(_flagged()), key=lambda row: (row[0], row[1]))
    for model_id, segment, position, start, alerts, end, computed_at in rows:
        if model_id not in limits or position is None:
            continue
        cutoff, cap = limits[model_id]
        if position >= cap or start < cutoff:
            continue
        name = models[model_id][0]
        flagged = out.setdefault(name, ModelWindows()).flagged
        if alerts is not None:
            flagged.append((LatestKey(model_id, name, segment, *UNREAD), _said(alerts)))
        else:
            flagged.append((LatestKey(model_id, name, segment, start, end, computed_at), None))
    return out


#: the period of a flagged window whose alert states are stored: the list does not read it
UNREAD: Final = (EARLIEST, EARLIEST, EARLIEST)


@functools.lru_cache(maxsize=4096)
def _said(alerts: str) -> tuple[str, ...]:
    """:func:`stored_alerts` of a stored text (the same few texts recur across segments)."""
    return tuple(json.loads(alerts))


def _bounds(session: Session) -> CTE:
    """Per model id: its quiet cutoff (``QUIET_SEGMENT_WINDOWS`` lengths of its ``*`` window
    before that window's start, whatever the shape of its record, as :func:`current_windows`
    has it for the other readers; :data:`EARLIEST` without one) and ``max_segments``, as a
    common table expression of one row per model."""
    star = aliased(WindowLatest)
    before = lengths_before(session, star.starts_at, star.ends_at, QUIET_SEGMENT_WINDOWS)
    return (
        select(
            Model.id.label("model_id"),
            type_coerce(
                func.coalesce(before, literal(EARLIEST, UTCDateTime())), UTCDateTime()
            ).label("cutoff"),
            Model.max_segments.label("max_segments"),
        )
        .outerjoin(star, and_(star.model_id == Model.id, star.segment == ALL_SEGMENTS))
        .cte("bounds")
    )


def _current(bounds: CTE, latest: Any) -> ColumnElement[bool]:
    """``latest`` is a current segment window of a model of ``bounds``: tracked below its
    ``max_segments``, starting at or after its cutoff, holding a record of the current shape."""
    return and_(
        latest.model_id == bounds.c.model_id,
        latest.starts_at >= bounds.c.cutoff,
        latest.position < bounds.c.max_segments,
        latest.record_version == RECORD_VERSION,
    )


def _flagged() -> Select[Any]:
    """The latest segment windows with alert states or not judged, holding a record of the
    current shape, read from a partial index (a small share of the windows): model id,
    segment, position, start, the stored alert states, and for those not judged their end and
    ``computed_at`` (to read and judge their records)."""
    unread = WindowLatest.alerts.is_(None)
    return select(
        WindowLatest.model_id,
        WindowLatest.segment,
        WindowLatest.position,
        WindowLatest.starts_at,
        WindowLatest.alerts,
        case((unread, WindowLatest.ends_at), else_=null()).label("ends_at"),
        case((unread, WindowLatest.computed_at), else_=null()).label("computed_at"),
    ).where(
        WindowLatest.segment != ALL_SEGMENTS,
        CURRENT_LATEST,
        # the partial index's condition, spelt as it is (a literal, not a parameter)
        or_(WindowLatest.alerts.is_(None), WindowLatest.alerts != literal_column("'[]'")),
    )


def _current_counts(bounds: CTE) -> Select[Any]:
    """Per model id: how many latest segment windows it has that are current (starting at
    or after its cutoff) and tracked below its ``max_segments``, and the newest
    ``computed_at`` among them; one row per model, each counted in an index range."""
    inner = aliased(WindowLatest)
    current = _current(bounds, inner)
    count = select(func.count()).where(current).correlate(bounds).scalar_subquery()
    newest = (
        select(inner.computed_at)
        .where(current)
        .order_by(inner.computed_at.desc())
        .limit(1)
        .correlate(bounds)
        .scalar_subquery()
    )
    return select(bounds.c.model_id, count, newest)
