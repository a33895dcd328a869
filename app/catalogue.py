"""The names of the metrics a window record holds, in report order (``docs/metrics.md``).

Names only, no NumPy: the command line reads them without loading the metric engine.
"""

from __future__ import annotations

from typing import Final

#: Regular metrics in report order; the last seven exist only for probability models.
REGULAR_METRICS: Final = (
    "precision",
    "f1",
    "recall",
    "fpr",
    "roc_auc",
    "ks",
    "ks_abc",
    "average_precision",
    "best_f1",
    "best_f1_threshold",
    "pr_gain_auc",
    "brier",
    "brier_skill",
    "brier_pos",
    "brier_neg",
    "log_loss",
    "ece",
    "mce",
)
#: Metrics with a π0-calibrated version, in report order.
CALIBRATED_METRICS: Final = (
    "precision",
    "f1",
    "average_precision",
    "best_f1",
    "best_f1_threshold",
    "pr_gain_auc",
)
