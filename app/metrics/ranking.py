"""The one ordering of an evaluation set that every curve metric and every π0 is computed from.

Every curve metric of ``METRICS.md`` (ROC AUC, average precision, best F1, AUPRG, KS) only
changes value where the threshold crosses a distinct score that holds at least one positive:
between two such scores only negatives enter, which lowers precision, F1, TPR − FPR and leaves
recall untouched. So an evaluation set is collapsed once into *positive blocks*: the distinct
scores holding a positive, from the highest down, with how many positives and negatives sit at
exactly that score and how many negatives lie strictly between it and the block above. The
positives are sorted (O(n_pos log n_pos)); each negative is placed by one binary search
(O(n_neg log K)), which is cheaper than sorting the whole set when positives are rare.

The counts are exactly what a Poisson bootstrap needs too: the bootstrap weight of a group of
m exchangeable rows is Poisson(m), so replicates can be drawn per block instead of per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


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


def rank(scores: FloatArray, labels: npt.NDArray[np.integer]) -> Ranking:
    """Collapse validated ``scores`` (n,) and 0/1 ``labels`` (n,) into a :class:`Ranking`.

    Inputs are assumed valid (finite scores, labels in {0, 1}, equal lengths); validation is
    the caller's job, done once per set.
    """
    is_pos = labels.astype(bool, copy=False)
    pos_scores = scores[is_pos]
    neg_scores = scores[~is_pos]
    ascending, pos_counts = np.unique(pos_scores, return_counts=True)
    k = ascending.size
    # For each negative: idx = number of positive thresholds strictly below it, and whether it
    # sits exactly on threshold idx. Encoded as 2*idx + tied so one bincount does both counts.
    idx = np.searchsorted(ascending, neg_scores, side="left")
    tied = np.append(ascending, np.nan)[idx] == neg_scores
    counts = np.bincount(2 * idx + tied, minlength=2 * k + 2)
    between = counts[0::2]  # (K+1,) negatives strictly between ascending[i-1] and ascending[i]
    on = counts[1::2][:k]  # (K,) negatives equal to ascending[i]
    return Ranking(
        thresholds=ascending[::-1].astype(np.float64, copy=False),
        pos=pos_counts[::-1].astype(np.int64),
        neg_tied=on[::-1].astype(np.int64),
        neg_above=between[:0:-1].astype(np.int64),
        neg_below=int(between[0]),
        n_pos=int(pos_scores.size),
        n_neg=int(neg_scores.size),
    )
