"""Window results: compute and store one window (every segment at once), read them back,
and ask for recomputation.

A window is stored whole or not at all: its reads, every segment's evaluation and the writes of
its results, sorted scores and state are one transaction (on SQLite the reads are committed
first, so the write lock is not held while the metrics are computed). The record format, when
its parts are null, and the steps of a computation are in ``docs/scheduler.md`` ("Computing a
window", "The record").
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import numpy as np
from sqlalchemy import (
    and_,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.arrays import FloatArray
from app.db.models import Model, ModelSegment, Prediction, WindowResult, WindowScores, WindowState
from app.metrics.evaluation import evaluate_prepared, evaluate_ranked
from app.metrics.intervals import bootstrap_intervals, wilson_interval
from app.metrics.label_free import estimate_window
from app.metrics.prepared import PreparedSet, prepare
from app.metrics.resampling import cut_prepared, cut_with_fp
from app.metrics.split import drift_split, split_intervals_ranked
from app.services.planning import EPOCH, request_windows, still_due, window_epoch_seconds
from app.services.reference_cache import Reference, ReferenceCache
from app.services.references import encode_scores, references_for
from app.services.window_rows import ALL, UNTRACKED, load_rows, tracked_segments
from app.timeline import iso, window_length, window_start

LEVEL: Final = 0.95
#: two-key advisory lock class held by the transaction computing a model's window ("calW")
WINDOW_LOCK_CLASS: Final = 0x63616C57
#: PostgreSQL statement timeout inside a window's transaction (large windows read long)
COMPUTE_STATEMENT_TIMEOUT_MS: Final = 600_000
MAX_RECOMPUTE_WINDOWS: Final = 10_000
MAX_PAGE: Final = 1000


@dataclass(frozen=True, slots=True)
class ComputedWindow:
    """What one computation stored."""

    start: datetime
    end: datetime
    version: int
    predictions: int
    segments: list[str]
    overflow_segments: int
    overflow_predictions: int
    #: overflow predictions beyond those of the window's previous computation (what a
    #: counter of predictions in untracked segments should add)
    overflow_added: int


def _clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None, NumPy scalars plain numbers."""
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    return value


def _seed(model: Model, segment: str, start: datetime) -> int:
    """The bootstrap seed of a window and segment: a recomputation on the same data gives
    the same intervals."""
    return zlib.crc32(f"{model.name}|{segment}|{iso(start)}".encode())


def _keyed(values: dict[str, Any], model: Model, reference_key: str | None) -> dict[str, Any]:
    """Calibrated values (or intervals) keyed "reference" and repr(π0) per configured π0."""
    out: dict[str, Any] = {"reference": None if reference_key is None else values[reference_key]}
    for p in model.pi0:
        out[repr(float(p))] = values[repr(float(p))]
    return out


def evaluate_segment(
    *,
    model: Model,
    segment: str,
    start: datetime,
    end: datetime,
    scores: np.ndarray[Any, np.dtype[np.float64]],
    labels: np.ndarray[Any, np.dtype[np.int8]],
    reference: Reference | None,
    computed_at: datetime,
) -> tuple[dict[str, Any], bytes, bytes]:
    """The record of one segment of a window, and its sorted positives and negatives.

    ``labels`` is -1 for predictions without a label (counted in ``unlabelled`` only).
    """
    labelled = labels >= 0
    prepared = prepare(scores[labelled], labels[labelled], score_kind=model.score_kind)
    usable = reference is not None and reference.n > 0
    ref_prior: float | None = (
        reference.evaluation["prior"] if reference is not None and usable else None
    )
    pi0 = [float(p) for p in model.pi0]
    reference_key: str | None = None
    if ref_prior is not None and 0.0 < ref_prior < 1.0:
        reference_key = repr(float(ref_prior))
        if float(ref_prior) not in pi0:
            pi0.append(float(ref_prior))
    result = evaluate_prepared(
        prepared, threshold=model.threshold, pi0=pi0, score_kind=model.score_kind
    )
    seed = _seed(model, segment, start)
    intervals = bootstrap_intervals(
        prepared,
        threshold=model.threshold,
        pi0=pi0,
        level=LEVEL,
        seed=seed,
        score_kind=model.score_kind,
    )
    split: dict[str, Any] | None = None
    if reference is not None and usable:
        split = _split(
            model=model, prepared=prepared, window=result, reference=reference, seed=seed
        )
    record: dict[str, Any] = {
        "start": iso(start),
        "end": iso(end),
        "segment": segment,
        "computed_at": iso(computed_at),
        "n": result["n"],
        "n_pos": result["n_pos"],
        "unlabelled": int(labels.size - np.count_nonzero(labelled)),
        "prior": result["prior"],
        "prior_interval": wilson_interval(result["n_pos"], result["n"]),
        "regular": result["regular"],
        "calibrated": _keyed(result["calibrated"], model, reference_key),
        "intervals": {
            "regular": intervals["regular"],
            "calibrated": _keyed(intervals["calibrated"], model, reference_key),
        },
        "split": split,
        "reference": reference.summary() if reference is not None else None,
        "estimated": estimate_window(
            reference.label_shift if reference is not None else None,
            all_sorted(prepared, scores[~labelled]),
            threshold=model.threshold,
            pi0=[float(p) for p in model.pi0],
            seed=seed,
        ),
    }
    if "reliability" in result:
        record["reliability"] = result["reliability"]
    record["segments_overflow"] = None
    return (
        _clean(record),
        encode_scores(prepared.pos_sorted),
        encode_scores(prepared.neg_sorted),
    )


def all_sorted(prepared: PreparedSet, unlabelled: FloatArray) -> FloatArray:
    """Every scored prediction of a window ascending (n,): only the unlabelled scores are
    sorted here; the classes, already sorted, are merged with them (a stable sort of three
    ascending runs is a merge, O(n))."""
    out: FloatArray = np.sort(
        np.concatenate((prepared.pos_sorted, prepared.neg_sorted, np.sort(unlabelled))),
        kind="stable",
    )
    return out


def _split(
    *,
    model: Model,
    prepared: PreparedSet,
    window: dict[str, Any],
    reference: Reference,
    seed: int,
) -> dict[str, Any]:
    """The drift split of a window's result against its reference, with the 95% intervals
    of both parts (``docs/metrics.md``).

    ``window`` was evaluated with the reference prior among its π0; the reference, pooled and
    cached without calibrated values, is evaluated here at the window's prior (O(K) from its
    ranking). Both are needed only when both priors are in (0, 1); otherwise every part and
    interval is None.
    """
    window_prior, ref_prior = window["prior"], reference.evaluation["prior"]
    calibratable = all(p is not None and 0.0 < p < 1.0 for p in (window_prior, ref_prior))
    ref_result = reference.evaluation
    if calibratable:
        ref_result = evaluate_ranked(
            reference.ranking,
            reference.sums,
            threshold=model.threshold,
            pi0=(float(window_prior),),
            score_kind=model.score_kind,
        )
    split = drift_split(window, ref_result)
    bounds = (
        split_intervals_ranked(
            prepared.ranking,
            cut_prepared(prepared, model.threshold),
            reference.ranking,
            cut_with_fp(reference.ranking, model.threshold, reference.sums.fp),
            level=LEVEL,
            seed=seed,
        )
        if calibratable
        else {}
    )
    for name, parts in split.items():
        metric_bounds = bounds.get(name, {})
        parts["prior_interval"] = metric_bounds.get("prior")
        parts["likelihood_interval"] = metric_bounds.get("likelihood")
    return split


def _register_segments(session: Session, *, model: Model, start: datetime, now: datetime) -> int:
    """Track the segments of this window not tracked yet, first seen first, while the model
    tracks fewer than ``max_segments``; returns how many were added."""
    taken = session.scalar(select(func.count()).where(ModelSegment.model_id == model.id)) or 0
    room = model.max_segments - taken
    if room <= 0:
        return 0
    end = start + window_length(model.window)
    first_seen = func.min(Prediction.received_at)
    rows = session.execute(
        select(Prediction.segment, first_seen)
        .where(
            Prediction.model_id == model.id,
            Prediction.ts >= start,
            Prediction.ts < end,
            Prediction.segment.is_not(None),
            ~exists().where(
                ModelSegment.model_id == model.id, ModelSegment.name == Prediction.segment
            ),
        )
        .group_by(Prediction.segment)
        .order_by(first_seen, Prediction.segment)
        .limit(room)
    ).all()
    last = session.scalar(
        select(func.max(ModelSegment.position)).where(ModelSegment.model_id == model.id)
    )
    position = -1 if last is None else last
    for name, _ in rows:
        position += 1
        session.add(
            ModelSegment(model_id=model.id, name=name, position=position, first_seen_at=now)
        )
    session.flush()
    return len(rows)


def _overflow_segments(session: Session, *, model: Model, start: datetime) -> int:
    """Distinct segments of the window beyond the model's cap."""
    end = start + window_length(model.window)
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


def _stored_overflow(session: Session, *, model: Model, start: datetime) -> int:
    """Overflow predictions of the window's stored result (0 if none is stored yet)."""
    record = session.scalar(
        select(WindowResult.record).where(
            WindowResult.model_id == model.id,
            WindowResult.starts_at == start,
            WindowResult.segment == ALL,
        )
    )
    overflow = (record or {}).get("segments_overflow") or {}
    return int(overflow.get("predictions") or 0)


def window_claim_key(model: Model, start: datetime) -> tuple[int, int]:
    """The two-key advisory lock that claims one window: (-model id, the window's start in
    Unix seconds as a signed 32-bit integer). The negative first key keeps it apart from the
    model lock ``(WINDOW_LOCK_CLASS, model id)``; starts are unique within 136 years."""
    seconds = int((start - EPOCH).total_seconds()) % 2**32
    return -model.id, seconds - 2**32 if seconds >= 2**31 else seconds


def _begin(session: Session, *, model: Model, start: datetime, instance: str) -> bool:
    """Open the window's transaction and claim the window: one snapshot for every read
    (PostgreSQL: repeatable read and a long statement timeout). SQLite transactions are
    serialisable already, and SQLite has a single scheduler.

    On PostgreSQL the claim is two transaction-level advisory locks, taken without waiting
    (False when either is taken elsewhere) and released when the transaction ends, commit,
    rollback or a dead connection alike: the model lock ``(WINDOW_LOCK_CLASS, model id)``,
    exclusive for a model with a trailing reference (its windows are computed one at a time,
    oldest first, as each one's reference is made of the windows before it) and shared
    otherwise, and the window's own lock (:func:`window_claim_key`). The change scan takes
    the model lock exclusively (:func:`lock_model_for_scan`), so it never runs while a window
    of the model is being computed. The locks are the transaction's first statement, so its
    snapshot is taken just before they are granted: a computation committed in between makes
    this one fail when it writes the window's state (a serialisation failure), never store
    twice. While the transaction lasts its ``application_name`` names the scheduler instance
    (``pg_stat_activity`` shows who computes what).
    """
    if session.get_bind().dialect.name != "postgresql":
        session.connection()
        return True
    session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    model_lock = (
        "pg_try_advisory_xact_lock"
        if model.reference_kind == "trailing"
        else "pg_try_advisory_xact_lock_shared"
    )
    key, window = window_claim_key(model, start)
    claimed = bool(
        session.scalar(
            text(
                f"SELECT {model_lock}(:cls, :obj)"
                " AND pg_try_advisory_xact_lock(CAST(:key AS integer), CAST(:window AS integer))"
            ),
            {"cls": WINDOW_LOCK_CLASS, "obj": model.id, "key": key, "window": window},
        )
    )
    session.execute(
        text(
            "SELECT set_config('statement_timeout', :value, true),"
            " set_config('application_name', :name, true)"
        ),
        {"value": str(COMPUTE_STATEMENT_TIMEOUT_MS), "name": f"calmon-window {instance}"[:63]},
    )
    return claimed


def lock_model_for_scan(session: Session, *, model: Model) -> None:
    """Wait for the model lock exclusively (PostgreSQL; nothing on SQLite): the windows of the
    model being computed commit first, and none starts until the session's transaction ends.
    A scan then never races a computation of the same model (it would compare a window's
    fingerprint with a checkpoint being replaced)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    session.execute(
        text("SELECT pg_advisory_xact_lock(:cls, :obj)"),
        {"cls": WINDOW_LOCK_CLASS, "obj": model.id},
    )


def compute_window(
    session: Session,
    *,
    model: Model,
    start: datetime,
    now: datetime,
    instance: str,
    cache: ReferenceCache,
    margin: timedelta,
    pause_before_commit: float = 0.0,
    only_due: bool = False,
) -> ComputedWindow | None:
    """Compute every segment of the window of ``model`` that starts at ``start`` and store the
    results; the session's transaction must not have begun, and the caller commits the
    writes (SQLite: the reads were committed before the evaluation).

    ``now`` is taken before the transaction begins; it becomes the window's checkpoint.
    Returns None when the window has no state or another scheduler is computing it.
    ``pause_before_commit`` (a testing hook) sleeps after everything is written.

    ``only_due`` (the scheduler's claims): return None, computing nothing, unless the window
    is still due in the transaction's snapshot (another scheduler may have computed it since
    it was planned) and, for a trailing reference, no older window of the model is due (it
    must be computed first, being part of this window's reference).
    """
    if not _begin(session, model=model, start=start, instance=instance):
        return None
    state = session.get(WindowState, (model.id, start))
    if state is None:
        return None
    if only_due and not still_due(session, model=model, state=state, now=now):
        return None
    version = state.version
    end = start + window_length(model.window)
    segments = tracked_segments(session, model=model)
    references = references_for(
        session, model=model, window_start=start, segments=segments, cache=cache
    )
    rows = load_rows(session, model=model, start=start, end=end, band_since=now - margin)
    if np.any(rows.segments == UNTRACKED) and _register_segments(
        session, model=model, start=start, now=now
    ):
        del rows
        segments = tracked_segments(session, model=model)
        references = references_for(
            session, model=model, window_start=start, segments=segments, cache=cache
        )
        rows = load_rows(session, model=model, start=start, end=end, band_since=now - margin)
    band = rows.band
    assert band is not None
    overflow_predictions = int(np.count_nonzero(rows.segments == UNTRACKED))
    overflow_segments = (
        _overflow_segments(session, model=model, start=start) if overflow_predictions else 0
    )
    if session.get_bind().dialect.name == "sqlite":
        # SQLite has one writer at a time: do not hold the write lock while evaluating. What
        # commits meanwhile is a change after the checkpoint, found by the next scan.
        session.commit()
    groups: list[tuple[str, int | None]] = [(ALL, None)]
    present = set(np.unique(rows.segments).tolist())
    groups += [
        (name, position) for position, name in sorted(segments.items()) if position in present
    ]
    overflow = {"segments": overflow_segments, "predictions": overflow_predictions}
    outputs = []
    for name, position in groups:
        if position is None:
            scores, labels = rows.scores, rows.labels
        else:
            mask = rows.segments == position
            scores, labels = rows.scores[mask], rows.labels[mask]
        computed_at = datetime.now(UTC)
        record, positives, negatives = evaluate_segment(
            model=model,
            segment=name,
            start=start,
            end=end,
            scores=scores,
            labels=labels,
            reference=references.get(name),
            computed_at=computed_at,
        )
        record["segments_overflow"] = overflow if name == ALL else None
        outputs.append((name, computed_at, record, positives, negatives))
        del scores, labels
    predictions = int(rows.scores.size)
    del rows
    overflow_added = overflow_predictions and max(
        0, overflow_predictions - _stored_overflow(session, model=model, start=start)
    )
    for table in (WindowResult, WindowScores):
        session.execute(delete(table).where(table.model_id == model.id, table.starts_at == start))
    for name, computed_at, record, positives, negatives in outputs:
        session.execute(
            insert(WindowResult).values(
                model_id=model.id,
                segment=name,
                starts_at=start,
                ends_at=end,
                computed_at=computed_at,
                computed_by=instance,
                version=version,
                n=record["n"],
                n_pos=record["n_pos"],
                unlabelled=record["unlabelled"],
                prior=record["prior"],
                record=record,
            )
        )
        session.execute(
            insert(WindowScores).values(
                model_id=model.id,
                segment=name,
                starts_at=start,
                version=version,
                positives=positives,
                negatives=negatives,
            )
        )
    state.computed_version = version
    state.checkpoint_at = now
    state.band_count = band.count
    state.band_sum = band.total
    state.requested_at = None
    state.failures = 0
    state.retry_at = None
    session.flush()
    if pause_before_commit:
        time.sleep(pause_before_commit)
    return ComputedWindow(
        start=start,
        end=end,
        version=version,
        predictions=predictions,
        segments=[name for name, *_ in outputs],
        overflow_segments=overflow_segments,
        overflow_predictions=overflow_predictions,
        overflow_added=overflow_added,
    )


@dataclass(frozen=True, slots=True)
class Page:
    """One page of window records and the cursor of the next page (None: no more)."""

    records: list[dict[str, Any]]
    next_cursor: str | None


def encode_cursor(start: datetime, segment: str) -> str:
    """An opaque cursor after the record of ``start`` and ``segment``."""
    return f"{int(start.timestamp())}:{segment}"


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (start, segment) of :func:`encode_cursor`; ValueError for anything else."""
    seconds, sep, segment = cursor.partition(":")
    if not sep or not seconds.lstrip("-").isdigit() or not segment:
        raise ValueError("not a cursor of this API")
    return datetime.fromtimestamp(int(seconds), tz=UTC), segment


def list_window_results(
    session: Session,
    *,
    model: Model,
    start: datetime | None,
    end: datetime | None,
    segment: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> Page:
    """Stored records of ``model``'s windows overlapping ``[start, end)``, oldest first and,
    within a window, segment ``*`` first then by name; at most ``limit`` after ``after``."""
    segment_order: Any = WindowResult.segment
    if session.get_bind().dialect.name == "postgresql":
        segment_order = WindowResult.segment.collate("C")
    query = select(WindowResult.starts_at, WindowResult.segment, WindowResult.record).where(
        WindowResult.model_id == model.id
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
    rows = session.execute(
        query.order_by(WindowResult.starts_at, segment_order).limit(limit + 1)
    ).all()
    records = [record for _, _, record in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        last_start, last_segment, _ = rows[limit - 1]
        next_cursor = encode_cursor(last_start, last_segment)
    return Page(records=records, next_cursor=next_cursor)


def windows_in_range(model: Model, start: datetime, end: datetime) -> list[datetime]:
    """Starts of the model's windows that overlap ``[start, end)``."""
    length = window_length(model.window)
    cursor = window_start(start, model.window)
    starts: list[datetime] = []
    while cursor < end:
        starts.append(cursor)
        cursor += length
    return starts


def request_recompute(
    session: Session, *, model: Model, start: datetime, end: datetime, now: datetime
) -> list[datetime]:
    """Mark for recomputation the windows of ``model`` that overlap ``[start, end)``, have
    ended and hold predictions; returns their starts. The caller commits; the scheduler
    computes them at its next tick, without waiting for the grace period.

    Set-based, whatever the number of windows in the range: one grouped query finds the
    windows that hold predictions, one the windows already known, one insert adds the others
    (a window the scheduler or a concurrent request adds meanwhile is left as it is) and one
    update marks them all."""
    length = window_length(model.window)
    starts = [s for s in windows_in_range(model, start, end) if s + length <= now]
    if not starts:
        return []
    seconds = int(length.total_seconds())
    bucket = window_epoch_seconds(session, seconds)
    holding = {
        EPOCH + timedelta(seconds=int(epoch_seconds))
        for epoch_seconds in session.scalars(
            select(bucket)
            .where(
                Prediction.model_id == model.id,
                Prediction.ts >= starts[0],
                Prediction.ts < starts[-1] + length,
            )
            .group_by(bucket)
        )
    }
    known = set(
        session.scalars(
            select(WindowState.starts_at).where(
                WindowState.model_id == model.id,
                WindowState.starts_at >= starts[0],
                WindowState.starts_at <= starts[-1],
            )
        )
    )
    chosen = sorted(holding | (known & set(starts)))
    fresh = [window for window in chosen if window not in known]
    if fresh:
        columns = WindowState.__table__.columns
        states = [
            WindowState.first_seen(
                model_id=model.id, starts_at=window, ends_at=window + length, version=0, now=now
            )
            for window in fresh
        ]
        dialect_insert = (
            pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
        )
        session.execute(
            dialect_insert(WindowState).on_conflict_do_nothing(),
            [{column.key: getattr(state, column.key) for column in columns} for state in states],
        )
    request_windows(session, model_id=model.id, starts=chosen, now=now)
    return chosen
