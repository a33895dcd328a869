"""The window record, declared once: the stored JSON of a window and segment
(``window_results.record``), as :func:`calmon.services.windows.record.segment_record` builds it and
the exporter, the web view, ``calmon windows``, ``calmon simulate``, the offline HTML report
and the notebook read it; and the record of one evaluation set without a reference
(:class:`EvaluationRecord`), as ``calmon evaluate`` and :func:`calmon.evaluate_frame` give it.

These TypedDicts are the only declaration of the record. The code types records with them,
and the OpenAPI schema of ``GET /v1/models/{model}/windows`` is generated from them by pydantic
(:data:`WINDOW_PAGE`): each key carries its description in an ``Annotated`` ``Field``, every
object is closed (``additionalProperties: false``) except the maps keyed by a configured π0
(``"0.01"``), whose values have one schema. A key that is ``NotRequired`` is absent for
``score`` models (the probability metrics, ``reliability``) or by configuration (an objective's
other kinds); a nullable value is ``X | None``. Only records of the current shape
(:data:`RECORD_VERSION`) are served, so no reader meets an older one.
``tests/unit/test_records.py`` checks that real computed records
(``tests/data/windows/golden_records.json``) validate and hold exactly these keys. A section
read by a catalogue name held in a variable (a TypedDict takes literal keys only) goes through
:func:`metric_value`, :func:`metric_interval` and :func:`split_parts`. Instants are ISO 8601
text and intervals ``[lower, upper]`` lists, as stored. The record's fields and when each is
null: ``docs/reference/scheduler.md`` ("The record").

A metric is ``null`` where it is undefined (one class only, no prediction at the threshold,
…); an interval is ``[lower, upper]`` at 95%, or ``null`` where none is published
(``docs/reference/intervals.md``).

This module imports nothing of ``calmon`` but the metric catalogue (:mod:`calmon.catalogue`,
whose descriptors give the metrics' descriptions) and the verdicts' codes
(:mod:`calmon.verdict`), so every layer may import it. Its annotations are
evaluated when it is imported (no ``from __future__ import annotations``), so that
``__required_keys__`` tells the ``NotRequired`` keys apart at run time.
"""

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, NotRequired, cast

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import TypedDict

from calmon.catalogue import BY_NAME
from calmon.verdict import DecisionVerdict, EstimateVerdict

#: The shape of the window record the builder writes today, stored beside each record
#: (``window_results.record_version``, never inside its JSON): one more with each change of what
#: a computed record holds, so that a record of an older shape is recomputed rather than read
#: around (the stored reads serve records of this version only). 1: records computed before
#: ``decision``, ``advice``, ``intervals.absent``, ``decision.positives_shift`` and
#: ``decision.reference``, the estimate's ``label_shift``, ``verdict``, ``cannot_see`` and
#: ``positive_class_ratio_resolved``, or the shift test's ``mann_whitney_z``, ``placement_z``
#: and ``location_z`` existed, or holding a value only those records hold.
RECORD_VERSION: Final = 2

_CLOSED = ConfigDict(extra="forbid")
_PROBABILITY = " (probability models only)"

#: A 95% interval ``[lower, upper]``, or None where none is published
#: (``docs/reference/intervals.md``).
Interval = Annotated[
    Annotated[list[float], Field(min_length=2, max_length=2)] | None,
    Field(description="95% interval `[lower, upper]`, null where none is published"),
]
#: A value that is None where the metric is undefined.
Metric = Annotated[float | None, Field(description="the value, null where undefined")]
#: An instant as stored: ISO 8601 text in UTC.
Instant = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
#: A ``[lower, upper]`` pair that is always given.
Pair = Annotated[list[float], Field(min_length=2, max_length=2)]


def _described(description: str) -> Any:
    """The ``Field`` that gives a key its description in the OpenAPI document."""
    return Field(description=description)


def _about(metric: str) -> Any:
    """The ``Field`` of a catalogue metric: what its descriptor says it is."""
    descriptor = BY_NAME[metric]
    extra = _PROBABILITY if descriptor.probability_only else ""
    return Field(description=descriptor.about + extra)


def _prior_keyed(description: str) -> Any:
    """The ``Field`` of a map keyed ``reference`` and by each configured π0's decimal text:
    the ``reference`` key is always present."""
    return Field(
        description=description,
        json_schema_extra={"required": ["reference"], "propertyNames": {"type": "string"}},
    )


@with_config(_CLOSED)
class RegularMetrics(TypedDict):
    """Every catalogue metric of the window's labelled predictions, at their own class ratio
    (`docs/reference/metrics.md`); the probability metrics are absent for `score` models."""

    precision: Annotated[Metric, _about("precision")]
    f1: Annotated[Metric, _about("f1")]
    recall: Annotated[Metric, _about("recall")]
    fpr: Annotated[Metric, _about("fpr")]
    roc_auc: Annotated[Metric, _about("roc_auc")]
    ks: Annotated[Metric, _about("ks")]
    ks_abc: Annotated[Metric, _about("ks_abc")]
    average_precision: Annotated[Metric, _about("average_precision")]
    best_f1: Annotated[Metric, _about("best_f1")]
    best_f1_threshold: Annotated[Metric, _about("best_f1_threshold")]
    pr_gain_auc: Annotated[Metric, _about("pr_gain_auc")]
    brier: NotRequired[Annotated[Metric, _about("brier")]]
    brier_skill: NotRequired[Annotated[Metric, _about("brier_skill")]]
    brier_pos: NotRequired[Annotated[Metric, _about("brier_pos")]]
    brier_neg: NotRequired[Annotated[Metric, _about("brier_neg")]]
    log_loss: NotRequired[Annotated[Metric, _about("log_loss")]]
    ece: NotRequired[Annotated[Metric, _about("ece")]]
    mce: NotRequired[Annotated[Metric, _about("mce")]]


@with_config(_CLOSED)
class CalibratedMetrics(TypedDict):
    """The prior-dependent metrics calibrated at a reference prior π0: their value had the
    window's positives made up a π0 share of it (`docs/reference/metrics.md`, π0 calibration)."""

    precision: Annotated[Metric, _described("calibrated precision at the threshold")]
    f1: Annotated[Metric, _described("F1 of the calibrated precision and the recall")]
    average_precision: Annotated[Metric, _described("calibrated average precision (AUC-PcR)")]
    best_f1: Annotated[Metric, _described("highest calibrated F1 over every threshold")]
    best_f1_threshold: Annotated[
        Metric, _described("highest threshold reaching the calibrated `best_f1`")
    ]
    pr_gain_auc: Annotated[
        Metric, _described("area under the PR-gain curve with recall gain at π0")
    ]


#: Calibrated metrics keyed ``reference`` (None without a usable reference prior) and by the
#: decimal text of each configured π0 (``"0.01"``).
CalibratedByPrior = dict[str, CalibratedMetrics | None]


@with_config(_CLOSED)
class RegularIntervals(TypedDict):
    """95% intervals of the regular metrics (`docs/reference/intervals.md`); null where none is
    published (always for `best_f1`, `pr_gain_auc` and `ks`); the probability ones absent for
    `score` models."""

    precision: Annotated[Interval, _described("precision's 95% interval")]
    recall: Annotated[Interval, _described("recall's 95% interval")]
    fpr: Annotated[Interval, _described("false positive rate's 95% interval")]
    f1: Annotated[Interval, _described("F1's 95% interval")]
    roc_auc: Annotated[Interval, _described("ROC AUC's 95% interval")]
    average_precision: Annotated[Interval, _described("average precision's 95% interval")]
    best_f1: Annotated[Interval, _described("always null: no interval is published")]
    pr_gain_auc: Annotated[Interval, _described("always null: no interval is published")]
    ks: Annotated[Interval, _described("always null: no interval is published")]
    ks_abc: Annotated[Interval, _described("`ks_abc`'s 95% interval")]
    brier: NotRequired[Annotated[Interval, _described("95% interval" + _PROBABILITY)]]
    brier_pos: NotRequired[Annotated[Interval, _described("95% interval" + _PROBABILITY)]]
    brier_neg: NotRequired[Annotated[Interval, _described("95% interval" + _PROBABILITY)]]
    log_loss: NotRequired[Annotated[Interval, _described("95% interval" + _PROBABILITY)]]
    brier_skill: NotRequired[Annotated[Interval, _described("95% interval" + _PROBABILITY)]]


@with_config(_CLOSED)
class CalibratedIntervals(TypedDict):
    """95% intervals of the calibrated metrics at one prior (none for `best_f1` and
    `pr_gain_auc`, nor for average precision at small priors)."""

    precision: Annotated[Interval, _described("calibrated precision's 95% interval")]
    f1: Annotated[Interval, _described("calibrated F1's 95% interval")]
    average_precision: Annotated[
        Interval, _described("calibrated average precision's 95% interval")
    ]
    best_f1: Annotated[Interval, _described("always null: no interval is published")]
    pr_gain_auc: Annotated[Interval, _described("always null: no interval is published")]


#: Intervals of the calibrated metrics, keyed like :data:`CalibratedByPrior`.
CalibratedIntervalsByPrior = dict[str, CalibratedIntervals | None]


#: Why a metric has no interval (``docs/reference/intervals.md``, "Absent intervals").
AbsentReason = Literal[
    "no_method",
    "undefined",
    "prior_out_of_range",
    "too_few_positives",
    "too_few_negatives",
    "too_few_rows",
    "constant_scores",
    "undefined_in_replicates",
]


@with_config(_CLOSED)
class IntervalsAbsent(TypedDict):
    """The reason of every null interval, keyed like the intervals (a metric with an interval
    has no key; `docs/reference/intervals.md`, "Absent intervals"); ``calibrated`` holds a null
    where the intervals' key is null."""

    regular: Annotated[
        dict[str, AbsentReason],
        _described("metric → reason, for the regular metrics without an interval"),
    ]
    calibrated: Annotated[
        dict[str, dict[str, AbsentReason] | None],
        _described("keyed like `calibrated`: metric → reason; null where that key is"),
    ]


@with_config(_CLOSED)
class WindowIntervals(TypedDict):
    """The 95% intervals of every published metric, and why each null one is null."""

    regular: Annotated[RegularIntervals, _described("intervals of the regular metrics")]
    calibrated: Annotated[
        CalibratedIntervalsByPrior,
        _prior_keyed(
            "intervals of the calibrated metrics, keyed like `calibrated`: at the reference's "
            "positive class ratio (`reference`, null when `calibrated.reference` is) and at "
            'each configured π0 under its decimal text (`"0.01"`)'
        ),
    ]
    absent: Annotated[IntervalsAbsent, _described("why each null interval is null")]


@with_config(_CLOSED)
class SplitParts(TypedDict):
    """A change of one prior-dependent metric from the reference to the window, split into the
    part due to the class ratio and the part due to the model (`docs/reference/metrics.md`, the
    order-symmetric split: total = prior + likelihood)."""

    total: Annotated[Metric, _described("the window's value minus the reference's")]
    prior: Annotated[Metric, _described("the part due to the class ratio moving (the prior shift)")]
    likelihood: Annotated[
        Metric,
        _described(
            "the part due to P(score | class) moving: the model got better (> 0) or worse (< 0)"
        ),
    ]
    prior_interval: Annotated[Interval, _described("the prior part's 95% interval")]
    likelihood_interval: Annotated[Interval, _described("the likelihood part's 95% interval")]


@with_config(_CLOSED)
class Split(TypedDict):
    """The change split of each prior-dependent metric (intervals for precision, F1 and, with
    at least 100 positives in the window and in the reference, average precision)."""

    precision: Annotated[SplitParts, _described("change of the precision at the threshold")]
    f1: Annotated[SplitParts, _described("change of the F1 at the threshold")]
    average_precision: Annotated[SplitParts, _described("change of the average precision")]
    best_f1: Annotated[SplitParts, _described("change of the best F1 (parts without intervals)")]
    pr_gain_auc: Annotated[SplitParts, _described("change of AUPRG (parts without intervals)")]


@with_config(_CLOSED)
class ReferencePeriod(TypedDict):
    """Which reference set (`docs/reference/references.md`): how it is chosen, the period it covers
    and, for a trailing one, how many windows it pools (what a verdict names as compared
    against)."""

    kind: Annotated[Literal["trailing", "fixed"], _described("how the reference is chosen")]
    start: Annotated[Instant, _described("first instant of the reference period (UTC)")]
    end: Annotated[Instant, _described("end of the reference period, excluded (UTC)")]
    windows: Annotated[int | None, _described("trailing windows pooled; null for a fixed one")]


@with_config(_CLOSED)
class ReferenceSummary(ReferencePeriod):
    """The reference set the window is compared with."""

    n: Annotated[int, _described("labelled predictions of the reference")]
    n_pos: Annotated[int, _described("positives of the reference")]
    prior: Annotated[float | None, _described("positive class ratio of the reference")]
    regular: Annotated[RegularMetrics, _described("the regular metrics of the reference")]


@with_config(_CLOSED)
class EstimatedRegular(TypedDict):
    """Label-free estimates of the regular metrics at the estimated class ratio."""

    precision: Annotated[Metric, _described("estimated precision at the threshold")]
    recall: Annotated[Metric, _described("estimated recall at the threshold")]
    f1: Annotated[Metric, _described("estimated F1 at the threshold")]
    roc_auc: Annotated[Metric, _described("estimated ROC AUC")]
    average_precision: Annotated[Metric, _described("estimated average precision")]


@with_config(_CLOSED)
class EstimatedCalibrated(TypedDict):
    """Label-free estimates of calibrated metrics at one configured π0."""

    precision: Annotated[Metric, _described("estimated calibrated precision")]
    f1: Annotated[Metric, _described("estimated calibrated F1")]
    average_precision: Annotated[Metric, _described("estimated calibrated average precision")]


@with_config(_CLOSED)
class LabelShiftCheck(TypedDict):
    """The label-shift check of the window (`docs/reference/metrics.md`, The label-shift check):
    does the window's score distribution fit the reference's class mixture at some ratio?"""

    p_value: Annotated[
        float | None, _described("p-value of the check; null under 200 scored predictions")
    ]
    holds: Annotated[
        bool | None,
        _described(
            "the check does not reject at level 0.01 (the estimate's assumption holds as far "
            "as scores can tell); null where the p-value is"
        ),
    ]
    method: Annotated[Literal["cvm_pearson_mixture_bootstrap"], _described("how it was tested")]


@with_config(_CLOSED)
class Estimated(TypedDict):
    """The label-free estimate of the window (`docs/reference/metrics.md`, Label-free estimates):
    from every scored prediction, labelled or not, assuming P(score | class) is the reference's."""

    positive_class_ratio: Annotated[float, _described("estimated positive class ratio")]
    positive_class_ratio_interval: Annotated[Pair, _described("its 95% interval `[lower, upper]`")]
    method: Annotated[Literal["saerens_em_isotonic"], _described("how it was estimated")]
    n: Annotated[int, _described("scored predictions it used")]
    regular: Annotated[EstimatedRegular, _described("metrics at the estimated class ratio")]
    calibrated: Annotated[
        dict[str, EstimatedCalibrated],
        _described('at each configured π0, keyed by its decimal text (`"0.01"`)'),
    ]
    label_shift: Annotated[
        LabelShiftCheck | None, _described("the check of the estimate's assumption")
    ]
    verdict: Annotated[
        EstimateVerdict | None,
        _described(
            "what the estimate says, with the check holding: the estimate rose above the "
            "reference's ratio times 1.5 (`more_positives_or_higher_scores`: more positives, "
            "or negatives scoring like positives; labels will tell), or fell below the "
            "reference's divided by 1.5 (`fewer_positives_or_lower_scores`: fewer positives, "
            "or positives scoring lower, e.g. a model that got worse; labels will tell); the "
            "check rejecting: the scores changed in a way a class-ratio change does not "
            "explain (`scores_changed`, labels needed); `no_change`; or `not_enough_data` "
            "(under 200 scored predictions)"
        ),
    ]
    cannot_see: Annotated[
        str | None,
        _described(
            "what no test on unlabelled scores can see: a share of one class scoring like "
            "the other reads as a class-ratio change (positives scoring like negatives as "
            "fewer positives)"
        ),
    ]
    positive_class_ratio_resolved: Annotated[
        bool | None,
        _described(
            "false when the estimate's 95% interval reaches 0: its spread is of the order of "
            "the value (too few positives), which an estimate that is never negative biases "
            "upward; the value is then an order of magnitude and the interval is what holds"
        ),
    ]


def _one_objective(schema: dict[str, Any]) -> None:
    """Say that an objective holds exactly one of its keys: one schema per kind."""
    properties = schema["properties"]
    variants = []
    for title, key in (
        ("PrecisionObjective", "target_precision"),
        ("CostObjective", "costs"),
        ("AlertRateObjective", "alert_rate"),
    ):
        part = properties[key]
        kept = [item for item in part.get("anyOf", [part]) if item.get("type") != "null"]
        rest = {name: value for name, value in part.items() if name not in {"anyOf", "default"}}
        variants.append(
            {
                "title": title,
                "type": "object",
                "additionalProperties": False,
                "required": [key],
                "properties": {key: {**kept[0], **rest}},
            }
        )
    schema["oneOf"] = variants


@with_config(ConfigDict(extra="forbid", strict=True))
class Costs(TypedDict):
    """The cost of one false positive and of one false negative (any unit)."""

    false_positive: Annotated[
        float, Field(ge=0.0, allow_inf_nan=False, description="cost of one false positive")
    ]
    false_negative: Annotated[
        float, Field(ge=0.0, allow_inf_nan=False, description="cost of one false negative")
    ]


@with_config(ConfigDict(extra="forbid", strict=True, json_schema_extra=_one_objective))
class Objective(TypedDict):
    """What a model's advised threshold aims at (``docs/reference/acting.md``); exactly one of:

    ``{"target_precision": p}``: the lowest threshold whose expected precision is at least p;
    ``{"costs": {...}}``: the threshold of least expected cost per prediction;
    ``{"alert_rate": r}``: the lowest threshold flagging at most a fraction r (an alert budget).
    """

    target_precision: NotRequired[
        Annotated[float | None, Field(gt=0.0, le=1.0, description="the precision to reach")]
    ]
    costs: NotRequired[
        Annotated[Costs | None, _described("the costs whose expected sum to minimise")]
    ]
    alert_rate: NotRequired[
        Annotated[float | None, Field(gt=0.0, le=1.0, description="the largest fraction to flag")]
    ]


@with_config(_CLOSED)
class AdviceExpected(TypedDict):
    """What the advised threshold is expected to give at the window's class ratio, if
    P(score | class) is the reference's."""

    precision: Annotated[float | None, _described("expected precision")]
    recall: Annotated[float | None, _described("expected recall")]
    alert_rate: Annotated[float | None, _described("expected fraction of predictions flagged")]
    cost: Annotated[
        float | None,
        _described("expected cost per prediction; null unless the objective is `costs`"),
    ]


@with_config(_CLOSED)
class AdviceIntervals(TypedDict):
    """95% intervals of the expected values, [lower, upper], over the reference's sampling
    (each class's rates bounded by Wilson): not the next window's own noise nor the class
    ratio's error (`docs/reference/acting.md`); ``cost`` only with a cost objective."""

    precision: Annotated[Interval, _described("expected precision's interval")]
    recall: Annotated[Interval, _described("expected recall's interval")]
    alert_rate: Annotated[Interval, _described("expected alert rate's interval")]
    cost: Annotated[
        Interval, _described("expected cost's interval; null unless the objective is `costs`")
    ]


@with_config(_CLOSED)
class AdviceAssumption(TypedDict):
    """Whether label shift (the window's P(score | class) is the reference's) was checked and
    held: from the window's labels (`ks_by_class`), or the label-free check of `estimated`."""

    holds: Annotated[bool | None, _described("false: the advice rests on a broken assumption")]
    p_value: Annotated[float | None, _described("p-value of the check")]
    method: Annotated[str | None, _described("how it was checked")]


@with_config(_CLOSED)
class Advice(TypedDict):
    """The advised threshold for the model's objective at the window's class ratio
    (`docs/reference/acting.md`); `threshold` is null with a `reason` when there is none."""

    objective: Annotated[Objective, _described("the model's objective when computed")]
    configured_threshold: Annotated[float, _described("the model's configured threshold")]
    prior: Annotated[float | None, _described("the class ratio the advice is computed at")]
    prior_source: Annotated[
        Literal["measured", "estimated"] | None,
        _described("`measured` from the window's labels, `estimated` without them"),
    ]
    threshold: Annotated[float | None, _described("the advised threshold (predict s >= it)")]
    expected: Annotated[AdviceExpected | None, _described("what it is expected to give")]
    expected_intervals: Annotated[
        AdviceIntervals | None,
        _described(
            "95% intervals of `expected` over the reference's sampling; null with `expected`"
        ),
    ]
    assumption: Annotated[AdviceAssumption | None, _described("the label-shift check")]
    reason: Annotated[str | None, _described("why there is no advice, else null")]


@with_config(_CLOSED)
class ReliabilityBin(TypedDict):
    """One bin of the reliability diagram (10 equal-width bins on [0, 1], right-closed)."""

    lower: Annotated[float, _described("lower edge of the bin")]
    upper: Annotated[float, _described("upper edge of the bin")]
    count: Annotated[int, _described("labelled predictions in the bin")]
    mean_score: Annotated[float | None, _described("mean score in the bin, null when empty")]
    fraction_positive: Annotated[
        float | None, _described("share of positives in the bin, null when empty")
    ]


@with_config(_CLOSED)
class SegmentsOverflow(TypedDict):
    """Segments beyond the model's `max_segments` in this window (counted only in `*`)."""

    segments: Annotated[int, _described("distinct untracked segments")]
    predictions: Annotated[int, _described("predictions in them")]


@with_config(_CLOSED)
class PositivesShift(TypedDict):
    """Whether the pooled positives score lower than the reference's positives: the test the
    page `CalmonDecisionMetricDrop` reads (`docs/reference/metrics.md`, "Decisions at few
    positives")."""

    method: Annotated[
        Literal["location_and_placement"],
        _described(
            "the one-sided test of the two sets' positives' location scores (a shift of their "
            "logits) and the test of their placements among the pooled negatives, the smaller "
            "p-value doubled"
        ),
    ]
    z: Annotated[
        float,
        _described(
            "the larger of the two tests' z (the location test's alone without pooled "
            "negatives, the Mann-Whitney z in its place where it is null), above 0 when the "
            "pooled positives score lower"
        ),
    ]
    p_value: Annotated[float, _described("its one-sided p-value")]
    mann_whitney_z: Annotated[
        float | None, _described("z of the Mann-Whitney test (ties corrected)")
    ]
    placement_z: Annotated[
        float | None,
        _described("skewness-corrected z of the placement test; null without pooled negatives"),
    ]
    location_z: Annotated[
        float | None,
        _described(
            "skewness-corrected z of the location test; null when the positives' logits do not vary"
        ),
    ]


@with_config(_CLOSED)
class Decision(TypedDict):
    """The pooled decision of the window (`docs/reference/metrics.md`, "Decisions at few
    positives"): the window and, when it alone holds fewer than the model's
    `decision.min_positives` positives, the trailing windows before it, pooled back until they
    hold that many and span at least `decision.min_span` (within `decision.max_span`), split
    against the reference like a window. The one verdict the web view, `calmon windows`,
    `calmon simulate` and the alerts read."""

    windows: Annotated[int, _described("windows pooled, this one included")]
    start: Annotated[Instant, _described("start of the oldest pooled window (UTC)")]
    n: Annotated[int, _described("labelled predictions pooled")]
    n_pos: Annotated[int, _described("positives pooled")]
    verdict: Annotated[
        DecisionVerdict,
        _described(
            "`class_ratio_moved` when the pooled and the reference class ratios' 95% Wilson "
            "intervals are disjoint; `model_got_worse` when the page's rule holds (the "
            "positives' shift test below p 0.00135 and the likelihood part below -5% of the "
            "reference value), `both` with a moved ratio; `model_may_be_worse` (or "
            "`class_ratio_moved_model_may_be_worse`) when only the likelihood part's 95% "
            "interval lies below 0, not yet significant at the page's level; `stable` when the "
            "likelihood interval exists and none holds; `not_enough_data` without a likelihood "
            "interval and a visible ratio move. Windows computed before the page's rule decided "
            "read `model_got_worse` / `both` from the interval alone"
        ),
    ]
    metric: Annotated[
        Literal["precision", "f1", "average_precision"],
        _described("the metric whose change is split"),
    ]
    prior_part: Annotated[Metric, _described("the part of the change due to the class ratio")]
    prior_interval: Annotated[Interval, _described("the prior part's 95% interval")]
    likelihood_part: Annotated[Metric, _described("the part due to the model (P(score | class))")]
    likelihood_interval: Annotated[Interval, _described("the likelihood part's 95% interval")]
    positive_class_ratio: Annotated[
        float | None, _described("positive class ratio of the pooled windows")
    ]
    positive_class_ratio_interval: Annotated[
        Pair | None, _described("its 95% Wilson interval, null when nothing is labelled")
    ]
    reference_positive_class_ratio_interval: Annotated[
        Pair | None,
        _described("95% Wilson interval of the reference's class ratio, null without one"),
    ]
    positives_shift: Annotated[
        PositivesShift | None,
        _described(
            "the page's test; null without a reference with positives or without pooled positives"
        ),
    ]
    reference: Annotated[
        ReferencePeriod | None,
        _described(
            "the reference the verdict is compared with: the window's own, except for a "
            "trailing reference when the decision pools earlier windows, where it is the "
            "windows before the oldest pooled one; null without a reference"
        ),
    ]


@with_config(_CLOSED)
class WindowRecord(TypedDict):
    """The result of one window and segment, as computed by the scheduler. ``reliability`` is
    absent for ``score`` models."""

    start: Annotated[Instant, _described("first instant of the window (UTC)")]
    end: Annotated[Instant, _described("end of the window, excluded (UTC)")]
    segment: Annotated[str, _described("the segment, `*` for every prediction")]
    computed_at: Annotated[Instant, _described("when this record was computed (UTC)")]
    n: Annotated[int, _described("labelled predictions")]
    n_pos: Annotated[int, _described("positives")]
    unlabelled: Annotated[int, _described("predictions without a label yet")]
    prior: Annotated[float | None, _described("positive class ratio n_pos / n, null when n = 0")]
    prior_interval: Annotated[
        Pair | None, _described("95% Wilson interval of the prior, null when n = 0")
    ]
    regular: Annotated[RegularMetrics, _described("every metric at the window's own prior")]
    calibrated: Annotated[
        CalibratedByPrior,
        _prior_keyed(
            "the prior-dependent metrics calibrated at the reference's prior (`reference`, "
            "null until the model has a reference with labelled predictions of both classes) "
            'and at each configured π0 under its decimal text (`"0.01"`)'
        ),
    ]
    intervals: Annotated[WindowIntervals, _described("95% intervals of the metrics")]
    split: Annotated[
        Split | None,
        _described(
            "change from the reference, split into prior and likelihood parts; null until the "
            "model has a reference with labelled predictions"
        ),
    ]
    reference: Annotated[
        ReferenceSummary | None, _described("the reference set, null when the model has none yet")
    ]
    estimated: Annotated[
        Estimated | None,
        _described(
            "label-free estimate; null until the model has a reference with both classes, or "
            "when the window has no scored prediction"
        ),
    ]
    reliability: NotRequired[
        Annotated[list[ReliabilityBin] | None, _described("reliability diagram" + _PROBABILITY)]
    ]
    advice: Annotated[
        Advice | None,
        _described("the advised threshold for the model's objective; null without one"),
    ]
    segments_overflow: Annotated[
        SegmentsOverflow | None,
        _described("untracked segments of the window, on segment `*` only (else null)"),
    ]
    decision: Annotated[Decision, _described("the pooled decision")]


@with_config(_CLOSED)
class WindowPage(TypedDict):
    """A page of window records, oldest window first (`*` first within a window)."""

    windows: Annotated[list[WindowRecord], _described("at most `limit` records")]
    next_cursor: Annotated[
        str | None,
        _described("pass as `cursor` to read the next page; null on the last one"),
    ]


#: Validates a stored record (JSON text or parsed) against the one declaration.
WINDOW_RECORD: TypeAdapter[WindowRecord] = TypeAdapter(WindowRecord)


class EvaluationIntervals(TypedDict):
    """The intervals of an evaluation set: as :class:`WindowIntervals`, except that a
    configured π0 always has its calibrated intervals (there is no ``reference`` prior)."""

    regular: RegularIntervals
    calibrated: dict[str, CalibratedIntervals]
    absent: NotRequired[IntervalsAbsent]


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
