"""Compute one window of a model, every segment at once, and store it.

A window is stored whole or not at all: its claim, reads, every segment's evaluation and the
writes of its records, sorted scores and state are one transaction, which the caller commits.
On SQLite (one writer at a time) the reads are a transaction that only reads, never taking the
write lock, and end before the evaluation; newly seen segments are registered in a short
writing transaction of their own, and the records written in another, so the API's writes
wait for the scheduler only for those writes, never for a window's reads or evaluation. The
steps and the reasons for them: ``docs/reference/scheduler.md`` ("Computing a window", "Segments",
"Scaling out").

Each segment's record is built by :func:`calmon.services.windows.record.evaluate_segment`, with
the model's settings as a :class:`~calmon.metrics.window_evaluation.WindowConfig`
(:func:`window_config`, read from the model's row here, at the service's boundary); here are the
reads, what the pooled decision reads (:mod:`calmon.services.windows.decisions`) and the
writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

import numpy as np
from sqlalchemy.orm import Session

from calmon.clock import SYSTEM_CLOCK, Clock
from calmon.db.backend import single_writer
from calmon.db.models import Model, ModelSegment, WindowState
from calmon.db.session import begin_read_only
from calmon.db.window_results import stored_record
from calmon.db.window_rows import (
    UNTRACKED,
    WindowRows,
    last_segment_position,
    new_segments,
    segment_count,
    tracked_segments,
    untracked_segment_count,
)
from calmon.db.window_states import Fingerprint, stored_version
from calmon.db.window_writes import model_updated_at_for_share, replace_results
from calmon.metrics.window_evaluation import WindowConfig
from calmon.names import ALL_SEGMENTS
from calmon.records import RECORD_VERSION, SegmentsOverflow, WindowRecord
from calmon.services.windows.decisions import trailing_pool
from calmon.services.windows.locks import begin_window
from calmon.services.windows.planning import still_due
from calmon.services.windows.record import (
    ComputedWindow,
    TrailingPool,
    evaluate_segment,
    record_alerts,
)
from calmon.services.windows.reference_cache import Reference, ReferenceCache
from calmon.services.windows.references import encode_scores, references_for
from calmon.services.windows.rows import load_rows
from calmon.timeline import window_length


def window_config(model: Model) -> WindowConfig:
    """The settings of ``model`` the metric engine evaluates its windows with."""
    return WindowConfig(
        threshold=model.threshold,
        score_kind=model.score_kind,
        pi0=tuple(float(p) for p in model.pi0),
        objective=model.objective,
    )


def _register_segments(session: Session, *, model: Model, start: datetime, now: datetime) -> int:
    """Track the segments of this window not tracked yet, first seen first, while the model
    tracks fewer than ``max_segments``; returns how many were added."""
    room = model.max_segments - segment_count(session, model_id=model.id)
    if room <= 0:
        return 0
    end = start + window_length(model.window)
    names = new_segments(session, model_id=model.id, start=start, end=end, limit=room)
    last = last_segment_position(session, model_id=model.id)
    position = -1 if last is None else last
    for name in names:
        position += 1
        session.add(
            ModelSegment(model_id=model.id, name=name, position=position, first_seen_at=now)
        )
    session.flush()
    return len(names)


def _overflow_segments(session: Session, *, model: Model, start: datetime) -> int:
    """Distinct segments of the window beyond the model's cap."""
    end = start + window_length(model.window)
    return untracked_segment_count(session, model=model, start=start, end=end)


def _stored_overflow(session: Session, *, model: Model, start: datetime) -> int:
    """Overflow predictions of the window's stored result (0 if none is stored yet)."""
    stored = stored_record(
        session, model_id=model.id, start=start, segment=ALL_SEGMENTS, current_only=False
    )
    record = cast(WindowRecord | None, stored)
    overflow = None if record is None else record["segments_overflow"]
    return 0 if overflow is None else overflow["predictions"]


class WindowChangedError(Exception):
    """The window's state or its model's configuration changed after the window's inputs were
    read: nothing was stored, and the window is planned again if still due."""


@dataclass(frozen=True, slots=True)
class _Claimed:
    """A claimed window: the model's configuration and the window's state read under the
    claim, the version being computed and the window's end."""

    model: Model
    state: WindowState
    version: int
    end: datetime


def _claim(
    session: Session,
    *,
    model: Model,
    start: datetime,
    now: datetime,
    instance: str,
    only_due: bool,
) -> _Claimed | None:
    """Step 1: begin the window's transaction under its claim and read, in its snapshot, the
    model's configuration and the window's state: None when another scheduler holds the claim, the
    model or the window's state is gone, the model's reference kind is no longer the one the
    claim was taken for, or (``only_due``) the window is no longer due in this snapshot.

    ``model`` may have been read long before (the scheduler's plan): only its id and reference
    kind choose the claim; everything computed uses the configuration read here."""
    if not begin_window(session, model=model, start=start, instance=instance):
        return None
    current = session.get(Model, model.id, populate_existing=True)
    if current is None or current.reference_kind != model.reference_kind:
        return None
    state = session.get(WindowState, (model.id, start))
    if state is None:
        return None
    if only_due and not still_due(session, model=current, state=state, now=now):
        return None
    return _Claimed(current, state, state.version, start + window_length(current.window))


def _confirm_current(session: Session, *, model: Model, state: WindowState, version: int) -> None:
    """Raise :class:`WindowChangedError` unless the model's configuration and the window's
    version are still those the window was computed with. On PostgreSQL the model's row is
    locked ``FOR SHARE`` until commit, so a configuration change waits for this window (and a
    change committed since the snapshot makes the lock fail as a serialisation failure); on
    SQLite, whose reads were committed before the evaluation, the stored values are compared."""
    updated_at = model_updated_at_for_share(session, model_id=model.id)
    stored = stored_version(session, model_id=state.model_id, start=state.starts_at)
    if updated_at != model.updated_at or stored != version:
        raise WindowChangedError(
            f"window {state.starts_at.isoformat()} of model {model.id} changed while computed"
        )


def _read_inputs(
    session: Session,
    *,
    model: Model,
    start: datetime,
    end: datetime,
    band_since: datetime,
    cache: ReferenceCache,
) -> tuple[dict[int, str], dict[str, Reference | None], WindowRows]:
    """The model's tracked segments, their references (built before the window's rows are
    read), and the window's rows with the fingerprint of those changed since
    ``band_since``."""
    segments = tracked_segments(session, model=model)
    references = references_for(
        session, model=model, window_start=start, segments=segments, cache=cache
    )
    rows = load_rows(session, model=model, start=start, end=end, band_since=band_since)
    return segments, references, rows


def _load_window(
    session: Session,
    *,
    model: Model,
    start: datetime,
    end: datetime,
    now: datetime,
    band_since: datetime,
    cache: ReferenceCache,
) -> tuple[dict[int, str], dict[str, Reference | None], WindowRows]:
    """:func:`_read_inputs`, read again when the window's untracked segments got some of
    them registered (tracked from ``now``)."""
    segments, references, rows = _read_inputs(
        session, model=model, start=start, end=end, band_since=band_since, cache=cache
    )
    if np.any(rows.segments == UNTRACKED) and _register_in_place(
        session, model=model, start=start, now=now
    ):
        del rows
        segments, references, rows = _read_inputs(
            session, model=model, start=start, end=end, band_since=band_since, cache=cache
        )
    return segments, references, rows


def _register_in_place(session: Session, *, model: Model, start: datetime, now: datetime) -> int:
    """:func:`_register_segments` inside the window's transaction; where one writer at a time
    may write, in a short writing transaction of its own between two reading ones (the
    window's reads hold no write lock), committed at once."""
    if not single_writer(session):
        return _register_segments(session, model=model, start=start, now=now)
    session.commit()
    added = _register_segments(session, model=model, start=start, now=now)
    session.commit()
    begin_read_only(session)
    return added


def _overflow(
    session: Session, *, model: Model, start: datetime, rows: WindowRows
) -> SegmentsOverflow:
    """The window's predictions in segments beyond the cap and how many such segments: the
    ``segments_overflow`` of its ``*`` record."""
    predictions = int(np.count_nonzero(rows.segments == UNTRACKED))
    segments = _overflow_segments(session, model=model, start=start) if predictions else 0
    return {"segments": segments, "predictions": predictions}


@dataclass(frozen=True, slots=True)
class _SegmentOutput:
    """One segment's evaluation, to be stored."""

    name: str
    computed_at: datetime
    record: WindowRecord
    positives: bytes
    negatives: bytes


def _segment_groups(rows: WindowRows, segments: dict[int, str]) -> list[tuple[str, int | None]]:
    """``*`` (position None), then each tracked segment present in the window by position."""
    groups: list[tuple[str, int | None]] = [(ALL_SEGMENTS, None)]
    present = set(np.unique(rows.segments).tolist())
    groups += [
        (name, position) for position, name in sorted(segments.items()) if position in present
    ]
    return groups


def _trailing_pools(
    session: Session,
    *,
    model: Model,
    start: datetime,
    rows: WindowRows,
    segments: dict[int, str],
    cache: ReferenceCache,
) -> dict[str, TrailingPool | None]:
    """What each segment's decision pools besides the window (read with the window's inputs,
    in its snapshot)."""
    positive = rows.labels == 1
    out: dict[str, TrailingPool | None] = {}
    for name, position in _segment_groups(rows, segments):
        mask = positive if position is None else positive & (rows.segments == position)
        out[name] = trailing_pool(
            session,
            model=model,
            segment=name,
            segments=segments,
            start=start,
            window_positives=int(np.count_nonzero(mask)),
            cache=cache,
        )
    return out


def _evaluate_segments(
    *,
    model: Model,
    start: datetime,
    end: datetime,
    rows: WindowRows,
    segments: dict[int, str],
    references: dict[str, Reference | None],
    overflow: SegmentsOverflow,
    trailing: dict[str, TrailingPool | None],
    clock: Clock,
) -> list[_SegmentOutput]:
    """Evaluate ``*``, then each tracked segment present in the window by position; the
    record of ``*`` carries ``overflow``; ``trailing``: what each segment's decision pools;
    each segment's ``computed_at`` is read from ``clock`` as its evaluation begins."""
    config = window_config(model)
    outputs = []
    for name, position in _segment_groups(rows, segments):
        if position is None:
            scores, labels = rows.scores, rows.labels
        else:
            mask = rows.segments == position
            scores, labels = rows.scores[mask], rows.labels[mask]
        computed_at = clock.now()
        record, positives, negatives = evaluate_segment(
            config=config,
            segment=name,
            start=start,
            end=end,
            scores=scores,
            labels=labels,
            reference=references.get(name),
            computed_at=computed_at,
            trailing=trailing.get(name),
            overflow=overflow if position is None else None,
        )
        outputs.append(
            _SegmentOutput(
                name, computed_at, record, encode_scores(positives), encode_scores(negatives)
            )
        )
        del scores, labels
    return outputs


def _replace_results(
    session: Session,
    *,
    model: Model,
    start: datetime,
    end: datetime,
    version: int,
    instance: str,
    outputs: list[_SegmentOutput],
) -> None:
    """Replace the window's stored records and sorted scores with ``outputs``."""
    replace_results(
        session,
        model_id=model.id,
        start=start,
        rows=[
            (
                {
                    "model_id": model.id,
                    "segment": output.name,
                    "starts_at": start,
                    "ends_at": end,
                    "computed_at": output.computed_at,
                    "computed_by": instance,
                    "version": version,
                    "n": output.record["n"],
                    "n_pos": output.record["n_pos"],
                    "unlabelled": output.record["unlabelled"],
                    "prior": output.record["prior"],
                    "record": output.record,
                    "record_version": RECORD_VERSION,
                    "alerts": record_alerts(output.record),
                },
                {
                    "model_id": model.id,
                    "segment": output.name,
                    "starts_at": start,
                    "version": version,
                    "positives": output.positives,
                    "negatives": output.negatives,
                },
            )
            for output in outputs
        ],
    )


def _mark_computed(
    session: Session, *, state: WindowState, version: int, now: datetime, band: Fingerprint
) -> None:
    """Record ``version`` as computed in the window's state, with the checkpoint ``now`` and
    its fingerprint ``band``; clear the request and the failure back-off."""
    state.computed_version = version
    state.checkpoint_at = now
    state.band_count = band.count
    state.band_sum = band.total
    state.requested_at = None
    state.failures = 0
    state.retry_at = None
    session.flush()


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What a window's evaluation reads, in the claim's snapshot."""

    rows: WindowRows
    segments: dict[int, str]
    references: dict[str, Reference | None]
    trailing: dict[str, TrailingPool | None]
    overflow: SegmentsOverflow
    band: Fingerprint


def _read_window(
    session: Session,
    *,
    claimed: _Claimed,
    start: datetime,
    now: datetime,
    margin: timedelta,
    cache: ReferenceCache,
) -> _Inputs:
    """Step 2: the window's rows, segments, references, what each segment's decision pools and
    its overflow, read in the claim's snapshot; then, where one writer at a time may write,
    the reads are committed, so the write lock is not held while the window is evaluated
    (what commits meanwhile is a change after the checkpoint, found by the next scan)."""
    model = claimed.model
    segments, references, rows = _load_window(
        session,
        model=model,
        start=start,
        end=claimed.end,
        now=now,
        band_since=now - margin,
        cache=cache,
    )
    assert rows.band is not None
    inputs = _Inputs(
        rows=rows,
        segments=segments,
        references=references,
        trailing=_trailing_pools(
            session, model=model, start=start, rows=rows, segments=segments, cache=cache
        ),
        overflow=_overflow(session, model=model, start=start, rows=rows),
        band=rows.band,
    )
    if single_writer(session):
        session.commit()
    return inputs


def _write_window(
    session: Session,
    *,
    claimed: _Claimed,
    start: datetime,
    now: datetime,
    instance: str,
    overflow: SegmentsOverflow,
    band: Fingerprint,
    predictions: int,
    outputs: list[_SegmentOutput],
) -> ComputedWindow:
    """Step 4: confirm that the configuration and the version are still current, replace the
    window's records and sorted scores, and mark the version computed."""
    model, state, version = claimed.model, claimed.state, claimed.version
    _confirm_current(session, model=model, state=state, version=version)
    overflow_added = overflow["predictions"] and max(
        0, overflow["predictions"] - _stored_overflow(session, model=model, start=start)
    )
    _replace_results(
        session,
        model=model,
        start=start,
        end=claimed.end,
        version=version,
        instance=instance,
        outputs=outputs,
    )
    _mark_computed(session, state=state, version=version, now=now, band=band)
    return ComputedWindow(
        start=start,
        end=claimed.end,
        version=version,
        predictions=predictions,
        segments=[output.name for output in outputs],
        overflow_segments=overflow["segments"],
        overflow_predictions=overflow["predictions"],
        overflow_added=overflow_added,
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
    only_due: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> ComputedWindow | None:
    """Compute every segment of the window of ``model`` that starts at ``start`` and store the
    results, in four steps: claim, read, evaluate, write. The session's transaction must not
    have begun, and the caller commits the writes (SQLite: the reads were committed before the
    evaluation).

    ``now`` is taken before the transaction begins; it becomes the window's checkpoint.
    Returns None when the window has no state or another scheduler is computing it. Raises
    :class:`WindowChangedError` (storing nothing) when the model's configuration or the
    window's version changed while it was computed: what is stored was always computed with
    the configuration current at commit. Each record's ``computed_at`` is read from ``clock``
    when its segment is evaluated.

    ``only_due`` (the scheduler's claims): return None, computing nothing, unless the window
    is still due in the transaction's snapshot (another scheduler may have computed it since
    it was planned) and, for a trailing reference, no older window of the model is due (it
    must be computed first, being part of this window's reference).
    """
    claimed = _claim(
        session, model=model, start=start, now=now, instance=instance, only_due=only_due
    )
    if claimed is None:
        return None
    inputs = _read_window(
        session, claimed=claimed, start=start, now=now, margin=margin, cache=cache
    )
    outputs = _evaluate_segments(
        model=claimed.model,
        start=start,
        end=claimed.end,
        rows=inputs.rows,
        segments=inputs.segments,
        references=inputs.references,
        overflow=inputs.overflow,
        trailing=inputs.trailing,
        clock=clock,
    )
    overflow, band, predictions = inputs.overflow, inputs.band, int(inputs.rows.scores.size)
    del inputs
    return _write_window(
        session,
        claimed=claimed,
        start=start,
        now=now,
        instance=instance,
        overflow=overflow,
        band=band,
        predictions=predictions,
        outputs=outputs,
    )
