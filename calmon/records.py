"""The window record as every reader types it: the stored JSON of a window and segment
(``window_results.record``), as :func:`calmon.services.window_record.segment_record` builds it and
the exporter, the web view, ``calmon windows``, ``calmon simulate``, the offline HTML report
and the notebook read it; and the record of one evaluation set without a reference
(:class:`EvaluationRecord`), as ``calmon evaluate`` and :func:`calmon.evaluate_frame` give it.

These TypedDicts agree with the OpenAPI schema of the record (:mod:`calmon.api.window_schemas`):
the same keys, a key the schema gives a default is ``NotRequired`` (absent for ``score``
models, or from records computed before it existed), and a nullable value is ``X | None``.
``tests/unit/test_records.py`` walks both and fails on any difference, and checks that real
computed records (``tests/data/windows/golden_records.json``) validate against the schema and
hold exactly these keys. A section read by a catalogue name held in a variable (a TypedDict
takes literal keys only) goes through :func:`metric_value`, :func:`metric_interval` and
:func:`split_parts`. Instants are ISO 8601 text and intervals ``[lower, upper]`` lists, as
stored. The record's fields and when each is null: ``docs/scheduler.md`` ("The record").

This module imports nothing of ``calmon``, so every layer may import it. Its annotations are
evaluated when it is imported (no ``from __future__ import annotations``), so that
``__required_keys__`` tells the ``NotRequired`` keys apart at run time.
"""

from collections.abc import Mapping
from typing import Literal, NotRequired, cast

from typing_extensions import TypedDict

#: A 95% interval ``[lower, upper]``, or None where none is published (``docs/intervals.md``).
Interval = list[float] | None


class RegularMetrics(TypedDict):
    """Every catalogue metric at the window's own class ratio; the probability metrics are
    absent for ``score`` models."""

    precision: float | None
    f1: float | None
    recall: float | None
    fpr: float | None
    roc_auc: float | None
    ks: float | None
    ks_abc: float | None
    average_precision: float | None
    best_f1: float | None
    best_f1_threshold: float | None
    pr_gain_auc: float | None
    brier: NotRequired[float | None]
    brier_skill: NotRequired[float | None]
    brier_pos: NotRequired[float | None]
    brier_neg: NotRequired[float | None]
    log_loss: NotRequired[float | None]
    ece: NotRequired[float | None]
    mce: NotRequired[float | None]


class CalibratedMetrics(TypedDict):
    """The prior-dependent metrics calibrated at one reference prior π0."""

    precision: float | None
    f1: float | None
    average_precision: float | None
    best_f1: float | None
    best_f1_threshold: float | None
    pr_gain_auc: float | None


#: Calibrated metrics keyed ``reference`` (None without a usable reference prior) and by the
#: decimal text of each configured π0 (``"0.01"``).
CalibratedByPrior = dict[str, CalibratedMetrics | None]


class RegularIntervals(TypedDict):
    """Intervals of the regular metrics; the probability ones absent for ``score`` models."""

    precision: Interval
    recall: Interval
    fpr: Interval
    f1: Interval
    roc_auc: Interval
    average_precision: Interval
    best_f1: Interval
    pr_gain_auc: Interval
    ks: Interval
    ks_abc: Interval
    brier: NotRequired[Interval]
    brier_pos: NotRequired[Interval]
    brier_neg: NotRequired[Interval]
    log_loss: NotRequired[Interval]
    brier_skill: NotRequired[Interval]


class CalibratedIntervals(TypedDict):
    """Intervals of the calibrated metrics at one prior."""

    precision: Interval
    f1: Interval
    average_precision: Interval
    best_f1: Interval
    pr_gain_auc: Interval


#: Intervals of the calibrated metrics, keyed like :data:`CalibratedByPrior`.
CalibratedIntervalsByPrior = dict[str, CalibratedIntervals | None]


class WindowIntervals(TypedDict):
    """The intervals of every published metric."""

    regular: RegularIntervals
    calibrated: CalibratedIntervalsByPrior


class SplitParts(TypedDict):
    """One metric's change from the reference, split into its prior and likelihood parts."""

    total: float | None
    prior: float | None
    likelihood: float | None
    prior_interval: Interval
    likelihood_interval: Interval


class Split(TypedDict):
    """The change split of each prior-dependent metric."""

    precision: SplitParts
    f1: SplitParts
    average_precision: SplitParts
    best_f1: SplitParts
    pr_gain_auc: SplitParts


class ReferencePeriod(TypedDict):
    """Which reference set: how it is chosen, the period it covers and, for a trailing one,
    how many windows it pools (what a verdict names as compared against)."""

    kind: Literal["trailing", "fixed"]
    start: str
    end: str
    windows: int | None


class ReferenceSummary(ReferencePeriod):
    """The reference set the window is compared with."""

    n: int
    n_pos: int
    prior: float | None
    regular: RegularMetrics


class EstimatedRegular(TypedDict):
    """Label-free estimates of regular metrics at the estimated class ratio."""

    precision: float | None
    recall: float | None
    f1: float | None
    roc_auc: float | None
    average_precision: float | None


class EstimatedCalibrated(TypedDict):
    """Label-free estimates of calibrated metrics at one configured π0."""

    precision: float | None
    f1: float | None
    average_precision: float | None


class LabelShiftCheck(TypedDict):
    """The label-shift check of the window's label-free estimate."""

    p_value: float | None
    holds: bool | None
    method: Literal["cvm_pearson_mixture_bootstrap", "cvm_mixture_bootstrap"]


EstimateVerdict = Literal[
    "class_ratio_moved",
    "fewer_positives_or_lower_scores",
    "scores_changed",
    "no_change",
    "not_enough_data",
]


class Estimated(TypedDict):
    """The label-free estimate of the window; ``label_shift``, ``verdict`` and ``cannot_see``
    are absent from records computed before they existed."""

    positive_class_ratio: float
    positive_class_ratio_interval: list[float]
    method: Literal["saerens_em_isotonic"]
    n: int
    regular: EstimatedRegular
    calibrated: dict[str, EstimatedCalibrated]
    label_shift: NotRequired[LabelShiftCheck | None]
    verdict: NotRequired[EstimateVerdict | None]
    cannot_see: NotRequired[str | None]


class Costs(TypedDict):
    """The cost of one false positive and of one false negative."""

    false_positive: float
    false_negative: float


class Objective(TypedDict):
    """A model's objective as stored: exactly one of its keys."""

    target_precision: NotRequired[float | None]
    costs: NotRequired[Costs | None]
    alert_rate: NotRequired[float | None]


class AdviceExpected(TypedDict):
    """What the advised threshold is expected to give at the window's class ratio."""

    precision: float | None
    recall: float | None
    alert_rate: float | None
    cost: float | None


class AdviceIntervals(TypedDict):
    """95% intervals of the expected values over the reference's sampling (``docs/acting.md``);
    ``cost`` only with a cost objective."""

    precision: Interval
    recall: Interval
    alert_rate: Interval
    cost: Interval


class AdviceAssumption(TypedDict):
    """Whether the label-shift assumption of the advice was checked and held."""

    holds: bool | None
    p_value: float | None
    method: str | None


class Advice(TypedDict):
    """The advised threshold for the model's objective at the window's class ratio."""

    objective: Objective
    configured_threshold: float
    prior: float | None
    prior_source: Literal["measured", "estimated"] | None
    threshold: float | None
    expected: AdviceExpected | None
    expected_intervals: AdviceIntervals | None
    assumption: AdviceAssumption | None
    reason: str | None


class ReliabilityBin(TypedDict):
    """One bin of the reliability diagram."""

    lower: float
    upper: float
    count: int
    mean_score: float | None
    fraction_positive: float | None


class SegmentsOverflow(TypedDict):
    """Segments beyond the model's ``max_segments`` in the window."""

    segments: int
    predictions: int


class PositivesShift(TypedDict):
    """Whether the pooled positives score lower than the reference's positives."""

    method: Literal["mann_whitney", "mann_whitney_and_placement", "location_and_placement"]
    z: float
    p_value: float
    mann_whitney_z: NotRequired[float | None]
    placement_z: NotRequired[float | None]
    location_z: NotRequired[float | None]


DecisionVerdict = Literal[
    "model_got_worse",
    "class_ratio_moved",
    "both",
    "stable",
    "not_enough_data",
    "model_may_be_worse",
    "class_ratio_moved_model_may_be_worse",
]


class Decision(TypedDict):
    """The pooled decision of the window and the reference its verdict is compared with (a
    trailing reference's pooled decision reads the windows before the oldest pooled one);
    ``positives_shift`` and ``reference`` are absent from records computed before they
    existed."""

    windows: int
    start: str
    n: int
    n_pos: int
    verdict: DecisionVerdict
    metric: Literal["precision", "f1", "average_precision"]
    prior_part: float | None
    prior_interval: Interval
    likelihood_part: float | None
    likelihood_interval: Interval
    positive_class_ratio: float | None
    positive_class_ratio_interval: list[float] | None
    reference_positive_class_ratio_interval: list[float] | None
    positives_shift: NotRequired[PositivesShift | None]
    reference: NotRequired[ReferencePeriod | None]


class WindowRecord(TypedDict):
    """The stored record of one window and segment. ``reliability`` is absent for ``score``
    models; ``advice`` and ``decision`` are absent from records computed before they
    existed."""

    start: str
    end: str
    segment: str
    computed_at: str
    n: int
    n_pos: int
    unlabelled: int
    prior: float | None
    prior_interval: list[float] | None
    regular: RegularMetrics
    calibrated: CalibratedByPrior
    intervals: WindowIntervals
    split: Split | None
    reference: ReferenceSummary | None
    estimated: Estimated | None
    reliability: NotRequired[list[ReliabilityBin] | None]
    advice: NotRequired[Advice | None]
    segments_overflow: SegmentsOverflow | None
    decision: NotRequired[Decision | None]


class EvaluationIntervals(TypedDict):
    """The intervals of an evaluation set: as :class:`WindowIntervals`, except that a
    configured π0 always has its calibrated intervals (there is no ``reference`` prior)."""

    regular: RegularIntervals
    calibrated: dict[str, CalibratedIntervals]


class EvaluationRecord(TypedDict):
    """One evaluation set's record, without a reference: a record of ``calmon evaluate
    --format json`` (one per window and segment of a file) and what :func:`calmon.evaluate_frame`
    returns (all the rows of a frame: ``start`` and ``end`` None, ``segment`` ``*``).

    ``n``, ``n_pos``, ``n_neg`` and ``prior`` count the labelled rows; ``unlabelled`` the rows
    whose label is not known yet. ``calibrated`` is keyed by the decimal text of each π0.
    ``reliability`` is absent for ``score`` models and ``intervals`` unless asked for."""

    start: str | None
    end: str | None
    segment: str
    unlabelled: int
    n: int
    n_pos: int
    n_neg: int
    prior: float | None
    regular: RegularMetrics
    calibrated: dict[str, CalibratedMetrics]
    reliability: NotRequired[list[ReliabilityBin]]
    intervals: NotRequired[EvaluationIntervals]


def metric_value(
    section: RegularMetrics | CalibratedMetrics | EstimatedRegular | EstimatedCalibrated,
    name: str,
) -> float | None:
    """The value of the metric ``name`` (a catalogue name) in ``section``; None where the
    section has no such key (a probability metric of a ``score`` model, a metric the section
    does not hold)."""
    values = cast(Mapping[str, float | None], section)
    return values.get(name)


def metric_interval(section: RegularIntervals | CalibratedIntervals, name: str) -> Interval:
    """The interval of the metric ``name`` in ``section``; None where none is published or
    the section has no such key."""
    intervals = cast(Mapping[str, Interval], section)
    return intervals.get(name)


def split_parts(split: Split, name: str) -> SplitParts | None:
    """The change split of the metric ``name``; None for a metric that is not split (not one
    of ``Split``'s keys)."""
    parts = cast(Mapping[str, SplitParts], split)
    return parts.get(name)
