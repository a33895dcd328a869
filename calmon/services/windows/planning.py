"""Window planning: which windows of a model hold predictions, which changed, which are due.

Windows are the model's fixed-length windows aligned to the UTC epoch (:mod:`calmon.timeline`).
Every window that holds a prediction has a :class:`~calmon.db.models.WindowState`; it is *due*
when it is pending (never computed, or its predictions changed since) and it ended ``grace``
ago (or ended and a recompute was requested).

Changes are found through the change record (:mod:`calmon.db.changes`), re-reading
``margin`` before the previous scan; a per-window checkpoint (an instant and a fingerprint of
the predictions changed since it, minus ``margin``, set when a window is first seen, changes or
is computed) keeps a re-read change from causing a new version: a second computation, or a
fixed reference built again. Why no change is missed: ``docs/reference/scheduler.md`` ("Finding
changed windows").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy.orm import Session

from calmon.db.changes import changed_windows, forget_changes
from calmon.db.models import Model, ModelScan, WindowState
from calmon.db.window_states import (
    Fingerprint,
    computed_before_checkpoint,
    due_before,
    due_bounds,
    fingerprints,
    fingerprints_by_window,
    mark_requested,
    period_checkpoint,
    starts_with_older_records,
    states_at,
    states_between,
)
from calmon.records import RECORD_VERSION
from calmon.timeline import WINDOW_SECONDS

#: how far back a change of a fixed reference refreshes computed windows, in window lengths
FIXED_REFRESH_WINDOWS: Final = 168
#: the most due windows of one model a plan lists (:func:`due_windows`); the scheduler plans
#: again after each pass over its plan, so a longer back-fill goes on with the next ones
MAX_DUE_WINDOWS: Final = 1000


def fingerprint(
    session: Session, *, model_id: int, start: datetime, end: datetime, since: datetime
) -> Fingerprint:
    """The :class:`Fingerprint` of the window ``[start, end)`` of a model since ``since``."""
    (found,) = fingerprints(session, model_id=model_id, start=start, end=end, since=(since,))
    return found


def first_fingerprints(
    session: Session, *, model_id: int, length: int, starts: Sequence[datetime], since: datetime
) -> dict[datetime, Fingerprint]:
    """The :class:`Fingerprint` since ``since`` of each window of length ``length`` (seconds)
    starting at ``starts``: one grouped statement per run of consecutive windows (a back-fill
    of hundreds of windows costs one), so the scan holds its transaction briefly."""
    step = timedelta(seconds=length)
    out = dict.fromkeys(starts, Fingerprint(count=0, total="0"))
    for first, last in _runs(sorted(starts), step):
        found = fingerprints_by_window(
            session, model_id=model_id, length=length, first=first, end=last + step, since=since
        )
        out.update((start, band) for start, band in found.items() if start in out)
    return out


def _runs(starts: Sequence[datetime], step: timedelta) -> list[tuple[datetime, datetime]]:
    """Sorted window starts as (first, last) of each run of consecutive windows."""
    runs: list[tuple[datetime, datetime]] = []
    for start in starts:
        if runs and start - runs[-1][1] == step:
            runs[-1] = (runs[-1][0], start)
        else:
            runs.append((start, start))
    return runs


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What one scan of a model found: windows seen for the first time, and windows whose
    predictions changed (version bumped)."""

    new: int
    changed: int


def scan_model(
    session: Session,
    *,
    model: Model,
    now: datetime,
    margin: timedelta,
    expired_before: datetime | None = None,
    reader: Session | None = None,
) -> ScanResult:
    """Record the windows of ``model`` whose predictions changed since the last scan, and
    delete the change records older than ``now - margin`` (the next scan starts there).

    Windows that ended at or before ``expired_before`` (the retention cutoff; None: retention
    is off) are expired, or about to be: their changes are ignored, so no scan brings back a
    window that retention removed.

    ``now`` must be taken before the session's first statement. The caller commits.

    ``reader`` (SQLite): a session that only reads, in which the change record, the states and
    the fingerprints are read (the bulk of a scan: a window changed within the margin is read
    again at every scan), so that ``session`` takes SQLite's write lock only for the writes.
    A state that changed between the two (a recompute request) is left as it is: it is
    pending already, and the next scan compares it again.
    """
    reads = reader if reader is not None else session
    length = WINDOW_SECONDS[model.window]
    step = timedelta(seconds=length)
    mark = reads.get(ModelScan, model.id)
    since = None if mark is None else mark.scanned_at - margin
    starts = changed_windows(reads, model_id=model.id, since=since)
    if expired_before is not None:
        starts = {
            start: latest for start, latest in starts.items() if start + step > expired_before
        }
    states = _states_between(reads, model_id=model.id, starts=starts)
    # The first checkpoints: a later scan inside the margin re-reads these predictions.
    first_bands = first_fingerprints(
        reads,
        model_id=model.id,
        length=length,
        starts=[start for start in starts if start not in states],
        since=now - margin,
    )
    changed_bands = _changed_bands(
        reads, model_id=model.id, starts=starts, states=states, step=step, now=now, margin=margin
    )
    if reader is not None:
        first_bands, changed_bands, states = _still_current(
            session,
            reader,
            model_id=model.id,
            first_bands=first_bands,
            changed_bands=changed_bands,
            states=states,
        )
        mark = session.get(ModelScan, model.id)
    _add_first_seen(session, model_id=model.id, first_bands=first_bands, step=step, now=now)
    _bump_changed(states, changed_bands=changed_bands, now=now)
    if mark is None:
        session.add(ModelScan(model_id=model.id, scanned_at=now))
    else:
        mark.scanned_at = now
    # The next scan reads from now - margin on: older records are never read again.
    forget_changes(session, model_id=model.id, before=now - margin)
    session.flush()
    return ScanResult(new=len(first_bands), changed=len(changed_bands))


def _states_between(
    reads: Session, *, model_id: int, starts: dict[datetime, datetime]
) -> dict[datetime, WindowState]:
    """The existing states of the windows from the first to the last of ``starts``, by start:
    one range query rather than one per window (an absent start is a window seen first)."""
    if not starts:
        return {}
    return states_between(reads, model_id=model_id, first=min(starts), last=max(starts))


def _changed_bands(
    reads: Session,
    *,
    model_id: int,
    starts: dict[datetime, datetime],
    states: dict[datetime, WindowState],
    step: timedelta,
    now: datetime,
    margin: timedelta,
) -> dict[datetime, Fingerprint]:
    """The new checkpoint fingerprints of the known windows whose predictions really changed.

    A window whose latest change is older than its checkpoint (less ``margin``) is skipped
    without a read; the others are changed only if the fingerprint of their predictions
    changed since the checkpoint differs from the stored one, so that a change record read
    again within the margin does not cause a new version."""
    out: dict[datetime, Fingerprint] = {}
    for start, latest in sorted(starts.items()):
        state = states.get(start)
        if state is None or latest < state.checkpoint_at - margin:
            continue
        seen, band = fingerprints(
            reads,
            model_id=model_id,
            start=start,
            end=start + step,
            since=(state.checkpoint_at - margin, now - margin),
        )
        if (seen.count, seen.total) != (state.band_count, state.band_sum):
            out[start] = band
    return out


def _still_current(
    session: Session,
    reader: Session,
    *,
    model_id: int,
    first_bands: dict[datetime, Fingerprint],
    changed_bands: dict[datetime, Fingerprint],
    states: dict[datetime, WindowState],
) -> tuple[dict[datetime, Fingerprint], dict[datetime, Fingerprint], dict[datetime, WindowState]]:
    """What ``reader`` found, less what changed before ``session`` writes (SQLite).

    Ends the read transaction, then loads the live states of the windows to write: a window
    seen first that now has a state, or a changed window whose version or checkpoint moved
    meanwhile (a recompute request), is left out; it is pending already and the next scan
    compares it again. Returns the first-seen and changed fingerprints to write and the live
    states by start."""
    read = {start: (states[start].version, states[start].checkpoint_at) for start in changed_bands}
    reader.rollback()
    live = states_at(session, model_id=model_id, starts=[*first_bands, *changed_bands])
    first = {start: band for start, band in first_bands.items() if start not in live}
    changed = {
        start: band
        for start, band in changed_bands.items()
        if start in live and (live[start].version, live[start].checkpoint_at) == read[start]
    }
    return first, changed, live


def _add_first_seen(
    session: Session,
    *,
    model_id: int,
    first_bands: dict[datetime, Fingerprint],
    step: timedelta,
    now: datetime,
) -> None:
    """A pending state at version 1 for each window seen for the first time, checkpointed
    ``now`` with the fingerprint of its predictions changed within the margin."""
    for start, band in sorted(first_bands.items()):
        session.add(
            WindowState.first_seen(
                model_id=model_id,
                starts_at=start,
                ends_at=start + step,
                version=1,
                now=now,
                band_count=band.count,
                band_sum=band.total,
            )
        )


def _bump_changed(
    states: dict[datetime, WindowState],
    *,
    changed_bands: dict[datetime, Fingerprint],
    now: datetime,
) -> None:
    """A new version for each changed window, checkpointed ``now`` with its new fingerprint;
    a computed window also forgets its failures, since a failed retry may succeed on the new
    data."""
    for start, band in sorted(changed_bands.items()):
        state = states[start]
        state.version += 1
        state.checkpoint_at = now
        state.band_count = band.count
        state.band_sum = band.total
        if state.computed_version is not None:
            # A change the computed results miss: a failed retry may succeed on new data.
            state.failures = 0
            state.retry_at = None


@dataclass(frozen=True, slots=True)
class DueWindow:
    """A window to compute now."""

    start: datetime
    end: datetime


def due_windows(
    session: Session,
    *,
    model: Model,
    now: datetime,
    expired_before: datetime | None = None,
    limit: int = MAX_DUE_WINDOWS,
) -> list[DueWindow]:
    """Pending windows of ``model`` that ended ``grace`` ago (or ended, when a recompute was
    requested), not waiting for a retry, oldest first (so trailing references exist); none
    that ended at or before ``expired_before`` (the retention cutoff: retention removes it).

    At most ``limit``: the first in the order the scheduler tries them
    (:func:`calmon.scheduler.ordering.fair_order`), so a bounded plan is the head of the whole one:
    under a trailing reference the oldest, under a fixed reference the windows of the
    reference period, then the newest. The others are listed by a later plan, once these
    are computed."""
    bounds = due_bounds(session, model=model, now=now, expired_before=expired_before, limit=limit)
    return sorted((DueWindow(start=start, end=end) for start, end in bounds), key=lambda w: w.start)


def still_due(session: Session, *, model: Model, state: WindowState, now: datetime) -> bool:
    """Whether a claimed window is to be computed now: it is pending, and for a trailing
    reference no older window of the model is due (the older one is part of its reference).

    The claimed window's own grace and retry time were checked when it was planned; it is
    not held back again for them."""
    if state.computed_version is not None and state.computed_version >= state.version:
        return False
    if model.reference_kind != "trailing":
        return True
    return not due_before(session, model=model, now=now, before=state.starts_at)


def record_failure(
    session: Session, *, model_id: int, start: datetime, now: datetime, base: timedelta
) -> None:
    """Count a failed computation of a window and hold it back before its next try (``base``
    doubled at each failure in a row, at most an hour)."""
    state = session.get(WindowState, (model_id, start))
    if state is None:
        return
    state.failures += 1
    state.retry_at = now + min(base * 2 ** min(state.failures - 1, 16), timedelta(hours=1))


def request_windows(
    session: Session, *, model_id: int, starts: list[datetime], now: datetime
) -> None:
    """Mark windows pending (version bumped) and requested, so they are computed soon."""
    if not starts:
        return
    mark_requested(session, model_id=model_id, starts=starts, now=now)


def request_outdated_records(session: Session, *, model: Model, now: datetime) -> int:
    """Request the computed windows of ``model`` holding a record of a shape older than
    :data:`~calmon.records.RECORD_VERSION`, so that they are computed again; returns how many.
    The scheduler asks once per model when it starts leading (the upgrade to the shape of
    revision 0011 requested its windows itself)."""
    starts = starts_with_older_records(session, model_id=model.id, record_version=RECORD_VERSION)
    request_windows(session, model_id=model.id, starts=starts, now=now)
    return len(starts)


def refresh_for_fixed_reference(session: Session, *, model: Model, now: datetime) -> int:
    """Request the computed windows whose fixed reference changed after they were computed;
    returns how many.

    A window computed before late predictions or labels reached the fixed period holds a
    stale reference (its split and its values calibrated at the reference prior). The period's
    windows keep their latest computation time in ``checkpoint_at`` (also set when the scan
    sees them change), and so does every other computed window: a window computed before the
    period's latest one is stale. The refresh waits until every window of the period is
    computed and the period has been quiet for the model's ``grace`` (a trickle of late
    labels costs one refresh, not one per scan), and reaches back ``FIXED_REFRESH_WINDOWS``
    windows (older windows keep what they were computed with; a recompute request refreshes
    them). The period's own windows are left alone: they are recomputed when their own data
    changes, and refreshing them would move the period's checkpoint again.
    """
    if model.reference_kind != "fixed":
        return 0
    assert model.reference_start is not None
    assert model.reference_end is not None
    length = timedelta(seconds=WINDOW_SECONDS[model.window])
    after, before = model.reference_start - length, model.reference_end
    latest, pending = period_checkpoint(session, model_id=model.id, after=after, before=before)
    if latest is None or pending or latest > now - timedelta(seconds=model.grace_seconds):
        return 0
    starts = computed_before_checkpoint(
        session,
        model_id=model.id,
        checkpoint=latest,
        since=now - FIXED_REFRESH_WINDOWS * length,
        after=after,
        before=before,
    )
    request_windows(session, model_id=model.id, starts=starts, now=now)
    return len(starts)
