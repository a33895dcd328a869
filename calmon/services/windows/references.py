"""Pooling reference sets: what each window's metrics are compared with.

A trailing reference is streamed from the sorted scores each computed window stores
(``window_scores``, encoded here), a fixed one from the predictions of its period, chunk by
chunk; both are cached by data version. How and why: ``docs/reference/scheduler.md`` ("Reference
sets", "Pooling without holding the rows").
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import numpy as np
from sqlalchemy.orm import Session

from calmon.arrays import FloatArray
from calmon.db.changes import changes_between
from calmon.db.models import Model
from calmon.db.pools import computed_windows_before, stored_negatives, stored_positives
from calmon.db.window_rows import WindowRows
from calmon.db.window_states import period_versions
from calmon.metrics import Pool
from calmon.names import ALL_SEGMENTS
from calmon.services.windows.reference_cache import Reference, ReferenceCache, pooled_reference
from calmon.services.windows.rows import load_rows
from calmon.timeline import window_length

#: how sorted scores are stored in ``window_scores``
STORED_DTYPE: Final = np.dtype("<f8")
_EMPTY: Final = np.empty(0, dtype=np.float64)


def encode_scores(sorted_scores: FloatArray) -> bytes:
    """Sorted scores as stored in ``window_scores``."""
    return np.ascontiguousarray(sorted_scores, dtype=STORED_DTYPE).tobytes()


def decode_scores(data: bytes) -> FloatArray:
    """Scores stored by :func:`encode_scores` (ascending)."""
    return np.frombuffer(data, dtype=STORED_DTYPE).astype(np.float64)


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
    rows = computed_windows_before(session, model_id=model.id, before=before, count=count)
    return [StoredWindow(start, end, version) for start, end, version in reversed(rows)]


def _stored_negatives(
    session: Session, *, model: Model, segment: str, starts: Sequence[datetime]
) -> Iterator[FloatArray]:
    """The stored sorted negatives of ``segment`` in each window, one window at a time."""
    for start in starts:
        data = stored_negatives(session, model_id=model.id, segment=segment, start=start)
        if data is not None:
            yield decode_scores(data)


def _trailing_reference(
    session: Session, *, model: Model, segment: str, windows: Sequence[StoredWindow]
) -> Reference:
    """The reference of ``segment`` pooled from the stored scores of ``windows``."""
    starts = [w.start for w in windows]
    positives = stored_positives(session, model_id=model.id, segment=segment, starts=starts)
    pos_sorted = np.sort(np.concatenate([decode_scores(p) for p in positives] or [_EMPTY]))
    pool = Pool(pos_sorted, threshold=model.threshold, score_kind=model.score_kind)
    del positives, pos_sorted
    for negatives in _stored_negatives(session, model=model, segment=segment, starts=starts):
        pool.add_negatives(negatives)
    return pooled_reference(
        pool,
        threshold=model.threshold,
        score_kind=model.score_kind,
        kind="trailing",
        start=windows[0].start,
        end=windows[-1].end,
        windows=len(windows),
    )


def _chunks(
    start: datetime, end: datetime, length: timedelta
) -> Iterator[tuple[datetime, datetime]]:
    """``[start, end)`` cut into consecutive parts of ``length`` (the last one shorter)."""
    cursor = start
    while cursor < end:
        yield cursor, min(cursor + length, end)
        cursor += length


def _fixed_period(model: Model) -> tuple[datetime, datetime]:
    """The model's fixed reference period (start, end)."""
    assert model.reference_start is not None
    assert model.reference_end is not None
    return model.reference_start, model.reference_end


def _segment_scores(rows: WindowRows, *, position: int | None) -> FloatArray:
    """The scores of the tracked segment at ``position``, of all rows for None, sorted."""
    return np.sort(rows.scores if position is None else rows.scores[rows.segments == position])


def _fixed_pools(
    session: Session,
    *,
    model: Model,
    start: datetime,
    end: datetime,
    positions: dict[str, int | None],
) -> dict[str, Pool]:
    """A pool per segment (name -> tracked position, None for ``*``) holding the period's
    positives, read in one statement."""
    positives = load_rows(session, model=model, start=start, end=end, label=1)
    return {
        name: Pool(
            _segment_scores(positives, position=position),
            threshold=model.threshold,
            score_kind=model.score_kind,
        )
        for name, position in positions.items()
    }


def _add_fixed_negatives(
    session: Session,
    *,
    model: Model,
    start: datetime,
    end: datetime,
    pools: dict[str, Pool],
    positions: dict[str, int | None],
) -> None:
    """Add the negatives of one chunk ``[start, end)`` to every segment's pool."""
    negatives = load_rows(session, model=model, start=start, end=end, label=0)
    for name, position in positions.items():
        pools[name].add_negatives(_segment_scores(negatives, position=position))


def _fixed_references(
    session: Session, *, model: Model, segments: dict[int, str]
) -> dict[str, Reference]:
    """Every segment's reference over the model's fixed period, read in window-sized chunks:
    positives in one pass, then negatives chunk by chunk."""
    start, end = _fixed_period(model)
    positions = {ALL_SEGMENTS: None, **{name: position for position, name in segments.items()}}
    pools = _fixed_pools(session, model=model, start=start, end=end, positions=positions)
    for chunk_start, chunk_end in _chunks(start, end, window_length(model.window)):
        _add_fixed_negatives(
            session, model=model, start=chunk_start, end=chunk_end, pools=pools, positions=positions
        )
    return {
        name: pooled_reference(
            pool,
            threshold=model.threshold,
            score_kind=model.score_kind,
            kind="fixed",
            start=start,
            end=end,
            windows=None,
        )
        for name, pool in pools.items()
    }


def _fixed_version(session: Session, *, model: Model) -> tuple[int, int, str]:
    """Data version of the fixed period, read in the session's snapshot: how many windows
    overlapping it hold predictions and the sum of their versions (both only grow once the
    scan sees its predictions change), and a digest of the period's change records.

    The versions alone miss a write that no scan has seen yet. Built before such a write and
    looked up after it, a reference would lack it; and when a window of the period is
    computed in between, its checkpoint takes the write in, so no scan ever bumps a version
    for it and the stale reference would serve every later window. The write's change record
    is committed with it and stays until a scan has seen it (``docs/reference/scheduler.md``,
    "Finding changed windows"), so the digest tells the two snapshots apart."""
    start, end = _fixed_period(model)
    length = window_length(model.window)
    after = start - length
    count, total = period_versions(session, model_id=model.id, after=after, before=end)
    changes = changes_between(session, model_id=model.id, after=after, before=end)
    digest = hashlib.blake2b(
        "".join(f"{s.isoformat()} {c.isoformat()}\n" for s, c in changes).encode(),
        digest_size=16,
    ).hexdigest()
    return count, total, digest


def _config_key(model: Model) -> tuple[float, str, int]:
    """What a reference depends on besides its data: threshold, score kind, segment cap."""
    return (model.threshold, model.score_kind, model.max_segments)


def _cached_fixed(
    session: Session,
    *,
    model: Model,
    segments: dict[int, str],
    names: Sequence[str],
    cache: ReferenceCache,
) -> dict[str, Reference | None]:
    """The fixed references of ``names`` from ``cache``; all of them built (and cached) at
    once when one is missing."""
    family: tuple[Hashable, ...] = (model.id, "fixed")
    key: tuple[Hashable, ...] = (
        *family,
        model.reference_start,
        model.reference_end,
        _fixed_version(session, model=model),
        _config_key(model),
        tuple(sorted(segments.items())),
    )
    out: dict[str, Reference | None] = {}
    for name in names:
        found, reference = cache.get((*key, name))
        if not found:
            built = _fixed_references(session, model=model, segments=segments)
            # an older build is never used again, even should its key come back
            cache.forget(lambda old: old[: len(family)] == family and old[: len(key)] != key)
            for built_name, built_reference in built.items():
                cache.put((*key, built_name), built_reference)
            return {name: built[name] for name in names}
        out[name] = reference
    return out


def _cached_trailing(
    session: Session,
    *,
    model: Model,
    window_start: datetime,
    names: Sequence[str],
    cache: ReferenceCache,
) -> dict[str, Reference | None]:
    """The trailing references of ``names`` from ``cache``, each built when missing; all None
    without a computed window before ``window_start``."""
    windows = trailing_windows(
        session, model=model, before=window_start, count=model.reference_windows or 1
    )
    if not windows:
        return dict.fromkeys(names)
    version = tuple((w.start, w.version) for w in windows)
    trailing: dict[str, Reference | None] = {}
    for name in names:
        key = (model.id, "trailing", name, version, _config_key(model))
        found, reference = cache.get(key)
        if not found:
            reference = _trailing_reference(session, model=model, segment=name, windows=windows)
            cache.put(key, reference)
        trailing[name] = reference
    return trailing


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
    names = [ALL_SEGMENTS, *segments.values()]
    if model.reference_kind == "fixed":
        return _cached_fixed(session, model=model, segments=segments, names=names, cache=cache)
    return _cached_trailing(
        session, model=model, window_start=window_start, names=names, cache=cache
    )
