"""Metrics at the model's decision threshold τ (predicted positive iff s ≥ τ), batched.

Inputs are confusion counts at τ; any leading shape works, so one call serves the point
estimate (0-d arrays) and a bootstrap (one value per replicate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray

ArrayLike = npt.ArrayLike


@dataclass(frozen=True, slots=True)
class ThresholdValues:
    """Metrics at τ, each an array with the leading shape of the counts; NaN where undefined.

    Attributes:
        regular: ``precision``, ``recall``, ``fpr``, ``f1``.
        calibrated: for each π0 (as given, converted to float): ``precision``, ``f1``.
    """

    regular: dict[str, FloatArray]
    calibrated: dict[float, dict[str, FloatArray]]


def calibration_ratio(prior: FloatArray, pi0: float | FloatArray) -> FloatArray:
    """r = π(1 - π0) / (π0(1 - π)), the factor on FP in the calibrated precision TP/(TP + r·FP).

    ``prior`` has any shape; ``pi0`` is a float or an array broadcasting with it. r is exactly
    1.0 when ``pi0`` is the same float as π (both products are the same float), so calibrated
    metrics then equal the regular ones bit for bit. r is 0, inf or NaN where π ∉ (0, 1);
    callers mark those values undefined.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio: FloatArray = (prior * (1.0 - pi0)) / (pi0 * (1.0 - prior))
    return ratio


def f1_from_counts(
    two_tp: FloatArray, flagged: FloatArray, n_pos: FloatArray, *, out: FloatArray | None = None
) -> FloatArray:
    """F1 = 2PR/(P + R) with P = TP/flagged, R = TP/n_pos, computed as 2·TP/(flagged + n_pos).

    ``two_tp`` is 2·TP; ``flagged`` is TP + FP (regular) or TP + r·FP (calibrated). The
    single-division form is the same number, is 0 when TP = 0 < flagged (P + R = 0), and gives
    equal floats to equal ratios of integer counts, so "the highest threshold reaching the
    best F1" is not decided by rounding. Where flagged = 0 or n_pos = 0 the caller marks F1
    undefined. ``out`` may be ``flagged`` itself (it is then overwritten).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        if out is None:
            f1: FloatArray = two_tp / (flagged + n_pos)
        else:
            np.add(flagged, n_pos, out=out)
            f1 = np.divide(two_tp, out, out=out)
    return f1


def threshold_metrics(
    tp: ArrayLike,
    fp: ArrayLike,
    n_pos: ArrayLike,
    n_neg: ArrayLike,
    *,
    pi0: Sequence[float],
) -> ThresholdValues:
    """Precision, recall, FPR, F1 at τ and their π0-calibrated versions.

    ``tp``, ``fp`` (positives / negatives with s ≥ τ) and the class totals ``n_pos``,
    ``n_neg`` broadcast to a common leading shape (...,); counts may be int or float. Each
    leading index is calibrated with its own π = n_pos / (n_pos + n_neg).

    Undefined (NaN): recall when n_pos = 0; fpr when n_neg = 0; precision and f1 (regular
    and calibrated) unless both classes are present, and precision when TP + FP = 0; f1
    when precision is undefined (0 when precision and recall are both 0). Without negatives
    precision would be 1, without positives 0, whatever the model does, so a set with one
    class has no precision. Recall and fpr only need their own class.
    """
    tp_a, fp_a, pos_a, neg_a = (
        np.asarray(x, dtype=np.float64) for x in np.broadcast_arrays(tp, fp, n_pos, n_neg)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        predicted = tp_a + fp_a
        has_pos = pos_a > 0
        has_neg = neg_a > 0
        defined = (predicted > 0) & has_pos & has_neg
        nan = np.float64(np.nan)
        regular = {
            "precision": np.where(defined, tp_a / predicted, nan),
            "recall": np.where(has_pos, tp_a / pos_a, nan),
            "fpr": np.where(has_neg, fp_a / neg_a, nan),
            "f1": np.where(defined, f1_from_counts(2.0 * tp_a, predicted, pos_a), nan),
        }
        prior = pos_a / (pos_a + neg_a)
        calibrated: dict[float, dict[str, FloatArray]] = {}
        for value in pi0:
            key = float(value)
            flagged = tp_a + calibration_ratio(prior, key) * fp_a
            calibrated[key] = {
                "precision": np.where(defined, tp_a / flagged, nan),
                "f1": np.where(defined, f1_from_counts(2.0 * tp_a, flagged, pos_a), nan),
            }
    return ThresholdValues(regular=regular, calibrated=calibrated)
