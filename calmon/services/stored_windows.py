"""Every read of stored window records that the exporter and the web view make, in one place.

The latest window of each (model, segment) pair is read from ``window_results_latest``
(:class:`~calmon.db.models.WindowLatest`), which triggers keep from ``window_results`` in the
transaction that writes the records (``docs/storage.md``, "The latest windows"): one row per
pair, so a reader of every model's latest windows reads at most models x (1 + max_segments)
small rows instead of probing ``window_results`` once per pair, and the records themselves
only for the windows it shows (:func:`load_records`, by primary key).

Which pairs count: segment ``*`` and each model's tracked segments below ``max_segments``
(:func:`_pairs`); a segment whose latest window started more than ``QUIET_SEGMENT_WINDOWS``
window lengths before the model's ``*`` window is left out (:func:`current_windows`, and the
same rule in SQL where the readers count or rank in the database).

Readers: the exporter (:mod:`calmon.exporter.snapshot` builds its samples from
:func:`latest_stars`, :func:`ranked_segments`, :func:`latest_keys` and :func:`load_records`),
the model list (:func:`model_list_windows`) and a model's page (:func:`load_latest_windows`,
:func:`last_window_records`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol, TypeVar, cast

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Subquery,
    and_,
    column,
    func,
    literal,
    or_,
    select,
    tuple_,
    union_all,
    values,
)
from sqlalchemy.orm import Session

from calmon.db.backend import epoch_microseconds
from calmon.db.models import Model, ModelSegment, UTCDateTime, WindowLatest, WindowResult
from calmon.names import ALL_SEGMENTS
from calmon.records import WindowRecord

#: a segment whose latest window is older than the model's by more windows is not shown
QUIET_SEGMENT_WINDOWS: Final = 7
#: windows whose records one statement reads (three bound parameters each)
RECORDS_PER_STATEMENT: Final = 500
#: ``window_results.alerts`` of a quiet record
QUIET: Final = "[]"


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
    """Each model's current segment windows (the latest of each tracked segment, at most
    ``QUIET_SEGMENT_WINDOWS`` window lengths before the model's ``*`` window, or any without
    one) with their rank by position and the model's count of them: the first ``ranks`` of
    each model, and its first one in any case (it carries the count). Columns: model id,
    segment, position, start, end, rank, count."""
    latest = _latest_of(
        _pairs(part="segments"), WindowLatest.starts_at, WindowLatest.ends_at
    ).subquery("segment_latest")
    star = (
        select(WindowLatest.model_id, WindowLatest.starts_at)
        .where(WindowLatest.segment == ALL_SEGMENTS)
        .subquery("star_latest")
    )
    start = epoch_microseconds(session, latest.c.starts_at)
    length = epoch_microseconds(session, latest.c.ends_at) - start
    quiet_before = epoch_microseconds(session, star.c.starts_at) - QUIET_SEGMENT_WINDOWS * length
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
        .where(or_(star.c.starts_at.is_(None), start >= quiet_before))
        .subquery("current")
    )
    return select(current).where(current.c.rank <= max(1, ranks))


def load_records(session: Session, windows: Sequence[Keyed]) -> list[LatestWindow]:
    """The records of ``windows``, in their order, read by primary key
    (:data:`RECORDS_PER_STATEMENT` a statement); a window deleted meanwhile is skipped."""
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
                )
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
    after ``since`` when given), oldest first: one query, newest first and limited to
    ``last`` rows, however long the segment's history."""
    query = select(WindowResult.record).where(
        WindowResult.model_id == model.id, WindowResult.segment == segment
    )
    if since is not None:
        query = query.where(WindowResult.ends_at > since)
    records = session.scalars(query.order_by(WindowResult.starts_at.desc()).limit(last)).all()
    return [cast(WindowRecord, record) for record in reversed(records)]


def stored_alerts(text: str | None) -> tuple[str, ...] | None:
    """The alert states of ``window_results.alerts`` (None: not judged when written)."""
    return None if text is None else tuple(json.loads(text))


@dataclass(slots=True)
class ModelWindows:
    """What the model list needs of one model's current latest windows: its ``*`` window's
    key, how many current segment windows it has and the newest ``computed_at`` among them
    all, and the windows whose alert states are not quiet or not judged yet (``*`` first,
    then the segments by name; ``alerts`` None for those not judged)."""

    star: LatestKey | None = None
    segments: int = 0
    computed: datetime | None = None
    flagged: list[tuple[LatestKey, tuple[str, ...] | None]] = field(default_factory=list)


def model_list_windows(session: Session) -> dict[str, ModelWindows]:
    """Per model name, :class:`ModelWindows` of its current latest windows, read in three
    statements that return one row per model and one per window with an alert (or not yet
    judged): the ``*`` windows, then the segments counted in the database, then the flagged
    ones. Models without a stored window are absent.

    The quiet rule is :func:`current_windows`' with the ``*`` window's length, the length of
    every window of a model (a model's window cannot change once it holds predictions)."""
    names = dict(session.execute(select(Model.id, Model.name)).tuples().all())
    out: dict[str, ModelWindows] = {}
    cutoffs: list[tuple[int, datetime]] = []
    stars = session.execute(
        select(
            WindowLatest.model_id,
            WindowLatest.starts_at,
            WindowLatest.ends_at,
            WindowLatest.computed_at,
            WindowLatest.alerts,
        ).where(WindowLatest.segment == ALL_SEGMENTS)
    )
    for model_id, start, end, computed_at, alerts in stars:
        if model_id not in names:
            continue
        key = LatestKey(model_id, names[model_id], ALL_SEGMENTS, start, end, computed_at)
        said = stored_alerts(alerts)
        out[key.model] = ModelWindows(
            star=key,
            computed=computed_at,
            flagged=[] if said == () else [(key, said)],
        )
        cutoffs.append((model_id, start - QUIET_SEGMENT_WINDOWS * (end - start)))
    current = _current_segments(cutoffs)
    for model_id, count, computed_at in session.execute(
        current.with_only_columns(
            WindowLatest.model_id, func.count(), func.max(WindowLatest.computed_at)
        ).group_by(WindowLatest.model_id)
    ):
        if model_id not in names:
            continue
        kept = out.setdefault(names[model_id], ModelWindows())
        kept.segments = int(count)
        kept.computed = computed_at if kept.computed is None else max(kept.computed, computed_at)
    flagged = current.with_only_columns(
        WindowLatest.model_id,
        WindowLatest.segment,
        WindowLatest.starts_at,
        WindowLatest.ends_at,
        WindowLatest.computed_at,
        WindowLatest.alerts,
    ).where(or_(WindowLatest.alerts.is_(None), WindowLatest.alerts != QUIET))
    rows = sorted(session.execute(flagged).tuples(), key=lambda row: (row[0], row[1]))
    for model_id, segment, start, end, computed_at, alerts in rows:
        if model_id not in names:
            continue
        key = LatestKey(model_id, names[model_id], segment, start, end, computed_at)
        out[key.model].flagged.append((key, stored_alerts(alerts)))
    return out


def _current_segments(cutoffs: list[tuple[int, datetime]]) -> Select[Any]:
    """The latest windows of every model's tracked segments below ``max_segments`` that are
    current: starting at or after the model's ``cutoffs`` entry, or any when it has none."""
    query = (
        select(WindowLatest.model_id)
        .join(Model, Model.id == WindowLatest.model_id)
        .join(
            ModelSegment,
            and_(
                ModelSegment.model_id == WindowLatest.model_id,
                ModelSegment.name == WindowLatest.segment,
            ),
        )
        .where(ModelSegment.position < Model.max_segments)
    )
    if not cutoffs:
        return query
    bounds = values(
        column("model_id", Integer), column("cutoff", UTCDateTime()), name="cutoffs"
    ).data(cutoffs)
    cutoff: ColumnElement[Any] = bounds.c.cutoff
    return query.outerjoin(bounds, bounds.c.model_id == WindowLatest.model_id).where(
        or_(cutoff.is_(None), WindowLatest.starts_at >= cutoff)
    )
