"""The OpenAPI schema of a window record (``GET /v1/models/{model}/windows``).

Records are built when a window is computed (:mod:`calmon.services.window_record`), stored as JSON
and served as stored, without passing through these models: they describe that shape for the
OpenAPI document. The code types a record with the TypedDicts of :mod:`calmon.records`, which agree
with these models key for key (the same keys, a key with a default here is ``NotRequired``
there, the same nullability): ``tests/unit/test_records.py`` walks both and proves it, and
validates real computed records against these models. Every object is closed
(``additionalProperties: false``) except the maps keyed by a configured π0 (``"0.01"``), whose
values have one schema.

A metric is ``null`` where it is undefined (one class only, no prediction at the threshold,
…); an interval is ``[lower, upper]`` at 95%, or ``null`` where none is published
(``docs/intervals.md``). Metrics marked *probability models* are absent for ``score`` models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from calmon.services.model_registry import Objective

Metric = Annotated[float | None, Field(description="the value, null where undefined")]
Interval = Annotated[
    tuple[float, float] | None,
    Field(description="95% interval `[lower, upper]`, null where none is published"),
]
_PROBABILITY = " (probability models only)"


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegularMetrics(_Closed):
    """Every catalogue metric of the window's labelled predictions, at their own class ratio
    (`docs/metrics.md`)."""

    precision: Metric = Field(description="TP/(TP+FP) at the model's threshold")
    f1: Metric = Field(description="2PR/(P+R) at the threshold")
    recall: Metric = Field(description="TP/n_pos at the threshold (prior-invariant)")
    fpr: Metric = Field(description="FP/n_neg at the threshold (prior-invariant)")
    roc_auc: Metric = Field(description="area under the ROC curve, ties count 1/2")
    ks: Metric = Field(description="Kolmogorov-Smirnov statistic: max of TPR - FPR")
    ks_abc: Metric = Field(description="mean score of positives minus that of negatives")
    average_precision: Metric = Field(description="average precision (scikit-learn's step rule)")
    best_f1: Metric = Field(description="highest F1 over every threshold")
    best_f1_threshold: Metric = Field(description="highest threshold reaching `best_f1`")
    pr_gain_auc: Metric = Field(description="area under the precision-recall-gain curve")
    brier: Metric = Field(
        default=None, description="mean squared error of the score" + _PROBABILITY
    )
    brier_skill: Metric = Field(
        default=None, description="1 - brier / (prior (1 - prior))" + _PROBABILITY
    )
    brier_pos: Metric = Field(
        default=None, description="mean (score - 1)^2 over positives" + _PROBABILITY
    )
    brier_neg: Metric = Field(
        default=None, description="mean score^2 over negatives" + _PROBABILITY
    )
    log_loss: Metric = Field(
        default=None,
        description="mean log loss, scores clipped to [1e-15, 1 - 1e-15]" + _PROBABILITY,
    )
    ece: Metric = Field(
        default=None,
        description="expected calibration error over 10 equal-width bins" + _PROBABILITY,
    )
    mce: Metric = Field(
        default=None, description="maximum calibration error over the non-empty bins" + _PROBABILITY
    )


class CalibratedMetrics(_Closed):
    """The prior-dependent metrics calibrated at a reference prior π0: their value had the
    window's positives made up a π0 share of it (`docs/metrics.md`, π0 calibration)."""

    precision: Metric = Field(description="calibrated precision at the threshold")
    f1: Metric = Field(description="F1 of the calibrated precision and the recall")
    average_precision: Metric = Field(description="calibrated average precision (AUC-PcR)")
    best_f1: Metric = Field(description="highest calibrated F1 over every threshold")
    best_f1_threshold: Metric = Field(
        description="highest threshold reaching the calibrated `best_f1`"
    )
    pr_gain_auc: Metric = Field(description="area under the PR-gain curve with recall gain at π0")


class CalibratedByPrior(BaseModel):
    """Calibrated metrics at the reference's prior (`reference`), and at each configured
    π0 under its decimal text (`"0.01"`)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, CalibratedMetrics] = Field(init=False)

    reference: CalibratedMetrics | None = Field(
        description="at the reference's positive class ratio; null until the model has a "
        "reference with labelled predictions of both classes"
    )


class RegularIntervals(_Closed):
    """95% intervals of the regular metrics (`docs/intervals.md`); null where none is
    published (always for `best_f1`, `pr_gain_auc` and `ks`)."""

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
    brier: Interval = Field(default=None, description="95% interval" + _PROBABILITY)
    brier_pos: Interval = Field(default=None, description="95% interval" + _PROBABILITY)
    brier_neg: Interval = Field(default=None, description="95% interval" + _PROBABILITY)
    log_loss: Interval = Field(default=None, description="95% interval" + _PROBABILITY)
    brier_skill: Interval = Field(default=None, description="95% interval" + _PROBABILITY)


class CalibratedIntervals(_Closed):
    """95% intervals of the calibrated metrics at one prior (none for `best_f1` and
    `pr_gain_auc`, nor for average precision at small priors)."""

    precision: Interval
    f1: Interval
    average_precision: Interval
    best_f1: Interval
    pr_gain_auc: Interval


class CalibratedIntervalsByPrior(BaseModel):
    """Intervals of the calibrated metrics, keyed like `calibrated`."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, CalibratedIntervals] = Field(init=False)

    reference: CalibratedIntervals | None = Field(
        description="at the reference's positive class ratio; null when `calibrated.reference` is"
    )


class WindowIntervals(_Closed):
    """The 95% intervals of every published metric."""

    regular: RegularIntervals = Field(description="intervals of the regular metrics")
    calibrated: CalibratedIntervalsByPrior = Field(
        description="intervals of the calibrated metrics, keyed like `calibrated`"
    )


class SplitParts(_Closed):
    """A change of one prior-dependent metric from the reference to the window, split into the
    part due to the class ratio and the part due to the model (`docs/metrics.md`, the
    order-symmetric split: total = prior + likelihood)."""

    total: Metric = Field(description="the window's value minus the reference's")
    prior: Metric = Field(description="the part due to the class ratio moving (the prior shift)")
    likelihood: Metric = Field(
        description="the part due to P(score | class) moving: the model got better (> 0) "
        "or worse (< 0)"
    )
    prior_interval: Interval
    likelihood_interval: Interval


class Split(_Closed):
    """The change split of each prior-dependent metric (intervals for precision, F1 and, with
    at least 100 positives in the window and in the reference, average precision)."""

    precision: SplitParts = Field(description="change of the precision at the threshold")
    f1: SplitParts = Field(description="change of the F1 at the threshold")
    average_precision: SplitParts = Field(description="change of the average precision")
    best_f1: SplitParts = Field(description="change of the best F1 (parts without intervals)")
    pr_gain_auc: SplitParts = Field(description="change of AUPRG (parts without intervals)")


class ReferencePeriod(_Closed):
    """Which reference set (`docs/references.md`): how it is chosen, the period it covers and,
    for a trailing one, how many windows it pools."""

    kind: Literal["trailing", "fixed"] = Field(description="how the reference is chosen")
    start: datetime = Field(description="first instant of the reference period (UTC)")
    end: datetime = Field(description="end of the reference period, excluded (UTC)")
    windows: int | None = Field(description="trailing windows pooled; null for a fixed one")


class ReferenceSummary(ReferencePeriod):
    """The reference set the window is compared with."""

    n: int = Field(description="labelled predictions of the reference")
    n_pos: int = Field(description="positives of the reference")
    prior: float | None = Field(description="positive class ratio of the reference")
    regular: RegularMetrics = Field(description="the regular metrics of the reference")


class EstimatedRegular(_Closed):
    """Label-free estimates of the regular metrics at the estimated class ratio."""

    precision: Metric = Field(description="estimated precision at the threshold")
    recall: Metric = Field(description="estimated recall at the threshold")
    f1: Metric = Field(description="estimated F1 at the threshold")
    roc_auc: Metric = Field(description="estimated ROC AUC")
    average_precision: Metric = Field(description="estimated average precision")


class EstimatedCalibrated(_Closed):
    """Label-free estimates of calibrated metrics at one configured π0."""

    precision: Metric = Field(description="estimated calibrated precision")
    f1: Metric = Field(description="estimated calibrated F1")
    average_precision: Metric = Field(description="estimated calibrated average precision")


class LabelShiftCheck(_Closed):
    """The label-shift check of the window (`docs/metrics.md`, The label-shift check): does
    the window's score distribution fit the reference's class mixture at some ratio?"""

    p_value: float | None = Field(
        description="p-value of the check; null under 200 scored predictions"
    )
    holds: bool | None = Field(
        description="the check does not reject at level 0.01 (the estimate's assumption "
        "holds as far as scores can tell); null where the p-value is"
    )
    method: Literal["cvm_pearson_mixture_bootstrap", "cvm_mixture_bootstrap"] = Field(
        description="how it was tested (cvm_mixture_bootstrap: records computed before the "
        "check gained its upper-tail statistic)"
    )


class Estimated(_Closed):
    """The label-free estimate of the window (`docs/metrics.md`, Label-free estimates): from
    every scored prediction, labelled or not, assuming P(score | class) is the reference's."""

    positive_class_ratio: float = Field(description="estimated positive class ratio")
    positive_class_ratio_interval: tuple[float, float] = Field(
        description="its 95% interval `[lower, upper]`"
    )
    method: Literal["saerens_em_isotonic"] = Field(description="how it was estimated")
    n: int = Field(description="scored predictions it used")
    regular: EstimatedRegular = Field(description="metrics at the estimated class ratio")
    calibrated: dict[str, EstimatedCalibrated] = Field(
        description='at each configured π0, keyed by its decimal text (`"0.01"`)'
    )
    label_shift: LabelShiftCheck | None = Field(
        default=None,
        description="the check of the estimate's assumption; absent in windows computed "
        "before it existed",
    )
    verdict: (
        Literal[
            "class_ratio_moved",
            "fewer_positives_or_lower_scores",
            "scores_changed",
            "no_change",
            "not_enough_data",
        ]
        | None
    ) = Field(
        default=None,
        description="what the estimate says, with the check holding: the class ratio went up "
        "beyond the reference's times 1.5 (`class_ratio_moved`), or the estimate fell below the "
        "reference's divided by 1.5 (`fewer_positives_or_lower_scores`: fewer positives, or "
        "positives scoring lower, e.g. a model that got worse; labels will tell); the check "
        "rejecting: the scores changed in a way a class-ratio change does not explain "
        "(`scores_changed`, labels needed); `no_change`; or `not_enough_data` (under 200 "
        "scored predictions). Windows computed before the fall had its own word say "
        "`class_ratio_moved` for it",
    )
    cannot_see: str | None = Field(
        default=None,
        description="what no test on unlabelled scores can see: a share of one class scoring "
        "like the other reads as a class-ratio change (positives scoring like negatives as "
        "fewer positives); absent in windows computed before it existed",
    )


class AdviceExpected(_Closed):
    """What the advised threshold is expected to give at the window's class ratio, if
    P(score | class) is the reference's."""

    precision: float | None = Field(description="expected precision")
    recall: float | None = Field(description="expected recall")
    alert_rate: float | None = Field(description="expected fraction of predictions flagged")
    cost: float | None = Field(
        description="expected cost per prediction; null unless the objective is `costs`"
    )


class AdviceIntervals(_Closed):
    """95% intervals of the expected values, [lower, upper], over the reference's sampling
    (each class's rates bounded by Wilson): not the next window's own noise nor the class
    ratio's error (`docs/acting.md`)."""

    precision: Interval = Field(description="expected precision's interval")
    recall: Interval = Field(description="expected recall's interval")
    alert_rate: Interval = Field(description="expected alert rate's interval")
    cost: Interval = Field(
        description="expected cost's interval; null unless the objective is `costs`"
    )


class AdviceAssumption(_Closed):
    """Whether label shift (the window's P(score | class) is the reference's) was checked and
    held: from the window's labels (`ks_by_class`), or the label-free check of `estimated`."""

    holds: bool | None = Field(description="false: the advice rests on a broken assumption")
    p_value: float | None = Field(description="p-value of the check")
    method: str | None = Field(description="how it was checked")


class Advice(_Closed):
    """The advised threshold for the model's objective at the window's class ratio
    (`docs/acting.md`); `threshold` is null with a `reason` when there is none."""

    objective: Objective = Field(description="the model's objective when computed")
    configured_threshold: float = Field(description="the model's configured threshold")
    prior: float | None = Field(description="the class ratio the advice is computed at")
    prior_source: Literal["measured", "estimated"] | None = Field(
        description="`measured` from the window's labels, `estimated` without them"
    )
    threshold: float | None = Field(description="the advised threshold (predict s >= it)")
    expected: AdviceExpected | None = Field(description="what it is expected to give")
    expected_intervals: AdviceIntervals | None = Field(
        description="95% intervals of `expected` over the reference's sampling; null with "
        "`expected`"
    )
    assumption: AdviceAssumption | None = Field(description="the label-shift check")
    reason: str | None = Field(description="why there is no advice, else null")


class ReliabilityBin(_Closed):
    """One bin of the reliability diagram (10 equal-width bins on [0, 1], right-closed)."""

    lower: float = Field(description="lower edge of the bin")
    upper: float = Field(description="upper edge of the bin")
    count: int = Field(description="labelled predictions in the bin")
    mean_score: float | None = Field(description="mean score in the bin, null when empty")
    fraction_positive: float | None = Field(
        description="share of positives in the bin, null when empty"
    )


class SegmentsOverflow(_Closed):
    """Segments beyond the model's `max_segments` in this window (counted only in `*`)."""

    segments: int = Field(description="distinct untracked segments")
    predictions: int = Field(description="predictions in them")


class PositivesShift(_Closed):
    """Whether the pooled positives score lower than the reference's positives: the test the
    page `CalmonDecisionMetricDrop` reads (`docs/metrics.md`, "Decisions at few positives")."""

    method: Literal["mann_whitney", "mann_whitney_and_placement", "location_and_placement"] = Field(
        description="`location_and_placement`: the one-sided test of the two sets' positives' "
        "location scores (a shift of their logits) and the test of their placements among "
        "the pooled negatives, the smaller p-value doubled; windows computed before: "
        "`mann_whitney_and_placement` (the Mann-Whitney test in the location test's place) "
        "or `mann_whitney` (the Mann-Whitney test alone)"
    )
    z: float = Field(
        description="the larger of the two tests' z (the Mann-Whitney z alone in `mann_whitney`), "
        "above 0 when the pooled positives score lower"
    )
    p_value: float = Field(description="its one-sided p-value")
    mann_whitney_z: float | None = Field(
        default=None,
        description="z of the Mann-Whitney test (ties corrected); absent before it was stored",
    )
    placement_z: float | None = Field(
        default=None,
        description="skewness-corrected z of the placement test; null without pooled negatives, "
        "absent before it was stored",
    )
    location_z: float | None = Field(
        default=None,
        description="skewness-corrected z of the location test; null when the positives' logits "
        "do not vary, absent before it was stored",
    )


class Decision(_Closed):
    """The pooled decision of the window (`docs/metrics.md`, "Decisions at few positives"): the
    window and the trailing windows before it, pooled back until they hold the model's
    `decision.min_positives` positives (within `decision.max_span`), split against the
    reference like a window. The one verdict the web view, `calmon windows`, `calmon simulate`
    and the alerts read."""

    windows: int = Field(description="windows pooled, this one included")
    start: datetime = Field(description="start of the oldest pooled window (UTC)")
    n: int = Field(description="labelled predictions pooled")
    n_pos: int = Field(description="positives pooled")
    verdict: Literal[
        "model_got_worse",
        "class_ratio_moved",
        "both",
        "stable",
        "not_enough_data",
        "model_may_be_worse",
        "class_ratio_moved_model_may_be_worse",
    ] = Field(
        description="`class_ratio_moved` when the pooled and the reference class ratios' 95% "
        "Wilson intervals are disjoint; `model_got_worse` when the page's rule holds (the "
        "positives' shift test below p 0.000233 and the likelihood part below -5% of the "
        "reference value), `both` with a moved ratio; `model_may_be_worse` (or "
        "`class_ratio_moved_model_may_be_worse`) when only the likelihood part's 95% interval "
        "lies below 0, not yet significant at the page's level; `stable` when the likelihood "
        "interval exists and none holds; `not_enough_data` without a likelihood interval and "
        "a visible ratio move. Windows computed before the page's rule decided read "
        "`model_got_worse` / `both` from the interval alone"
    )
    metric: Literal["precision", "f1", "average_precision"] = Field(
        description="the metric whose change is split"
    )
    prior_part: Metric = Field(description="the part of the change due to the class ratio")
    prior_interval: Interval
    likelihood_part: Metric = Field(description="the part due to the model (P(score | class))")
    likelihood_interval: Interval
    positive_class_ratio: float | None = Field(
        description="positive class ratio of the pooled windows"
    )
    positive_class_ratio_interval: tuple[float, float] | None = Field(
        description="its 95% Wilson interval, null when nothing is labelled"
    )
    reference_positive_class_ratio_interval: tuple[float, float] | None = Field(
        description="95% Wilson interval of the reference's class ratio, null without one"
    )
    positives_shift: PositivesShift | None = Field(
        default=None,
        description="the page's test; null without a reference with positives or without "
        "pooled positives, absent in windows computed before it existed",
    )
    reference: ReferencePeriod | None = Field(
        default=None,
        description="the reference the verdict is compared with: the window's own, except for "
        "a trailing reference when the decision pools earlier windows, where it is the windows "
        "before the oldest pooled one; null without a reference, absent in windows computed "
        "before it was stored",
    )


class WindowRecord(_Closed):
    """The result of one window and segment, as computed by the scheduler."""

    start: datetime = Field(description="first instant of the window (UTC)")
    end: datetime = Field(description="end of the window, excluded (UTC)")
    segment: str = Field(description="the segment, `*` for every prediction")
    computed_at: datetime = Field(description="when this record was computed (UTC)")
    n: int = Field(description="labelled predictions")
    n_pos: int = Field(description="positives")
    unlabelled: int = Field(description="predictions without a label yet")
    prior: float | None = Field(description="positive class ratio n_pos / n, null when n = 0")
    prior_interval: tuple[float, float] | None = Field(
        description="95% Wilson interval of the prior, null when n = 0"
    )
    regular: RegularMetrics = Field(description="every metric at the window's own prior")
    calibrated: CalibratedByPrior = Field(
        description="the prior-dependent metrics calibrated at the reference's prior and at "
        "each configured π0"
    )
    intervals: WindowIntervals = Field(description="95% intervals of the metrics")
    split: Split | None = Field(
        description="change from the reference, split into prior and likelihood parts; null "
        "until the model has a reference with labelled predictions"
    )
    reference: ReferenceSummary | None = Field(
        description="the reference set, null when the model has none yet"
    )
    estimated: Estimated | None = Field(
        description="label-free estimate; null until the model has a reference with both "
        "classes, or when the window has no scored prediction"
    )
    reliability: list[ReliabilityBin] | None = Field(
        default=None, description="reliability diagram" + _PROBABILITY
    )
    advice: Advice | None = Field(
        default=None,
        description="the advised threshold for the model's objective; null without one",
    )
    segments_overflow: SegmentsOverflow | None = Field(
        description="untracked segments of the window, on segment `*` only (else null)"
    )
    decision: Decision | None = Field(
        default=None,
        description="the pooled decision; absent from records computed before it existed",
    )


class WindowPage(_Closed):
    """A page of window records, oldest window first (`*` first within a window)."""

    windows: list[WindowRecord] = Field(description="at most `limit` records")
    next_cursor: str | None = Field(
        description="pass as `cursor` to read the next page; null on the last one"
    )
