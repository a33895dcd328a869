"""Curve metrics from positive blocks, batched over any leading shape.

One call computes ROC AUC, KS, average precision, best F1 (and its threshold) and AUPRG,
regular and π0-calibrated, from the block counts of :class:`app.metrics.ranking.Ranking`
(leading shape ``()``) or from bootstrap replicates of those counts (leading shape ``(B,)``).
Everything is a cumulative sum or an elementwise expression over the K blocks: no loop over
blocks or rows (only over the π0 values).

Curve points (``docs/metrics.md``): block k enters whole, so at its threshold
TP_k = Σ_{i≤k} pos_i and FP_k = Σ_{i≤k} (neg_above_i + neg_tied_i). A block whose positive
count is 0 (possible in a bootstrap replicate) adds no curve point: it contributes nothing to
ROC AUC or AP, cannot beat the F1 of the point before it, and its negatives are carried into
the next block's FP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.metrics.thresholded import calibration_ratio, f1_from_counts

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

#: Regular curve metrics returned by :func:`curve_metrics`.
REGULAR_CURVE_METRICS = (
    "roc_auc",
    "average_precision",
    "best_f1",
    "best_f1_threshold",
    "pr_gain_auc",
    "ks",
)
#: Prior-dependent curve metrics, returned again per π0.
CALIBRATED_CURVE_METRICS = ("average_precision", "best_f1", "best_f1_threshold", "pr_gain_auc")


@dataclass(frozen=True, slots=True)
class CurveValues:
    """Curve metrics, each an array of the counts' leading shape (...,); NaN where undefined.

    Attributes:
        regular: the names in :data:`REGULAR_CURVE_METRICS`.
        calibrated: for each π0 (converted to float), the names in
            :data:`CALIBRATED_CURVE_METRICS`, computed with P_c and, for AUPRG, the recall
            gain and crossing point of π0.
    """

    regular: dict[str, FloatArray]
    calibrated: dict[float, dict[str, FloatArray]]


@dataclass(frozen=True, slots=True)
class _Blocks:
    """Cumulative counts shared by every metric; arrays (..., K) unless noted."""

    thresholds: FloatArray  # (K,)
    pos: FloatArray
    neg_tied: FloatArray
    tp: FloatArray
    fp: FloatArray
    n_pos: FloatArray  # (...,)
    n_neg: FloatArray  # (...,)
    prior: FloatArray  # (...,)


def curve_metrics(
    thresholds: npt.ArrayLike,
    pos: npt.ArrayLike,
    neg_tied: npt.ArrayLike,
    neg_above: npt.ArrayLike,
    neg_below: npt.ArrayLike,
    *,
    pi0: Sequence[float],
) -> CurveValues:
    """Every curve metric of ``docs/metrics.md``, regular and calibrated at each ``pi0``.

    Shapes: ``thresholds`` (K,) strictly decreasing; ``pos``, ``neg_tied``, ``neg_above``
    (..., K) counts as in :class:`~app.metrics.ranking.Ranking` (int or float, possibly 0);
    ``neg_below`` (...,). Each leading index is one evaluation set with its own
    π = n_pos / (n_pos + n_neg), which is the π used to calibrate it.

    Definitions (ties: a block enters whole; predicted positive iff s ≥ threshold):
        roc_auc = Σ_k pos_k·(negatives below block k + neg_tied_k / 2) / (n_pos·n_neg).
        ks = max(0, max_k TP_k/n_pos - FP_k/n_neg).
        average_precision = Σ_k (pos_k / n_pos)·P_k, P_k = TP_k / (TP_k + r·FP_k)
            (r = 1 regular, r = π(1-π0)/(π0(1-π)) calibrated).
        best_f1 = max_k 2·P_k·R_k / (P_k + R_k); best_f1_threshold = the highest threshold
            reaching it.
        pr_gain_auc: AUPRG with PG = 1 - (π/(1-π))·FP/TP and RG = 1 - (c/(1-c))·FN/TP,
            c = π (regular) or π0 (calibrated); the curve also holds the negative-only point
            just above each block (TP of the previous block, FP before the block's tied
            negatives); the part with RG < 0 is cut at RG = 0 by linear interpolation in
            (TP, FP) at TP* = c·n_pos; trapezoids from there on; PG is not clipped.

    Undefined (NaN): everything when n_pos = 0; roc_auc, ks and pr_gain_auc also when
    n_neg = 0; every calibrated value when π ∉ (0, 1). With n_neg = 0 the regular average
    precision and best F1 are 1 (every prediction is a positive).
    """
    blocks = _blocks(thresholds, pos, neg_tied, neg_above, neg_below)
    nan = np.float64(np.nan)
    has_pos = blocks.n_pos > 0
    both = has_pos & (blocks.n_neg > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gains = _GainCurve(blocks)
        regular = _prior_dependent(blocks, gains, weighted_fp=blocks.fp, crossing=blocks.prior)
        regular["average_precision"] = np.where(has_pos, regular["average_precision"], nan)
        regular["best_f1"] = np.where(has_pos, regular["best_f1"], nan)
        regular["best_f1_threshold"] = np.where(has_pos, regular["best_f1_threshold"], nan)
        regular["pr_gain_auc"] = np.where(both, regular["pr_gain_auc"], nan)
        regular["roc_auc"] = np.where(both, _roc_auc(blocks), nan)
        regular["ks"] = np.where(both, _ks(blocks), nan)
        calibrated: dict[float, dict[str, FloatArray]] = {}
        for value in pi0:
            key = float(value)
            ratio = calibration_ratio(blocks.prior, key)[..., None]
            crossing = np.full_like(blocks.prior, key)
            values = _prior_dependent(
                blocks, gains, weighted_fp=ratio * blocks.fp, crossing=crossing
            )
            calibrated[key] = {name: np.where(both, values[name], nan) for name in values}
    return CurveValues(
        regular={name: regular[name] for name in REGULAR_CURVE_METRICS},
        calibrated={
            key: {name: values[name] for name in CALIBRATED_CURVE_METRICS}
            for key, values in calibrated.items()
        },
    )


def _blocks(
    thresholds: npt.ArrayLike,
    pos: npt.ArrayLike,
    neg_tied: npt.ArrayLike,
    neg_above: npt.ArrayLike,
    neg_below: npt.ArrayLike,
) -> _Blocks:
    thr = np.asarray(thresholds, dtype=np.float64)
    pos_a = np.asarray(pos, dtype=np.float64)
    tied_a = np.asarray(neg_tied, dtype=np.float64)
    above_a = np.asarray(neg_above, dtype=np.float64)
    below_a = np.asarray(neg_below, dtype=np.float64)
    if thr.ndim != 1:
        raise ValueError(f"thresholds must be 1-D, got shape {thr.shape}")
    k = thr.shape[0]
    for name, arr in (("pos", pos_a), ("neg_tied", tied_a), ("neg_above", above_a)):
        if arr.ndim < 1 or arr.shape[-1] != k:
            raise ValueError(f"{name} must have shape (..., {k}), got {arr.shape}")
    if not pos_a.shape == tied_a.shape == above_a.shape:
        raise ValueError(
            f"pos, neg_tied and neg_above must have one shape, got "
            f"{pos_a.shape}, {tied_a.shape}, {above_a.shape}"
        )
    lead = pos_a.shape[:-1]
    if below_a.shape != lead:
        raise ValueError(f"neg_below must have shape {lead}, got {below_a.shape}")
    tp = np.cumsum(pos_a, axis=-1)
    fp = np.cumsum(above_a + tied_a, axis=-1)
    if k:
        n_pos = tp[..., -1].copy()
        n_neg = fp[..., -1] + below_a
    else:
        n_pos = np.zeros(lead)
        n_neg = below_a.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        prior = n_pos / (n_pos + n_neg)
    return _Blocks(
        thresholds=thr,
        pos=pos_a,
        neg_tied=tied_a,
        tp=tp,
        fp=fp,
        n_pos=n_pos,
        n_neg=n_neg,
        prior=prior,
    )


def _roc_auc(b: _Blocks) -> FloatArray:
    n_neg = b.n_neg[..., None]
    wins = (b.pos * (n_neg - b.fp + 0.5 * b.neg_tied)).sum(axis=-1)
    auc: FloatArray = wins / (b.n_pos * b.n_neg)
    return auc


def _ks(b: _Blocks) -> FloatArray:
    gap = b.tp / b.n_pos[..., None] - b.fp / b.n_neg[..., None]
    ks: FloatArray = np.maximum(gap.max(axis=-1, initial=0.0), 0.0)
    return ks


class _GainCurve:
    """The π0-independent parts of the precision-recall-gain curve, (..., K) each.

    PG = 1 - (π/(1-π))·FP/TP is evaluated as 1 - (n_pos·FP)/(n_neg·TP), which for integer
    counts is the correctly rounded value and exactly 0 where TN + FN = 0 (the rule of
    ``docs/metrics.md``; RG is then exactly 1 since FN = 0).
    """

    def __init__(self, b: _Blocks) -> None:
        n_pos = b.n_pos[..., None]
        n_neg = b.n_neg[..., None]
        fp_before = b.fp - b.neg_tied
        tp_before = b.tp - b.pos
        self.gain_at_block: FloatArray = 1.0 - (n_pos * b.fp) / (n_neg * b.tp)
        gain_above = 1.0 - (n_pos * fp_before) / (n_neg * tp_before)
        # Trapezoid heights (x2) from the point just above block j to block j.
        self.height_sum: FloatArray = gain_above + self.gain_at_block
        self.fn_over_tp: FloatArray = (b.n_pos[..., None] - b.tp) / b.tp
        self.fp_before = fp_before
        self.tp_before = tp_before


def _prior_dependent(
    b: _Blocks, gains: _GainCurve, *, weighted_fp: FloatArray, crossing: FloatArray
) -> dict[str, FloatArray]:
    """AP, best F1 and AUPRG for one P (via ``weighted_fp`` = r·FP) and one crossing c."""
    k = b.thresholds.shape[0]
    lead = b.n_pos.shape
    if k == 0:
        empty = np.full(lead, np.nan)
        return {
            "average_precision": empty,
            "best_f1": empty,
            "best_f1_threshold": empty,
            "pr_gain_auc": empty,
        }
    flagged = b.tp + weighted_fp
    np.maximum(flagged, np.finfo(np.float64).tiny, out=flagged)  # TP = FP = 0 gives P = 0
    ap = (b.pos * b.tp / flagged).sum(axis=-1) / b.n_pos
    f1 = f1_from_counts(b.tp, flagged, b.n_pos[..., None])
    best = np.argmax(f1, axis=-1)[..., None]
    best_f1 = np.take_along_axis(f1, best, axis=-1)[..., 0]
    best_threshold = b.thresholds[best[..., 0]]
    return {
        "average_precision": ap,
        "best_f1": best_f1,
        "best_f1_threshold": best_threshold,
        "pr_gain_auc": _auprg(b, gains, crossing),
    }


def _auprg(b: _Blocks, gains: _GainCurve, crossing: FloatArray) -> FloatArray:
    """AUPRG with recall-gain constant c = ``crossing`` (...,); see :func:`curve_metrics`."""
    odds = (crossing / (1.0 - crossing))[..., None]
    recall_gain = 1.0 - odds * gains.fn_over_tp  # nondecreasing along blocks; -inf at TP = 0
    k = recall_gain.shape[-1]
    # First block with RG >= 0 (the last block with positives has RG = 1).
    first = np.minimum(np.count_nonzero(recall_gain < 0.0, axis=-1), k - 1)[..., None]

    def at_first(arr: FloatArray) -> FloatArray:
        picked: FloatArray = np.take_along_axis(arr, first, axis=-1)[..., 0]
        return picked

    rg_first = at_first(recall_gain)
    tp_star = crossing * b.n_pos
    tp_prev = at_first(gains.tp_before)
    fp_star = at_first(gains.fp_before) + (tp_star - tp_prev) * at_first(b.neg_tied) / at_first(
        b.pos
    )
    gain_star = 1.0 - (b.n_pos * fp_star) / (b.n_neg * tp_star)
    area = rg_first * (gain_star + at_first(gains.gain_at_block))
    steps = np.diff(recall_gain, axis=-1) * gains.height_sum[..., 1:]
    area += np.where(recall_gain[..., :-1] >= 0.0, steps, 0.0).sum(axis=-1)
    result: FloatArray = 0.5 * area
    return result
