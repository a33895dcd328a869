"""The names of the metrics a window record holds, in report order (``docs/metrics.md``), and
the words of the label-free estimate's verdicts.

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

#: The estimate's verdicts (:func:`app.metrics.label_free.estimate_verdict`) in plain words.
VERDICT_WORDS: Final = {
    "class_ratio_moved": (
        "class ratio moved (estimated; scores consistent with a class-ratio change)"
    ),
    "scores_changed": (
        "scores changed in a way a class-ratio change does not explain: labels needed"
    ),
    "no_change": "no change (estimated without labels)",
    "not_enough_data": "not enough data",
}


def labels_decide(labelled: int, unlabelled: int) -> bool:
    """Whether a window's own labels, rather than its label-free estimate, tell its class
    ratio: once at least half its predictions are labelled. Before that, the labels that did
    land may be a biased sample (positives are often confirmed first)."""
    return labelled > 0 and labelled >= unlabelled
