"""Curve metrics from positive blocks, batched over any leading shape.

One call computes ROC AUC, KS, average precision, best F1 (and its threshold) and AUPRG,
regular and π0-calibrated, from the block counts of :class:`calmon.metrics.ranking.Ranking`
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
from typing import Any

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray
from calmon.metrics.thresholded import calibration_ratio, f1_from_counts

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
    pos: npt.NDArray[Any]  # counts as given (int or float)
    neg_tied: npt.NDArray[Any]
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
    (..., K) counts as in :class:`~calmon.metrics.ranking.Ranking` (int or float, possibly 0);
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

    Undefined (NaN): every value unless both classes are present (n_pos > 0 and n_neg > 0).
    Each of these metrics compares the two classes: without negatives average precision and
    best F1 would be 1 and best_f1_threshold the lowest positive score whatever the model
    does, so those are not reported as values either.
    """
    blocks = _blocks(thresholds, pos, neg_tied, neg_above, neg_below)
    nan = np.float64(np.nan)
    if blocks.thresholds.size == 0:  # no positives anywhere: nothing is defined
        lead = blocks.n_pos.shape
        return CurveValues(
            regular={name: np.full(lead, nan) for name in REGULAR_CURVE_METRICS},
            calibrated={
                float(p): {name: np.full(lead, nan) for name in CALIBRATED_CURVE_METRICS}
                for p in pi0
            },
        )
    both = (blocks.n_pos > 0) & (blocks.n_neg > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        shared = _Shared(blocks)
        computed = _prior_dependent(blocks, shared, ratio=None, crossing=blocks.prior)
        computed["roc_auc"] = _roc_auc(blocks)
        computed["ks"] = _ks(blocks)
        regular = {name: np.where(both, values, nan) for name, values in computed.items()}
        calibrated: dict[float, dict[str, FloatArray]] = {}
        for value in pi0:
            key = float(value)
            values = _prior_dependent(
                blocks,
                shared,
                ratio=calibration_ratio(blocks.prior, key),
                crossing=np.full_like(blocks.prior, key),
            )
            calibrated[key] = {name: np.where(both, values[name], nan) for name in values}
    return CurveValues(
        regular={name: regular[name] for name in REGULAR_CURVE_METRICS},
        calibrated={
            key: {name: values[name] for name in CALIBRATED_CURVE_METRICS}
            for key, values in calibrated.items()
        },
    )


def auc_and_ap(
    thresholds: npt.ArrayLike,
    pos: npt.ArrayLike,
    neg_tied: npt.ArrayLike,
    *,
    pi0: Sequence[float],
) -> CurveValues:
    """ROC AUC and average precision alone, regular and calibrated at each ``pi0``, for blocks
    without negatives between them (``neg_above`` 0, ``neg_below`` 0): the same expressions,
    hence the same values, as :func:`curve_metrics`, without the metrics nobody reads from
    such blocks (the label-free estimate's, one block per distinct score, millions of them),
    in as few passes over the blocks as they take.

    ``regular`` holds ``roc_auc`` and ``average_precision``, ``calibrated`` (π0 as float)
    ``average_precision``; NaN unless both classes are present. 1-D counts only."""
    pos_a, tied_a = np.asarray(pos), np.asarray(neg_tied)
    nan = np.full((), np.nan)
    if pos_a.size == 0:
        return CurveValues(
            regular={"roc_auc": nan, "average_precision": nan},
            calibrated={float(p): {"average_precision": nan} for p in pi0},
        )
    tp = np.cumsum(pos_a, dtype=np.float64)
    fp = np.cumsum(tied_a, dtype=np.float64)  # neg_above + neg_tied with neg_above 0
    n_pos, n_neg = tp[-1].copy(), fp[-1] + 0.0
    both = (n_pos > 0) & (n_neg > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        prior = n_pos / (n_pos + n_neg)
        roc_auc = _roc_auc_of(pos_a, fp, tied_a, n_pos, n_neg)
        pos_tp = pos_a * tp
        tp_nonzero = np.add(tp, np.finfo(np.float64).tiny, out=tp)
        flagged = np.add(tp_nonzero, fp)

        def average_precision() -> FloatArray:
            np.reciprocal(flagged, out=flagged)
            ap: FloatArray = np.einsum("...k,...k->...", pos_tp, flagged) / n_pos
            return np.where(both, ap, nan)

        regular = {
            "roc_auc": np.where(both, roc_auc, nan),
            "average_precision": average_precision(),
        }
        calibrated: dict[float, dict[str, FloatArray]] = {}
        for value in pi0:
            np.multiply(fp, calibration_ratio(prior, float(value)), out=flagged)
            flagged += tp_nonzero
            calibrated[float(value)] = {"average_precision": average_precision()}
    return CurveValues(regular=regular, calibrated=calibrated)


def _blocks(
    thresholds: npt.ArrayLike,
    pos: npt.ArrayLike,
    neg_tied: npt.ArrayLike,
    neg_above: npt.ArrayLike,
    neg_below: npt.ArrayLike,
) -> _Blocks:
    thr = np.asarray(thresholds, dtype=np.float64)
    pos_a, tied_a, above_a, below_a = (np.asarray(x) for x in (pos, neg_tied, neg_above, neg_below))
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
    tp = np.cumsum(pos_a, axis=-1, dtype=np.float64)
    fp = np.cumsum(above_a + tied_a, axis=-1, dtype=np.float64)
    if k:
        n_pos = tp[..., -1].copy()
        n_neg = fp[..., -1] + below_a
    else:
        n_pos = np.zeros(lead)
        n_neg = below_a.astype(np.float64)
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
    """Σ pos·(n_neg - FP + tied/2) = n_pos·n_neg - Σ pos·FP + Σ pos·tied/2, over n_pos·n_neg."""
    return _roc_auc_of(b.pos, b.fp, b.neg_tied, b.n_pos, b.n_neg)


def _roc_auc_of(
    pos: npt.NDArray[Any],
    fp: FloatArray,
    neg_tied: npt.NDArray[Any],
    n_pos: FloatArray,
    n_neg: FloatArray,
) -> FloatArray:
    """:func:`_roc_auc` of the blocks' counts and cumulative FP."""
    losses = np.einsum("...k,...k->...", pos, fp) - 0.5 * np.einsum("...k,...k->...", pos, neg_tied)
    pairs = n_pos * n_neg
    auc: FloatArray = (pairs - losses) / pairs
    return auc


def _ks(b: _Blocks) -> FloatArray:
    gap = b.tp / b.n_pos[..., None]
    gap -= b.fp / b.n_neg[..., None]
    ks: FloatArray = np.maximum(gap.max(axis=-1, initial=0.0), 0.0)
    return ks


class _Shared:
    """What every P (regular and each π0) reuses, (..., K) each.

    - ``fn_over_tp`` g = FN/TP, so RG = 1 - k·g for k = c/(1-c); inf where TP = 0.
    - ``tail``: E_i = Σ_{j>i} (g_j - g_{j-1})·(PGa_j + PG_j), where PG_j is the precision gain
      at block j and PGa_j the one at the point just above it (TP_{j-1}, FP before block j).
      The trapezoids after the first block b with RG ≥ 0 then sum to -k·E_b/2 for any k,
      since RG_j - RG_{j-1} = -k·(g_j - g_{j-1}). Values at i < b may be NaN; never read.
    - ``pos_tp`` pos·TP (AP numerators), ``two_tp`` 2·TP (F1 numerators), ``tp_nonzero``.
    """

    def __init__(self, b: _Blocks) -> None:
        odds = (b.n_pos / b.n_neg)[..., None]  # π/(1-π)
        self.fn_over_tp: FloatArray = (b.n_pos[..., None] - b.tp) / b.tp
        heights = (b.fp - b.neg_tied) / (b.tp - b.pos)  # at the point just above each block
        heights += b.fp / b.tp
        heights *= -odds
        heights += 2.0  # PGa_j + PG_j
        steps = np.empty_like(heights)
        steps[..., -1] = 0.0
        np.subtract(self.fn_over_tp[..., 1:], self.fn_over_tp[..., :-1], out=steps[..., :-1])
        steps[..., :-1] *= heights[..., 1:]
        self.tail: FloatArray = np.cumsum(steps[..., ::-1], axis=-1)[..., ::-1]
        self.pos_tp: FloatArray = b.pos * b.tp
        # TP + tiny is TP for every TP ≥ 1 and keeps TP + r·FP > 0 where TP = FP = 0 (P := 0).
        self.tp_nonzero: FloatArray = b.tp + np.finfo(np.float64).tiny
        self.two_tp: FloatArray = 2.0 * b.tp
        self.scratch: FloatArray = heights  # reused by _prior_dependent


def _prior_dependent(
    b: _Blocks, shared: _Shared, *, ratio: FloatArray | None, crossing: FloatArray
) -> dict[str, FloatArray]:
    """AP, best F1 and AUPRG for P = TP/(TP + r·FP) (r = ``ratio`` (...,), None for 1) and
    AUPRG crossing constant c = ``crossing`` (...,)."""
    flagged = shared.scratch
    ap = _average_precision(b, shared.pos_tp, shared.tp_nonzero, ratio=ratio, flagged=flagged)
    f1 = f1_from_counts(shared.two_tp, flagged, b.n_pos[..., None], out=flagged)
    best = np.argmax(f1, axis=-1)[..., None]
    best_f1 = np.take_along_axis(f1, best, axis=-1)[..., 0]
    best_threshold = b.thresholds[best[..., 0]]
    return {
        "average_precision": ap,
        "best_f1": best_f1,
        "best_f1_threshold": best_threshold,
        "pr_gain_auc": _auprg(b, shared, crossing),
    }


def _average_precision(
    b: _Blocks,
    pos_tp: FloatArray,
    tp_nonzero: FloatArray,
    *,
    ratio: FloatArray | None,
    flagged: FloatArray,
) -> FloatArray:
    """AP for P = TP/(TP + r·FP) (r = ``ratio`` (...,), None for 1) from pos·TP ``pos_tp`` and
    TP + tiny ``tp_nonzero`` (..., K); ``flagged`` (..., K) is left holding TP + r·FP."""
    if ratio is None:
        np.add(tp_nonzero, b.fp, out=flagged)
    else:
        np.multiply(b.fp, ratio[..., None], out=flagged)
        flagged += tp_nonzero
    ap: FloatArray = np.einsum("...k,...k->...", pos_tp, np.reciprocal(flagged)) / b.n_pos
    return ap


def _auprg(b: _Blocks, shared: _Shared, crossing: FloatArray) -> FloatArray:
    """AUPRG with recall-gain constant c = ``crossing`` (...,); see :func:`curve_metrics`."""
    odds = crossing / (1.0 - crossing)
    g = shared.fn_over_tp
    k = g.shape[-1]
    # First block b with RG = 1 - odds·g ≥ 0 (g is nonincreasing; the last block has g = 0).
    first = np.count_nonzero(g > (1.0 / odds)[..., None], axis=-1)
    first = np.minimum(first, k - 1)[..., None]

    def at_first(arr: npt.NDArray[Any]) -> FloatArray:
        picked: FloatArray = np.take_along_axis(arr, first, axis=-1)[..., 0]
        return picked

    tp_b, fp_b = at_first(b.tp), at_first(b.fp)
    rg_first = 1.0 - odds * at_first(g)
    gain_first = 1.0 - (b.n_pos * fp_b) / (b.n_neg * tp_b)
    tp_star = crossing * b.n_pos
    tp_prev = tp_b - at_first(b.pos)
    fp_prev = fp_b - at_first(b.neg_tied)
    fp_star = fp_prev + (tp_star - tp_prev) * at_first(b.neg_tied) / at_first(b.pos)
    gain_star = 1.0 - (b.n_pos * fp_star) / (b.n_neg * tp_star)
    result: FloatArray = 0.5 * (rg_first * (gain_star + gain_first) - odds * at_first(shared.tail))
    return result


def prior_dependent_at(
    thresholds: npt.ArrayLike,
    pos: npt.ArrayLike,
    neg_tied: npt.ArrayLike,
    neg_above: npt.ArrayLike,
    neg_below: npt.ArrayLike,
    *,
    pi0: FloatArray,
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """The prior-dependent curve metrics (:data:`CALIBRATED_CURVE_METRICS`), regular and
    calibrated at one π0 per set, from one pass over the blocks: ``(regular, calibrated)``.

    Counts as for :func:`curve_metrics`; ``pi0`` has the counts' leading shape (...,), so each
    bootstrap replicate can be calibrated at its own π0 (the drift split calibrates each
    replicate at the prior of the other set's replicate). The values equal those of
    :func:`curve_metrics` with that π0 (same expressions); computing both here shares the
    cumulative counts and the AUPRG tail, which is most of the cost. NaN unless both classes
    are present, and calibrated values also NaN where π0 ∉ (0, 1) (NaN included).
    """
    blocks = _blocks(thresholds, pos, neg_tied, neg_above, neg_below)
    p = np.broadcast_to(np.asarray(pi0, dtype=np.float64), blocks.n_pos.shape)
    nan = np.float64(np.nan)
    if blocks.thresholds.size == 0:
        empty = {name: np.full(p.shape, nan) for name in CALIBRATED_CURVE_METRICS}
        return empty, dict(empty)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        both = (blocks.n_pos > 0) & (blocks.n_neg > 0)
        valid = both & (p > 0) & (p < 1)
        crossing = np.where(valid, p, 0.5)
        shared = _Shared(blocks)
        regular = _prior_dependent(blocks, shared, ratio=None, crossing=blocks.prior)
        calibrated = _prior_dependent(
            blocks,
            shared,
            ratio=calibration_ratio(blocks.prior, crossing),
            crossing=crossing,
        )
    return (
        {name: np.where(both, regular[name], nan) for name in CALIBRATED_CURVE_METRICS},
        {name: np.where(valid, calibrated[name], nan) for name in CALIBRATED_CURVE_METRICS},
    )


def average_precision_at(
    thresholds: npt.ArrayLike,
    pos: npt.ArrayLike,
    neg_tied: npt.ArrayLike,
    neg_above: npt.ArrayLike,
    neg_below: npt.ArrayLike,
    *,
    pi0: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """Average precision alone of :func:`prior_dependent_at`: ``(regular, calibrated)``, each
    (...,), from the same expressions, hence the same floats, without best F1 and AUPRG (most
    of its cost, a dozen passes over the blocks): the drift split's bootstrap gives intervals
    to AP's parts and not to theirs. NaN as there."""
    blocks = _blocks(thresholds, pos, neg_tied, neg_above, neg_below)
    p = np.broadcast_to(np.asarray(pi0, dtype=np.float64), blocks.n_pos.shape)
    nan = np.float64(np.nan)
    if blocks.thresholds.size == 0:
        return np.full(p.shape, nan), np.full(p.shape, nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        both = (blocks.n_pos > 0) & (blocks.n_neg > 0)
        valid = both & (p > 0) & (p < 1)
        ratio = calibration_ratio(blocks.prior, np.where(valid, p, 0.5))
        pos_tp = blocks.pos * blocks.tp
        tp_nonzero = blocks.tp + np.finfo(np.float64).tiny
        flagged = np.empty_like(blocks.tp)
        regular = _average_precision(blocks, pos_tp, tp_nonzero, ratio=None, flagged=flagged)
        calibrated = _average_precision(blocks, pos_tp, tp_nonzero, ratio=ratio, flagged=flagged)
    return np.where(both, regular, nan), np.where(valid, calibrated, nan)
