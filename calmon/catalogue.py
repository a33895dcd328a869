"""The metric catalogue: one descriptor per metric (``docs/reference/metrics.md``), in report
order, that the engine's names, the record's schema, the exporter's HELP lines and the web view's
charts all read; and what the label-free estimate cannot see.

Adding a metric is one row of :data:`METRICS` and one formula in :mod:`calmon.metrics`.
Names and words only, no NumPy: the command line reads them without loading the metric engine.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Final, Literal

#: How a metric's 95% interval is computed (``docs/reference/intervals.md``): Wilson/MOVER from the
#: confusion counts, on the logit scale with the bootstrap's replicates (ROC AUC's spread is
#: DeLong's, the replicates deciding at a bound), Student's t of a mean, or none published.
IntervalMethod = Literal["counts", "bootstrap", "mean", "none"]
#: The engine's module that computes a metric's value: the confusion counts at the threshold,
#: the ranked curves, the set's sums (``evaluation``), or the scores read as probabilities.
Formula = Literal["thresholded", "curves", "evaluation", "probability"]


@dataclass(frozen=True, slots=True)
class MetricDescriptor:
    """Everything the service says about one metric, apart from its formula.

    Attributes:
        name: the catalogue name: record key, series ``calmon_<name>``, chart choice.
        short: what legends and headings call it.
        title: a chart's axis title, with the metric's scale.
        about: what it is, in one line: the record schema's description and the series' HELP.
        probability_only: only for ``probability`` models (a score in [0, 1]).
        calibrated: has a π0-calibrated version (it depends on the class ratio).
        split: its change from the reference is split into a prior and a likelihood part
            (prior-dependent, ``docs/reference/metrics.md``).
        formula: the module of :mod:`calmon.metrics` that computes its value.
        interval: how its 95% interval is computed.
        interval_position: where its key stands in a record's regular intervals (the order
            records have always stored them in, which their bytes keep); None: records hold
            no interval key for it.
        decides: the metric whose change the pooled decision splits, which the verdicts,
            the alerts and ``calmon windows`` read by default (one metric).
        chart: the web view's second chart by default (one metric).

    """

    name: str
    short: str
    title: str
    about: str
    _: KW_ONLY
    formula: Formula
    probability_only: bool = False
    calibrated: bool = False
    split: bool = False
    interval: IntervalMethod = "none"
    interval_position: int | None = None
    decides: bool = False
    chart: bool = False


#: Every metric of a window record's ``regular`` section, in report order.
METRICS: Final = (
    MetricDescriptor(
        "precision",
        "precision",
        "precision at threshold (0 to 1)",
        "precision TP/(TP+FP) at the model's threshold",
        calibrated=True,
        interval="counts",
        split=True,
        formula="thresholded",
        interval_position=0,
    ),
    MetricDescriptor(
        "f1",
        "F1",
        "F1 at threshold (0 to 1)",
        "F1 score 2PR/(P+R) at the threshold",
        calibrated=True,
        interval="counts",
        split=True,
        formula="thresholded",
        interval_position=3,
    ),
    MetricDescriptor(
        "recall",
        "recall",
        "recall at threshold (0 to 1)",
        "recall TP/n_pos at the threshold (prior-invariant)",
        interval="counts",
        formula="thresholded",
        interval_position=1,
    ),
    MetricDescriptor(
        "fpr",
        "false positive rate",
        "false positive rate (0 to 1)",
        "false positive rate FP/n_neg at the threshold (prior-invariant)",
        interval="counts",
        formula="thresholded",
        interval_position=2,
    ),
    MetricDescriptor(
        "roc_auc",
        "ROC AUC",
        "ROC AUC (0.5 random, 1 best)",
        "area under the ROC curve, ties count 1/2",
        interval="bootstrap",
        formula="curves",
        interval_position=4,
        chart=True,
    ),
    MetricDescriptor(
        "ks",
        "KS",
        "KS statistic (0 to 1)",
        "Kolmogorov-Smirnov statistic: max of TPR - FPR over the thresholds",
        formula="curves",
        interval_position=8,
    ),
    MetricDescriptor(
        "ks_abc",
        "KS area",
        "KS area (-1 to 1, 0 no separation)",
        "area between the class-conditional score CDFs: the mean score of the positives minus "
        "that of the negatives",
        interval="mean",
        formula="evaluation",
        interval_position=9,
    ),
    MetricDescriptor(
        "average_precision",
        "AP",
        "average precision (0 to 1)",
        "average precision (scikit-learn's step rule)",
        calibrated=True,
        interval="bootstrap",
        split=True,
        formula="curves",
        interval_position=5,
        decides=True,
    ),
    MetricDescriptor(
        "best_f1",
        "best F1",
        "best F1 (0 to 1)",
        "highest F1 over every threshold",
        calibrated=True,
        split=True,
        formula="curves",
        interval_position=6,
    ),
    MetricDescriptor(
        "best_f1_threshold",
        "best F1 threshold",
        "best F1 threshold (score)",
        "highest threshold reaching the best F1",
        calibrated=True,
        formula="curves",
    ),
    MetricDescriptor(
        "pr_gain_auc",
        "PR-Gain AUC",
        "PR-Gain AUC (1 best)",
        "area under the precision-recall-gain curve",
        calibrated=True,
        split=True,
        formula="curves",
        interval_position=7,
    ),
    MetricDescriptor(
        "brier",
        "Brier score",
        "Brier score (0 best)",
        "Brier score: mean squared error of the score",
        probability_only=True,
        interval="mean",
        formula="probability",
        interval_position=10,
    ),
    MetricDescriptor(
        "brier_skill",
        "Brier skill",
        "Brier skill (1 best)",
        "Brier skill score 1 - brier / (prior (1 - prior)), against predicting the prior",
        probability_only=True,
        interval="mean",
        formula="probability",
        interval_position=14,
    ),
    MetricDescriptor(
        "brier_pos",
        "Brier (positives)",
        "Brier, positives (0 best)",
        "Brier score over the positives: mean (score - 1)^2",
        probability_only=True,
        interval="mean",
        formula="probability",
        interval_position=11,
    ),
    MetricDescriptor(
        "brier_neg",
        "Brier (negatives)",
        "Brier, negatives (0 best)",
        "Brier score over the negatives: mean score^2",
        probability_only=True,
        interval="mean",
        formula="probability",
        interval_position=12,
    ),
    MetricDescriptor(
        "log_loss",
        "log loss",
        "log loss (nats, 0 best)",
        "log loss in nats, scores clipped to [1e-15, 1 - 1e-15]",
        probability_only=True,
        interval="mean",
        formula="probability",
        interval_position=13,
    ),
    MetricDescriptor(
        "ece",
        "ECE",
        "calibration error, ECE (0 best)",
        "expected calibration error over 10 equal-width bins",
        probability_only=True,
        formula="probability",
    ),
    MetricDescriptor(
        "mce",
        "MCE",
        "calibration error, MCE (0 best)",
        "maximum calibration error over the non-empty ones of 10 equal-width bins",
        probability_only=True,
        formula="probability",
    ),
)
#: The descriptor of each metric by name.
BY_NAME: Final = {metric.name: metric for metric in METRICS}
#: Regular metrics in report order; the probability-only ones last.
REGULAR_METRICS: Final = tuple(metric.name for metric in METRICS)
#: Metrics with a π0-calibrated version, in report order.
CALIBRATED_METRICS: Final = tuple(metric.name for metric in METRICS if metric.calibrated)
#: Prior-dependent metrics whose change is split into a prior and a likelihood part.
SPLIT_METRICS: Final = tuple(metric.name for metric in METRICS if metric.split)
#: Metrics estimated without labels (``estimated.regular``), in the record's order.
ESTIMATED_REGULAR: Final = ("precision", "recall", "f1", "roc_auc", "average_precision")
#: Their calibrated versions at each π0 (``estimated.calibrated``).
ESTIMATED_CALIBRATED: Final = tuple(name for name in ESTIMATED_REGULAR if BY_NAME[name].calibrated)
#: Metrics of probability models only (a score in [0, 1]).
PROBABILITY_METRICS: Final = tuple(metric.name for metric in METRICS if metric.probability_only)


def _interval_position(metric: MetricDescriptor) -> int:
    """Its interval key's position (:attr:`MetricDescriptor.interval_position`), -1 if none."""
    return -1 if metric.interval_position is None else metric.interval_position


#: Metrics with a key in a record's regular intervals, in the order records store them.
INTERVAL_KEYS: Final = tuple(
    metric.name
    for metric in sorted(METRICS, key=_interval_position)
    if metric.interval_position is not None
)
#: The metric whose change the pooled decision splits (``docs/reference/metrics.md``,
#: "Decisions at few positives"), which the verdicts and ``calmon windows`` read by default.
DECISION_METRIC: Final = next(metric.name for metric in METRICS if metric.decides)
#: The web view's second chart by default.
CHART_METRIC: Final = next(metric.name for metric in METRICS if metric.chart)

#: What no test on unlabelled scores can see, stated in every label-free estimate
#: (``estimated.cannot_see``): a share f of the positives scoring like the negatives makes the
#: window exactly the reference's mixture at π(1 - f), at any π; a share g of the negatives
#: scoring like the positives, exactly the mixture at π + g(1 - π).
CANNOT_SEE: Final = (
    "positives scoring like negatives (read as fewer positives) and negatives scoring like "
    "positives (read as more positives): only labels tell these apart from a class-ratio change"
)
#: What an estimate whose interval reaches 0 says (``estimated.positive_class_ratio_resolved``
#: false): its spread is of the order of the value, which π̂ ≥ 0 biases upward.
UNRESOLVED: Final = (
    "the estimate's interval reaches 0: too few positives to resolve the ratio, the value is "
    "biased upward and reads as an order of magnitude; the interval is what holds"
)
