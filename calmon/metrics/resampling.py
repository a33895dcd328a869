"""The Poisson bootstrap of a :class:`~calmon.metrics.ranking.Ranking`: replicates drawn per
positive block, in O(B·K), and the metrics of each replicate (``docs/reference/intervals.md``, "The
bootstrap").

Every row's Poisson(1) weight summed over a block of m exchangeable rows is Poisson(m), so one
draw per block and count kind gives the row-level replicate distribution exactly. The run of
negatives the decision threshold τ falls in is drawn as its parts ≥ τ and < τ, so a replicate's
TP(τ), FP(τ) and its curves come from the same draws. Pure NumPy, in chunks of bounded size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from calmon.arrays import FloatArray, IntArray, LabelArray
from calmon.catalogue import BY_NAME, INTERVAL_KEYS
from calmon.metrics.curves import curve_metrics
from calmon.metrics.poisson import poisson
from calmon.metrics.prepared import PreparedSet
from calmon.metrics.ranking import Ranking
from calmon.metrics.thresholded import threshold_metrics

MIN_REPLICATES = 100
MAX_REPLICATES = 400
REPLICATE_CELLS = 1_000_000
"""Default replicate count B = REPLICATE_CELLS // K clipped to [MIN_REPLICATES,
MAX_REPLICATES]: every set with up to 10^4 positive blocks costs at most about 10^6
(replicate, block) cells, and small sets get more replicates for free. The intervals only need
the replicates' mean and standard deviation (not tail quantiles), which 100 replicates give to
within a few percent of the interval's width."""

CHUNK_CELLS = 1 << 17
"""Replicates are drawn and evaluated in chunks of about this many (replicate, block) cells
(at least one replicate): each of the dozen or so arrays a chunk passes through is then about
1 MiB and stays in cache, which makes the bootstrap 1.5-2 times faster than chunks of 10^6
cells, and the working memory stays near 50 MB whatever K and B are."""

#: the metrics with an interval key replicated from the curves and from the counts at τ, and
#: those of them with a calibrated version
_CURVE_REGULAR = tuple(name for name in INTERVAL_KEYS if BY_NAME[name].formula == "curves")
_CURVE_CALIBRATED = tuple(name for name in _CURVE_REGULAR if BY_NAME[name].calibrated)
_THRESHOLD_REGULAR = tuple(name for name in INTERVAL_KEYS if BY_NAME[name].formula == "thresholded")
_THRESHOLD_CALIBRATED = tuple(name for name in _THRESHOLD_REGULAR if BY_NAME[name].calibrated)

Values = dict[str, FloatArray]


@dataclass(frozen=True, slots=True)
class ThresholdCut:
    """Where the decision threshold τ falls in a :class:`Ranking`.

    Attributes:
        blocks: number m of positive blocks whose threshold is ≥ τ; they count whole towards
            TP(τ) and FP(τ).
        neg_hi, neg_lo: the negatives of the run just below those blocks (``neg_above[m]``,
            or ``neg_below`` when m = K) with s ≥ τ and with s < τ. ``neg_hi`` is 0 when τ is
            itself a block threshold.
    """

    blocks: int
    neg_hi: int
    neg_lo: int


@dataclass(frozen=True, slots=True)
class Replicates:
    """B bootstrap replicates of a :class:`Ranking`, as block counts.

    Attributes:
        pos, neg_tied, neg_above: shape (B, K), the replicate counts of each block (may be 0).
        neg_below: shape (B,).
        tp, fp: shape (B,), positives and negatives with s ≥ τ in each replicate.
    """

    pos: IntArray
    neg_tied: IntArray
    neg_above: IntArray
    neg_below: IntArray
    tp: IntArray
    fp: IntArray

    @property
    def n_pos(self) -> IntArray:
        """Shape (B,): positives of each replicate."""
        total: IntArray = np.sum(self.pos, axis=-1)
        return total

    @property
    def n_neg(self) -> IntArray:
        """Shape (B,): negatives of each replicate."""
        total: IntArray = np.sum(self.neg_tied, axis=-1) + np.sum(self.neg_above, axis=-1)
        return total + self.neg_below


def cut_at(
    scores: FloatArray, labels: LabelArray, ranking: Ranking, threshold: float
) -> ThresholdCut:
    """Locate ``threshold`` in ``ranking`` (built from the same ``scores`` (n,), ``labels`` (n,)).

    The ranking does not keep where negatives sit inside a run between two blocks, so the
    negatives with s ≥ τ are counted once from the raw arrays (O(n)).
    """
    fp = int(np.count_nonzero((scores >= threshold) & ~labels.astype(bool, copy=False)))
    return cut_with_fp(ranking, threshold, fp)


def cut_prepared(prepared: PreparedSet, threshold: float) -> ThresholdCut:
    """Locate ``threshold`` in a prepared set's ranking: its negatives with s ≥ τ are found by
    binary search in the sorted negatives (O(log n))."""
    neg = prepared.neg_sorted
    fp = neg.size - int(np.searchsorted(neg, threshold, side="left"))
    return cut_with_fp(prepared.ranking, threshold, fp)


def cut_with_fp(ranking: Ranking, threshold: float, fp: int) -> ThresholdCut:
    """Locate ``threshold`` in ``ranking`` given ``fp``, the set's negatives with s ≥ τ (for
    a set that is not held as arrays, such as a pooled reference)."""
    k = ranking.thresholds.size
    blocks = int(np.count_nonzero(ranking.thresholds >= threshold))
    fp_blocks = int(np.sum(ranking.neg_above[:blocks]) + np.sum(ranking.neg_tied[:blocks]))
    run = int(ranking.neg_above[blocks]) if blocks < k else ranking.neg_below
    neg_hi = fp - fp_blocks
    return ThresholdCut(blocks=blocks, neg_hi=neg_hi, neg_lo=run - neg_hi)


def observed(ranking: Ranking, cut: ThresholdCut) -> Replicates:
    """The set itself as a single replicate (B = 1), so point values take the replicate path."""
    m = cut.blocks
    tp = int(np.sum(ranking.pos[:m]))
    fp = int(np.sum(ranking.neg_above[:m]) + np.sum(ranking.neg_tied[:m])) + cut.neg_hi
    return Replicates(
        pos=ranking.pos[None, :],
        neg_tied=ranking.neg_tied[None, :],
        neg_above=ranking.neg_above[None, :],
        neg_below=np.array([ranking.neg_below], dtype=np.int64),
        tp=np.array([tp], dtype=np.int64),
        fp=np.array([fp], dtype=np.int64),
    )


def draw_replicates(
    ranking: Ranking, cut: ThresholdCut, *, size: int, rng: np.random.Generator
) -> Replicates:
    """Draw ``size`` Poisson-bootstrap replicates of ``ranking`` in O(size·K).

    Each count (every block's positives, tied negatives, negatives above, the negatives
    below the last block) becomes an independent Poisson draw with that count as mean; the run
    cut by τ is drawn as two independent parts, whose sum is again Poisson(run). The replicate
    distribution is exactly that of giving each row a Poisson(1) weight.
    """
    m = cut.blocks
    k = ranking.thresholds.size
    pos = poisson(rng, ranking.pos, size)
    neg_tied = poisson(rng, ranking.neg_tied, size)
    above_mean = ranking.neg_above.copy()
    if m < k:
        above_mean[m] = 0
    neg_above = poisson(rng, above_mean, size)
    neg_hi = rng.poisson(cut.neg_hi, size=size).astype(np.int64, copy=False)
    neg_lo = rng.poisson(cut.neg_lo, size=size).astype(np.int64, copy=False)
    if m < k:
        neg_above[:, m] = neg_hi + neg_lo
        neg_below = rng.poisson(ranking.neg_below, size=size).astype(np.int64, copy=False)
    else:
        neg_below = neg_hi + neg_lo
    tp = np.sum(pos[:, :m], axis=-1)
    fp = np.sum(neg_above[:, :m], axis=-1) + np.sum(neg_tied[:, :m], axis=-1) + neg_hi
    return Replicates(
        pos=pos, neg_tied=neg_tied, neg_above=neg_above, neg_below=neg_below, tp=tp, fp=fp
    )


def default_replicates(blocks: int) -> int:
    """B for a set with ``blocks`` positive blocks (see REPLICATE_CELLS)."""
    return min(MAX_REPLICATES, max(MIN_REPLICATES, REPLICATE_CELLS // max(1, blocks)))


def replicate_chunks(
    ranking: Ranking, cut: ThresholdCut, *, replicates: int, rng: np.random.Generator
) -> Iterator[Replicates]:
    """``replicates`` draws of :func:`draw_replicates`, in chunks of about CHUNK_CELLS cells."""
    rows = max(1, CHUNK_CELLS // max(1, ranking.thresholds.size))
    for start in range(0, replicates, rows):
        yield draw_replicates(ranking, cut, size=min(rows, replicates - start), rng=rng)


def evaluate_replicates(
    thresholds: FloatArray, reps: Replicates, pi0: Sequence[float]
) -> tuple[Values, dict[float, Values]]:
    """Regular and calibrated (per π0) values of each replicate: ({name: (B,)}, {π0: {...}})."""
    pi0s = [float(p) for p in pi0]
    curves = curve_metrics(
        thresholds, reps.pos, reps.neg_tied, reps.neg_above, reps.neg_below, pi0=pi0s
    )
    at_tau = threshold_metrics(reps.tp, reps.fp, reps.n_pos, reps.n_neg, pi0=pi0s)
    curve_reg, tau_reg = curves.regular, at_tau.regular
    curve_cal, tau_cal = curves.calibrated, at_tau.calibrated
    regular = {name: np.asarray(curve_reg[name], dtype=np.float64) for name in _CURVE_REGULAR}
    regular |= {name: np.asarray(tau_reg[name], dtype=np.float64) for name in _THRESHOLD_REGULAR}
    calibrated: dict[float, Values] = {}
    for p in pi0s:
        values = {name: np.asarray(curve_cal[p][name], np.float64) for name in _CURVE_CALIBRATED}
        values |= {name: np.asarray(tau_cal[p][name], np.float64) for name in _THRESHOLD_CALIBRATED}
        calibrated[p] = values
    return regular, calibrated
