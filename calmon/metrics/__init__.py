"""The metric engine: NumPy arrays in, the numbers of ``docs/reference/metrics.md`` out (no I/O).

- :func:`evaluate`: every metric of one evaluation set as a JSON-able dict.
- :func:`calmon.metrics.window_evaluation.evaluate_window`: everything a window's record is built
  from, against its reference (the service's entry point, once per segment).
- :func:`drift_split`, :func:`split_from_arrays`: prior / likelihood / total change (the
  mean of both calibration orders), with the intervals of both parts
  (:func:`calmon.metrics.split.split_intervals`).
- :func:`curve_metrics`, :func:`threshold_metrics`: the batched cores (any leading shape),
  shared by point estimates and the bootstrap.
- :func:`rank`, :class:`Ranking`: the one sort every curve metric comes from; :class:`Pool`:
  a pooled set built from sorted parts.

The service imports the engine through this package (the names below: what it needs to build
and cache reference sets and to check a configuration) and through its entry modules
(``window_evaluation``, its pooled decision included; ``advice``; ``recalibration``) only.
"""

from calmon.catalogue import CALIBRATED_METRICS, REGULAR_METRICS, SPLIT_METRICS
from calmon.metrics.curves import CurveValues, curve_metrics
from calmon.metrics.evaluation import SetSums, evaluate, evaluate_ranked, set_sums
from calmon.metrics.label_free import LabelShiftReference, label_shift_reference
from calmon.metrics.pool import Pool
from calmon.metrics.prepared import MIN_PI0, PreparedSet, check_pi0
from calmon.metrics.ranking import Ranking, RankingAccumulator, rank
from calmon.metrics.split import drift_split, split_from_arrays
from calmon.metrics.thresholded import ThresholdValues, threshold_metrics

__all__ = [
    "CALIBRATED_METRICS",
    "MIN_PI0",
    "REGULAR_METRICS",
    "SPLIT_METRICS",
    "CurveValues",
    "LabelShiftReference",
    "Pool",
    "PreparedSet",
    "Ranking",
    "RankingAccumulator",
    "SetSums",
    "ThresholdValues",
    "check_pi0",
    "curve_metrics",
    "drift_split",
    "evaluate",
    "evaluate_ranked",
    "label_shift_reference",
    "rank",
    "set_sums",
    "split_from_arrays",
    "threshold_metrics",
]
