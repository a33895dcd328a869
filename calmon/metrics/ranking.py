"""The one ordering of an evaluation set that every curve metric and every π0 is computed from.

Every curve metric of ``docs/reference/metrics.md`` (ROC AUC, average precision, best F1, AUPRG, KS)
only changes value where the threshold crosses a distinct score that holds at least one positive:
between two such scores only negatives enter, which lowers precision, F1, TPR - FPR and leaves
recall untouched. So an evaluation set is collapsed once into *positive blocks*: the distinct
scores holding a positive, from the highest down, with how many positives and negatives sit at
exactly that score and how many negatives lie strictly between it and the block above. Each
class is sorted on its own (NumPy's vectorised sort is far faster than one binary search per
row), then the K block edges are located in the sorted negatives (O(K log n_neg)).

The counts are exactly what a Poisson bootstrap needs too: the bootstrap weight of a group of
m exchangeable rows is Poisson(m), so replicates can be drawn per block instead of per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray, IntArray


@dataclass(frozen=True, slots=True)
class Ranking:
    """An evaluation set collapsed to its positive blocks, highest score first.

    Attributes (K = number of distinct scores that hold at least one positive):
        thresholds: shape (K,), the distinct positive scores, strictly decreasing.
        pos: shape (K,), positives whose score equals ``thresholds[k]`` (each ≥ 1).
        neg_tied: shape (K,), negatives whose score equals ``thresholds[k]``.
        neg_above: shape (K,), negatives strictly between ``thresholds[k-1]`` and
            ``thresholds[k]`` (for k = 0: strictly above ``thresholds[0]``).
        neg_below: negatives strictly below ``thresholds[-1]`` (all negatives when K = 0).
        n_pos, n_neg: class totals.

    Ties: a block enters the curves whole; negatives tied with positives enter with them.
    """

    thresholds: FloatArray
    pos: IntArray
    neg_tied: IntArray
    neg_above: IntArray
    neg_below: int
    n_pos: int
    n_neg: int

    @property
    def tp(self) -> IntArray:
        """Shape (K,): positives with s ≥ thresholds[k]."""
        return np.cumsum(self.pos)

    @property
    def fp(self) -> IntArray:
        """Shape (K,): negatives with s ≥ thresholds[k] (tied negatives included)."""
        return np.cumsum(self.neg_above + self.neg_tied)

    @property
    def fp_before(self) -> IntArray:
        """Shape (K,): negatives with s > thresholds[k] (the curve point just above block k)."""
        return self.fp - self.neg_tied


def rank(scores: FloatArray, labels: npt.NDArray[np.integer] | npt.NDArray[np.bool_]) -> Ranking:
    """Collapse validated ``scores`` (n,) and 0/1 ``labels`` (n,) into a :class:`Ranking`.

    Inputs are assumed valid (finite scores, labels in {0, 1}, equal lengths); validation is
    the caller's job, done once per set.
    """
    is_pos = labels.astype(bool, copy=False)
    pos_sorted = np.sort(scores[is_pos])
    neg_sorted = scores[~is_pos]
    neg_sorted.sort()
    return rank_sorted(pos_sorted, neg_sorted)


def rank_sorted(pos_sorted: FloatArray, neg_sorted: FloatArray) -> Ranking:
    """The :class:`Ranking` of a set given each class's scores sorted ascending.

    ``pos_sorted`` (n_pos,) and ``neg_sorted`` (n_neg,) must be finite and ascending; callers
    that keep the sorted classes for other metrics (thresholded counts, reliability bins) sort
    once and call this instead of :func:`rank`.
    """
    runs = distinct_runs(pos_sorted)
    assert runs is not None
    ascending, pos_counts = runs
    on, between = _place_negatives(neg_sorted, ascending)
    return _from_ascending(ascending, pos_counts, on, between)


def _place_negatives(neg_sorted: FloatArray, ascending: FloatArray) -> tuple[IntArray, IntArray]:
    """Negatives ``neg_sorted`` (ascending) counted against the distinct positive scores
    ``ascending`` (K,): (K,) tied with each, and (K+1,) strictly between ascending[i-1] and
    ascending[i] (open ends at ±inf)."""
    below = np.searchsorted(neg_sorted, ascending, side="left")  # negatives < ascending[i]
    upto = np.searchsorted(neg_sorted, ascending, side="right")  # negatives <= ascending[i]
    on = (upto - below).astype(np.int64, copy=False)
    between = (np.append(below, neg_sorted.size) - np.insert(upto, 0, 0)).astype(np.int64)
    return on, between


def _from_ascending(
    ascending: FloatArray, pos_counts: IntArray, on: IntArray, between: IntArray
) -> Ranking:
    return Ranking(
        thresholds=ascending[::-1].copy(),
        pos=pos_counts[::-1].copy(),
        neg_tied=on[::-1].copy(),
        neg_above=between[:0:-1].copy(),
        neg_below=int(between[0]),
        n_pos=int(pos_counts.sum()),
        n_neg=int(between.sum() + on.sum()),
    )


class RankingAccumulator:
    """The :class:`Ranking` of a set read in parts, without holding its negatives at once.

    A pooled set (e.g. a reference period of many windows) has few positives and many
    negatives. Its blocks are the distinct positive scores of the whole set, so all positives
    are given first (``pos_sorted``, ascending); negatives then arrive in any number of parts
    of any order, each ascending, and are only counted against those blocks
    (O(K log m) per part of m negatives). The result equals ``rank_sorted`` of the pooled
    arrays exactly.
    """

    def __init__(self, pos_sorted: FloatArray) -> None:
        runs = distinct_runs(pos_sorted)
        assert runs is not None
        self._ascending, self._pos_counts = runs
        k = self._ascending.size
        self._on = np.zeros(k, dtype=np.int64)
        self._between = np.zeros(k + 1, dtype=np.int64)

    def add_negatives(self, neg_sorted: FloatArray) -> None:
        """Count one part of the negatives (finite, ascending)."""
        on, between = _place_negatives(neg_sorted, self._ascending)
        self._on += on
        self._between += between

    def ranking(self) -> Ranking:
        """The ranking of the positives and every part added so far."""
        return _from_ascending(self._ascending, self._pos_counts, self._on, self._between)


def distinct_runs(
    sorted_values: FloatArray, *, max_runs: int | None = None
) -> tuple[FloatArray, IntArray] | None:
    """The distinct values of an ascending array (R,) and how many times each occurs (R,).

    With ``max_runs``, returns None when there are more than ``max_runs`` distinct values,
    found after one comparison pass and before any gathering: callers use it to sum over runs
    of tied values only when ties make that cheaper. Without ``max_runs`` never None.
    """
    n = sorted_values.size
    if n == 0:
        return np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)
    is_new = np.empty(n, dtype=bool)
    is_new[0] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=is_new[1:])
    if max_runs is not None and np.count_nonzero(is_new) > max_runs:
        return None
    starts = np.flatnonzero(is_new)
    counts = np.diff(np.append(starts, n)).astype(np.int64, copy=False)
    return sorted_values[starts].astype(np.float64, copy=False), counts
