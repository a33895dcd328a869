"""A recalibration map for a window's class ratio: the reference's isotonic calibration moved
to the window's prior, as a monotone piecewise-linear map of at most :data:`MAX_KNOTS` knots.

1. Calibration on the reference: the isotonic levels of :mod:`calmon.metrics.label_free`
   (pool-adjacent-violators of the label on the score), q_j = pos_j / (pos_j + neg_j).
2. At most :data:`MAX_KNOTS` // 2 - 1 buckets: when the reference has more levels, adjacent
   levels are pooled by equal shares of the mixture ½·P(level | y = 1) + ½·P(level | y = 0),
   so that the high scores, rare among negatives but where most positives lie, keep their
   resolution. Pooling adjacent levels of an isotonic fit keeps it nondecreasing.
3. Prior correction: a bucket's probability at prior π is its reference fraction q with its
   odds scaled by r = π(1 - π_ref) / (π_ref(1 - π)): p' = r·q / (r·q + 1 - q). (Without the
   pseudocounts of the label-free estimate's class shares, which would break the
   monotonicity of small buckets.)
4. Knots at the lowest and the highest reference positive score of each bucket, with the
   bucket's p'; between buckets the map is linear (scikit-learn's isotonic ``predict`` does
   the same between distinct scores). For probability models, knots at 0 and 1 carry the
   lowest and highest buckets' values, so every score in [0, 1] is inside the map.

A client applies it with one interpolation (clamped at both ends):
``numpy.interp(scores, [k[0] for k in knots], [k[1] for k in knots])``.

Why isotonic and not Platt: the reference is kept as its ranking (positive scores and the
negatives counted between them), not as rows, so a logistic fit would need the negatives'
scores it does not have; isotonic needs only those counts, makes no assumption on the shape
of the miscalibration, and is the calibration tutorial's recommended method for calibration
sets of 1000 rows or more (:data:`MIN_ROWS`). Below that, there is no map.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from calmon.arrays import FloatArray
from calmon.metrics.label_free import LabelShiftReference

#: The method named in the map.
METHOD: Final = "isotonic"
#: Most knots of a map.
MAX_KNOTS: Final = 200
#: Fewest labelled reference rows, and of each class, for a map.
MIN_ROWS: Final = 1000
MIN_CLASS_ROWS: Final = 20


@dataclass(frozen=True, slots=True)
class CalibrationMap:
    """Knots (m, 2) of a monotone piecewise-linear map: scores strictly increasing,
    probabilities nondecreasing."""

    method: str
    knots: FloatArray

    def apply(self, scores: FloatArray) -> FloatArray:
        """The recalibrated probability of each score (one interpolation, clamped)."""
        out: FloatArray = np.interp(scores, self.knots[:, 0], self.knots[:, 1])
        return out


def too_small(reference: LabelShiftReference) -> str | None:
    """Why the reference is too small for a map, or None."""
    pos, neg = float(reference.pos.sum()), float(reference.neg.sum())
    if pos + neg < MIN_ROWS or min(pos, neg) < MIN_CLASS_ROWS:
        return (
            f"the reference has {int(pos + neg)} labelled rows ({int(pos)} positive); a map "
            f"needs {MIN_ROWS}, {MIN_CLASS_ROWS} of each class"
        )
    return None


def _buckets(reference: LabelShiftReference, count: int) -> FloatArray:
    """(J,) the bucket of each level: the levels themselves when there are at most ``count``,
    else ``count`` runs of about equal mixture mass (step 2 of the module docstring)."""
    levels = reference.pos.size
    if levels <= count:
        return np.arange(levels, dtype=np.float64)
    mass = 0.5 * (reference.pos / reference.pos.sum() + reference.neg / reference.neg.sum())
    middle = np.cumsum(mass) - 0.5 * mass
    bucket = np.minimum(np.floor(middle * count), count - 1)
    _, dense = np.unique(bucket, return_inverse=True)
    return dense.astype(np.float64)


def calibration_map(
    reference: LabelShiftReference, *, prior: float, score_kind: str, max_knots: int = MAX_KNOTS
) -> CalibrationMap:
    """The map of the module docstring at ``prior`` ∈ (0, 1)."""
    bucket = _buckets(reference, max_knots // 2 - 1).astype(np.int64)
    size = int(bucket[-1]) + 1
    pos = np.bincount(bucket, weights=reference.pos, minlength=size)
    neg = np.bincount(bucket, weights=reference.neg, minlength=size)
    fraction = pos / (pos + neg)
    ratio = prior * (1.0 - reference.prior) / (reference.prior * (1.0 - prior))
    value = np.clip(ratio * fraction / (ratio * fraction + 1.0 - fraction), 0.0, 1.0)
    scores = reference.ascending
    # the level of the rows at ascending[m] is that of elementary group 2m + 1
    of_score = bucket[reference.group_level[1 : 2 * scores.size : 2]]
    starts = np.flatnonzero(np.diff(of_score, prepend=-1))
    ends = np.append(starts[1:], scores.size) - 1
    x = np.stack((scores[starts], scores[ends]), axis=1).ravel()
    y = np.repeat(value[of_score[starts]], 2)
    single = np.repeat(starts == ends, 2)
    single[::2] = False
    x, y = x[~single], y[~single]
    if score_kind == "probability":
        lowest = value[bucket[reference.group_level[0]]]
        highest = value[bucket[reference.group_level[-1]]]
        if x[0] > 0.0:
            x, y = np.insert(x, 0, 0.0), np.insert(y, 0, lowest)
        if x[-1] < 1.0:
            x, y = np.append(x, 1.0), np.append(y, highest)
    return CalibrationMap(method=METHOD, knots=np.stack((x, y), axis=1))
