"""Metrics of probability models (scores in [0, 1]): Brier family, log loss, ECE/MCE, reliability.

All of them are sums over rows, so they are computed in O(n) from each class's scores sorted
ascending (the arrays the ranking is built from): a bin or a clipping range is then a
contiguous slice found by binary search, so no per-row bin index or clipped copy is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray
from calmon.catalogue import PROBABILITY_METRICS
from calmon.metrics.ranking import distinct_runs

#: Probabilities are clipped to [LOG_LOSS_EPS, 1 - LOG_LOSS_EPS] inside the log loss.
LOG_LOSS_EPS = 1e-15
#: Bins of ECE and MCE: equal-width on [0, 1], right-closed.
ECE_BINS = 10

ReliabilityStrategy = Literal["uniform", "quantile"]


@dataclass(frozen=True, slots=True)
class BinTable:
    """Per-bin sums of a set split by ``edges`` (B + 1,), bins right-closed.

    Bin i holds edges[i] < s ≤ edges[i+1], and bin 0 also everything ≤ edges[1] (so it holds
    0), which is scikit-learn's ``calibration_curve`` rule. Arrays are (B,).
    """

    edges: FloatArray
    count: npt.NDArray[np.int64]
    positives: npt.NDArray[np.int64]
    score_sum: FloatArray


def uniform_edges(bins: int) -> FloatArray:
    """``bins`` equal-width bins on [0, 1] (the same floats as ``calibration_curve``)."""
    return np.linspace(0.0, 1.0, bins + 1)


def quantile_edges(scores: FloatArray, bins: int) -> FloatArray:
    """Edges at the 0, 1/bins, …, 1 quantiles of ``scores`` (n ≥ 1); duplicate edges give
    empty bins, as in ``calibration_curve(strategy="quantile")``."""
    edges: FloatArray = np.percentile(scores, np.linspace(0.0, 1.0, bins + 1) * 100)
    return edges


def bin_table(pos_sorted: FloatArray, neg_sorted: FloatArray, edges: FloatArray) -> BinTable:
    """Count rows, positives and score sums per bin; each class sorted ascending."""
    inner = edges[1:-1]
    bins = edges.size - 1
    count = np.zeros(bins, dtype=np.int64)
    positives = np.zeros(bins, dtype=np.int64)
    score_sum = np.zeros(bins)
    for is_pos, arr in ((True, pos_sorted), (False, neg_sorted)):
        bounds = np.concatenate(([0], np.searchsorted(arr, inner, side="right"), [arr.size]))
        sizes = np.diff(bounds)
        count += sizes
        if is_pos:
            positives += sizes
        for i in range(bins):
            score_sum[i] += arr[bounds[i] : bounds[i + 1]].sum()
    return BinTable(edges=edges, count=count, positives=positives, score_sum=score_sum)


def reliability(table: BinTable) -> list[dict[str, float | int | None]]:
    """The reliability diagram: per bin lower and upper edge, count, mean score and fraction
    of positives (both None for an empty bin)."""
    rows: list[dict[str, float | int | None]] = []
    for i in range(table.count.size):
        n_bin = int(table.count[i])
        rows.append(
            {
                "lower": float(table.edges[i]),
                "upper": float(table.edges[i + 1]),
                "count": n_bin,
                "mean_score": float(table.score_sum[i] / n_bin) if n_bin else None,
                "fraction_positive": float(table.positives[i] / n_bin) if n_bin else None,
            }
        )
    return rows


@dataclass(frozen=True, slots=True)
class ProbabilitySums:
    """The sums every probability metric of a set comes from; additive over disjoint sets.

    Attributes:
        n_pos, n_neg: class sizes.
        pos_sq: Σ (1 - s)² over positives; neg_sq: Σ s² over negatives.
        log_sum: Σ y log s + (1 - y) log(1 - s), s clipped to [1e-15, 1 - 1e-15].
        ece_table: the :data:`ECE_BINS` equal-width :func:`bin_table`.
    """

    n_pos: int
    n_neg: int
    pos_sq: float
    neg_sq: float
    log_sum: float
    ece_table: BinTable

    def __add__(self, other: ProbabilitySums) -> ProbabilitySums:
        a, b = self.ece_table, other.ece_table
        return ProbabilitySums(
            n_pos=self.n_pos + other.n_pos,
            n_neg=self.n_neg + other.n_neg,
            pos_sq=self.pos_sq + other.pos_sq,
            neg_sq=self.neg_sq + other.neg_sq,
            log_sum=self.log_sum + other.log_sum,
            ece_table=BinTable(
                edges=a.edges,
                count=a.count + b.count,
                positives=a.positives + b.positives,
                score_sum=a.score_sum + b.score_sum,
            ),
        )


def probability_sums(
    pos_sorted: FloatArray, neg_sorted: FloatArray, *, ece_table: BinTable | None = None
) -> ProbabilitySums:
    """The :class:`ProbabilitySums` of a set given each class's scores in [0, 1], ascending
    (``ece_table``: its equal-width table when already built)."""
    pos_gap = 1.0 - pos_sorted
    pos_sq = float(np.dot(pos_gap, pos_gap))
    del pos_gap
    log_sum = _clipped_log_sum(pos_sorted, positive=True) + _clipped_log_sum(
        neg_sorted, positive=False
    )
    return ProbabilitySums(
        n_pos=int(pos_sorted.size),
        n_neg=int(neg_sorted.size),
        pos_sq=pos_sq,
        neg_sq=float(np.dot(neg_sorted, neg_sorted)),
        log_sum=log_sum,
        ece_table=(
            bin_table(pos_sorted, neg_sorted, uniform_edges(ECE_BINS))
            if ece_table is None
            else ece_table
        ),
    )


def metrics_from_sums(sums: ProbabilitySums) -> dict[str, float | None]:
    """The probability metrics of the set ``sums`` describes.

    - brier = mean (s - y)², brier_pos = mean over positives of (1 - s)², brier_neg = mean
      over negatives of s²; brier_skill = 1 - brier / (π(1 - π)).
    - log_loss = -mean(y log s + (1 - y) log(1 - s)), s clipped to [1e-15, 1 - 1e-15].
    - ece = Σ_b (n_b/n)·|mean s_b - mean y_b| = Σ_b |Σ_b s - Σ_b y| / n; mce = max over
      non-empty bins of |mean s_b - mean y_b|.

    Undefined (None): everything when n = 0; brier_pos without positives; brier_neg without
    negatives; brier_skill unless both classes are present.
    """
    n_pos = sums.n_pos
    n_neg = sums.n_neg
    n = n_pos + n_neg
    if n == 0:
        return dict.fromkeys(PROBABILITY_METRICS)
    pos_sq, neg_sq = sums.pos_sq, sums.neg_sq
    brier = (pos_sq + neg_sq) / n
    prior = n_pos / n
    table = sums.ece_table
    occupied = table.count > 0
    gaps = np.abs(table.score_sum - table.positives)
    bin_gaps = gaps[occupied] / table.count[occupied]
    return {
        "brier": brier,
        "brier_skill": 1.0 - brier / (prior * (1.0 - prior)) if 0 < n_pos < n else None,
        "brier_pos": pos_sq / n_pos if n_pos else None,
        "brier_neg": neg_sq / n_neg if n_neg else None,
        "log_loss": -sums.log_sum / n,
        "ece": float(gaps.sum() / n),
        "mce": float(bin_gaps.max()),
    }


def _clipped_log_sum(sorted_scores: FloatArray, *, positive: bool) -> float:
    """Σ log s (positives) or Σ log(1 - s) (negatives), s clipped to [ε, 1 - ε]."""
    lo = int(np.searchsorted(sorted_scores, LOG_LOSS_EPS, side="left"))
    hi = int(np.searchsorted(sorted_scores, 1.0 - LOG_LOSS_EPS, side="right"))
    low_clip, high_clip = LOG_LOSS_EPS, 1.0 - LOG_LOSS_EPS
    if positive:
        ends = lo * np.log(low_clip) + (sorted_scores.size - hi) * np.log(high_clip)
    else:
        ends = lo * np.log(1.0 - low_clip) + (sorted_scores.size - hi) * np.log(1.0 - high_clip)
    middle = sorted_scores[lo:hi]
    runs = distinct_runs(middle, max_runs=middle.size // 8)
    if runs is not None:
        values, counts = runs
        logs = np.log(values if positive else 1.0 - values)
        inner = float(np.dot(logs, counts))
    else:
        inner = _log_sum(middle, complement=not positive)
    return inner + float(ends)


_LOG_GROUP = 16
_LOG_CHUNK = 1 << 16


def _log_sum(values: FloatArray, *, complement: bool) -> float:
    """Σ log x over x = values (or 1 - values), each x in [1e-15, 1].

    Computed as Σ over groups of 16 of log(Π x): a product of 16 such numbers is ≥ 1e-240,
    so it cannot underflow, and one log per group costs far less than one per value. Done
    in cache-sized chunks so no array of the input's size is allocated.
    """
    total = 0.0
    buffer = np.empty(min(_LOG_CHUNK, values.size))
    for start in range(0, values.size, _LOG_CHUNK):
        chunk = values[start : start + _LOG_CHUNK]
        if complement:
            chunk = np.subtract(1.0, chunk, out=buffer[: chunk.size])
        grouped = chunk.size - chunk.size % _LOG_GROUP
        products = chunk[:grouped].reshape(-1, _LOG_GROUP).prod(axis=1)
        total += float(np.log(products).sum()) + float(np.log(chunk[grouped:]).sum())
    return total
