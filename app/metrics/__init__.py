"""The metric engine: NumPy arrays in, the numbers of ``docs/metrics.md`` out (no I/O).

- :func:`evaluate`: every metric of one evaluation set as a JSON-able dict.
- :func:`drift_split`, :func:`split_from_arrays`: prior / likelihood / total change (the
  mean of both calibration orders), with the intervals of both parts
  (:func:`app.metrics.split.split_intervals`).
- :func:`curve_metrics`, :func:`threshold_metrics`: the batched cores (any leading shape),
  shared by point estimates and the bootstrap.
- :func:`rank`, :class:`Ranking`: the one sort every curve metric comes from.
"""

from app.catalogue import CALIBRATED_METRICS, REGULAR_METRICS
from app.metrics.curves import CurveValues, curve_metrics
from app.metrics.evaluation import evaluate
from app.metrics.ranking import Ranking, rank
from app.metrics.split import SPLIT_METRICS, drift_split, split_from_arrays
from app.metrics.thresholded import ThresholdValues, threshold_metrics

__all__ = [
    "CALIBRATED_METRICS",
    "REGULAR_METRICS",
    "SPLIT_METRICS",
    "CurveValues",
    "Ranking",
    "ThresholdValues",
    "curve_metrics",
    "drift_split",
    "evaluate",
    "rank",
    "split_from_arrays",
    "threshold_metrics",
]
