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

#: What no test on unlabelled scores can see, stated in every label-free estimate
#: (``estimated.cannot_see``): a share f of the positives scoring like the negatives makes the
#: window exactly the reference's mixture at π(1 - f), at any π; a share g of the negatives
#: scoring like the positives, exactly the mixture at π + g(1 - π).
CANNOT_SEE: Final = (
    "positives scoring like negatives (read as fewer positives) and negatives scoring like "
    "positives (read as more positives): only labels tell these apart from a class-ratio change"
)
#: The estimate's verdict when it fell: fewer positives, or positives scoring lower (a model
#: that got worse gives the same scores), never called a settled class-ratio change.
ESTIMATE_FELL: Final = "fewer_positives_or_lower_scores"
#: The estimate's verdict when it rose, the mirror of :data:`ESTIMATE_FELL`: more positives, or
#: negatives scoring like positives (the same scores), never called a settled class-ratio change.
ESTIMATE_ROSE: Final = "more_positives_or_higher_scores"
#: What an estimate whose interval reaches 0 says (``estimated.positive_class_ratio_resolved``
#: false): its spread is of the order of the value, which π̂ ≥ 0 biases upward.
UNRESOLVED: Final = (
    "the estimate's interval reaches 0: too few positives to resolve the ratio, the value is "
    "biased upward and reads as an order of magnitude; the interval is what holds"
)
#: The estimate's verdicts (:func:`calmon.metrics.label_free.estimate_verdict`) in plain words.
VERDICT_WORDS: Final = {
    "class_ratio_moved": (
        "class ratio moved (estimated; scores consistent with a class-ratio change)"
    ),
    "fewer_positives_or_lower_scores": (
        "fewer positives, or positives scoring lower (estimated without labels): labels will tell"
    ),
    "more_positives_or_higher_scores": (
        "more positives, or negatives scoring like positives (estimated without labels): labels "
        "will tell"
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
