"""A built reference set (:class:`Reference`), how one is finished from its pooled scores
(:func:`pooled_reference`), and the in-memory cache of them; what the cache keys hold:
``docs/reference/scheduler.md`` ("Pooling without holding the rows"). Nothing here reads the
database (:mod:`calmon.services.windows.references` reads what is pooled).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from calmon.arrays import FloatArray
from calmon.metrics import Pool, evaluate_ranked
from calmon.metrics.window_evaluation import ReferenceSet, WindowConfig
from calmon.timeline import iso

CACHE_ENTRIES: Final = 256


@dataclass(frozen=True, slots=True)
class Reference:
    """The reference set of one segment, pooled, and where it comes from.

    Attributes:
        kind: ``trailing`` or ``fixed``.
        start, end: the period it covers (trailing: from the first pooled window's start to
            the last one's end).
        windows: how many windows were pooled (trailing), else None.
        data: the pooled set as the metric engine reads it (ranking, sums, regular metrics
            and label-shift levels).
    """

    kind: str
    start: datetime
    end: datetime
    windows: int | None
    data: ReferenceSet

    @property
    def n(self) -> int:
        """Labelled predictions in the reference set."""
        return self.data.n

    def period(self) -> dict[str, Any]:
        """Which reference this is (the ``reference`` of a record's decision): its kind, period
        and pooled windows."""
        return {
            "kind": self.kind,
            "start": iso(self.start),
            "end": iso(self.end),
            "windows": self.windows,
        }

    def summary(self) -> dict[str, Any]:
        """The ``reference`` part of a window record."""
        evaluation = self.data.evaluation
        return {
            **self.period(),
            "n": self.n,
            "n_pos": self.data.ranking.n_pos,
            "prior": evaluation["prior"],
            "regular": evaluation["regular"],
        }


def pooled_reference(
    pool: Pool,
    *,
    threshold: float,
    score_kind: str,
    kind: str,
    start: datetime,
    end: datetime,
    windows: int | None,
) -> Reference:
    """The reference of a complete ``pool``, with its regular metrics at ``threshold``."""
    ranking = pool.ranking()
    evaluation = evaluate_ranked(
        ranking, pool.sums, threshold=threshold, pi0=(), score_kind=score_kind
    )
    return Reference(
        kind=kind,
        start=start,
        end=end,
        windows=windows,
        data=ReferenceSet(ranking=ranking, sums=pool.sums, evaluation=evaluation),
    )


def reference_from_scores(
    *,
    config: WindowConfig,
    pos_sorted: FloatArray,
    neg_sorted: FloatArray,
    start: datetime,
    end: datetime,
) -> Reference:
    """A fixed reference made of one set's sorted positives and negatives, as the scheduler
    builds one from stored windows (the offline report's reference)."""
    pool = Pool(pos_sorted, threshold=config.threshold, score_kind=config.score_kind)
    pool.add_negatives(neg_sorted)
    return pooled_reference(
        pool,
        threshold=config.threshold,
        score_kind=config.score_kind,
        kind="fixed",
        start=start,
        end=end,
        windows=None,
    )


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

    def forget(self, stale: Callable[[tuple[Hashable, ...]], bool]) -> None:
        """Drop every entry whose key (a tuple) ``stale`` says is superseded."""
        with self._lock:
            for key in [k for k in self._items if isinstance(k, tuple) and stale(k)]:
                del self._items[key]

    def put(self, key: Hashable, reference: Reference | None) -> None:
        """Remember ``reference`` (None: there is none) under ``key``."""
        with self._lock:
            self._items[key] = reference
            self._items.move_to_end(key)
            self.builds += 1
            while len(self._items) > self._entries:
                self._items.popitem(last=False)
