"""The verdicts: the codes a window record stores, their words, and the thresholds and
predicates of the alerts that read them.

A window record says what happened in two codes (``docs/reference/metrics.md``): its pooled
``decision.verdict`` (:class:`Verdict`), the one verdict the web view, ``calmon windows``,
``calmon simulate`` and the alerts read, and, before its labels land, its label-free
``estimated.verdict`` (:class:`Estimate`). Every module that writes or reads them takes them
from here, and words are given to them only where people read them (:data:`VERDICT_WORDS`,
:data:`ESTIMATE_WORDS`).

The thresholds are those of ``deploy/prometheus/rules/calmon.yml`` (a test pins each number
of its expressions to the constant here), and the predicates are the alerts' comparisons on
plain numbers: the metric engine decides with them and the web view judges the latest records
with them, so the page, the record and Prometheus agree. Names, numbers and comparisons only:
no NumPy, no I/O, nothing of the service but the metric catalogue's names, so the metric
engine and the record's schema both import it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from statistics import NormalDist
from typing import Any, Final, Literal

from calmon.catalogue import DECISION_METRIC


class Verdict(StrEnum):
    """The verdict of a window, as its record's ``decision.verdict`` stores it (a record
    computed before decisions existed reads the same codes from its own split)."""

    WORSE = "model_got_worse"
    RATIO = "class_ratio_moved"
    BOTH = "both"
    STABLE = "stable"
    UNKNOWN = "not_enough_data"
    MAYBE_WORSE = "model_may_be_worse"
    RATIO_MAYBE_WORSE = "class_ratio_moved_model_may_be_worse"


#: the record's type of ``decision.verdict``: the values of :class:`Verdict`, in its order
DecisionVerdict = Literal[
    "model_got_worse",
    "class_ratio_moved",
    "both",
    "stable",
    "not_enough_data",
    "model_may_be_worse",
    "class_ratio_moved_model_may_be_worse",
]


class Estimate(StrEnum):
    """What the label-free estimate says of a window, as its record's ``estimated.verdict``
    stores it. A fall or a rise is never called a class-ratio change: positives scoring like
    negatives give exactly the scores of fewer positives, and negatives scoring like positives
    those of more (``calmon.catalogue.CANNOT_SEE``). (Records of shape 1 could say
    ``class_ratio_moved`` here; they are not served: :data:`calmon.records.RECORD_VERSION`.)"""

    FELL = "fewer_positives_or_lower_scores"
    ROSE = "more_positives_or_higher_scores"
    SCORES_CHANGED = "scores_changed"
    NO_CHANGE = "no_change"
    UNKNOWN = "not_enough_data"


#: the record's type of ``estimated.verdict``: the values of :class:`Estimate`, in its order
EstimateVerdict = Literal[
    "fewer_positives_or_lower_scores",
    "more_positives_or_higher_scores",
    "scores_changed",
    "no_change",
    "not_enough_data",
]

#: the verdicts in the words the pages show
VERDICT_WORDS: Final[dict[Verdict, str]] = {
    Verdict.WORSE: "model got worse",
    Verdict.RATIO: "class ratio moved",
    Verdict.BOTH: "class ratio moved and model got worse",
    Verdict.STABLE: "neither: stable",
    Verdict.UNKNOWN: "not enough data",
    Verdict.MAYBE_WORSE: "model may be worse; not yet significant",
    Verdict.RATIO_MAYBE_WORSE: "class ratio moved; model may be worse, not yet significant",
}
#: the label-free estimate's verdicts in plain words
ESTIMATE_WORDS: Final[dict[Estimate, str]] = {
    Estimate.FELL: (
        "fewer positives, or positives scoring lower (estimated without labels): labels will tell"
    ),
    Estimate.ROSE: (
        "more positives, or negatives scoring like positives (estimated without labels): labels "
        "will tell"
    ),
    Estimate.SCORES_CHANGED: (
        "scores changed in a way a class-ratio change does not explain: labels needed"
    ),
    Estimate.NO_CHANGE: "no change (estimated without labels)",
    Estimate.UNKNOWN: "not enough data",
}

#: the metric whose change split drives the verdict, the decision and the alerts (the
#: catalogue's row that ``decides``)
VERDICT_METRIC: Final = DECISION_METRIC
#: CalmonCalibratedMetricDrop: calibrated AP below this fraction of the reference's
DROP_FRACTION: Final = 0.95
#: CalmonCalibratedMetricDrop: (2.326 / 1.960 - 1) / 2, a one-sided 99% bound from the 95% one
ONE_SIDED_99: Final = 0.0935
#: CalmonPriorShift, CalmonPriorShiftPooled, CalmonPriorShiftEstimated: the ratio moved by more
#: than this factor either way
SHIFT_FACTOR: Final = 1.5
#: CalmonScoresChangedUnexplained, CalmonPriorShiftEstimated: the level of the label-shift
#: check; its assumption holds when the p-value is at least this
CHECK_LEVEL: Final = 0.01
#: CalmonDecisionMetricDrop: the z of the positives' shift test the page needs, chosen from the
#: study of ``docs/measurements/decisions.md`` so that pure prior shifts page at most 2.5% of
#: models in a week of hourly decisions (each hour's decision re-reads most of the last one's
#: windows, and every one is compared with the same reference) pooled over at least the
#: default ``decision.min_span``, and 90% of 20% AP drops at 20 positives an hour page within a
#: day
PAGE_Z: Final = 3.0
#: CalmonDecisionMetricDrop: the page's level, the shift test's p-value below this (0.00135)
PAGE_P: Final = 1.0 - NormalDist().cdf(PAGE_Z)
#: the z a window that is its own decision (it alone holds ``decision.min_positives``
#: positives, or has nothing to pool) needs for "worse": each window is then a look of its own,
#: hour after hour, so it keeps the stricter level of single looks (the page itself does not
#: fire there: ``CalmonCalibratedMetricDrop`` speaks where a window has its own interval)
OWN_PAGE_Z: Final = 3.5
#: the p-value below which a window that is its own decision reads "worse" (0.000233)
OWN_PAGE_P: Final = 1.0 - NormalDist().cdf(OWN_PAGE_Z)
#: CalmonDecisionMetricDrop: the page's materiality, the likelihood part below this fraction of
#: the reference value (negated)
PAGE_MATERIAL: Final = 0.05
#: CalmonMetricsStale: no window computed for this many window lengths
STALE_LENGTHS: Final = 3

_VERDICTS: Final = frozenset(Verdict)
_ESTIMATES: Final = frozenset(Estimate)

Bounds = tuple[float, float]
#: an interval as the record and the engine hold it: ``[lo, hi]``, or None where absent
Pair = list[float] | tuple[float, float] | None
Direction = Literal["up", "down"]


def _disjoint(a: Pair, b: Pair) -> bool:
    return a is not None and b is not None and (a[1] < b[0] or a[0] > b[1])


def decision_verdict(
    *,
    ratio_interval: Pair,
    reference_interval: Pair,
    likelihood_interval: Pair,
    paged: bool = False,
) -> Verdict:
    """The verdict of a pooled decision (``docs/reference/metrics.md``, "Decisions at few
    positives") from the two class ratios' Wilson intervals, the likelihood part's interval and
    whether the page's rule holds (:func:`page`): the class ratio moved when the two ratios'
    intervals are disjoint; "worse" rests on the page's evidence alone, and a likelihood
    interval below 0 without it reads "may be worse"; stable when the likelihood interval
    exists and none holds; not enough data without it and a ratio that did not visibly move."""
    moved = _disjoint(ratio_interval, reference_interval)
    weak = likelihood_interval is not None and likelihood_interval[1] < 0.0
    if moved:
        return Verdict.BOTH if paged else Verdict.RATIO_MAYBE_WORSE if weak else Verdict.RATIO
    if paged:
        return Verdict.WORSE
    if likelihood_interval is None:
        return Verdict.UNKNOWN
    return Verdict.MAYBE_WORSE if weak else Verdict.STABLE


def window_verdict(
    *,
    ratio_interval: Bounds,
    reference_interval: Bounds,
    prior_interval: Bounds,
    likelihood_interval: Bounds,
) -> Verdict:
    """The verdict a window's own split reads (records computed before decisions existed):
    the class ratio moved when the prior part's interval excludes 0 *and* the two ratios'
    Wilson intervals are disjoint (the ratio really differs, and enough to move the metric);
    the model got worse when the likelihood part's interval lies below 0."""
    moved = not prior_interval[0] <= 0.0 <= prior_interval[1] and _disjoint(
        ratio_interval, reference_interval
    )
    worse = likelihood_interval[1] < 0.0
    if moved:
        return Verdict.BOTH if worse else Verdict.RATIO
    return Verdict.WORSE if worse else Verdict.STABLE


def stored_verdict(code: str) -> Verdict:
    """The verdict a record's ``decision.verdict`` stores; not enough data for a code this
    version does not know."""
    return Verdict(code) if code in _VERDICTS else Verdict.UNKNOWN


def page(decision: dict[str, Any], *, reference_value: float | None, p: float = PAGE_P) -> bool:
    """Whether a decision pages (``CalmonDecisionMetricDrop``): its positives score lower
    than the reference's at the level ``p`` (``positives_shift.p_value``, the test of
    :func:`calmon.metrics.decision.positives_shift`), and its ``likelihood_part`` is below
    -:data:`PAGE_MATERIAL` times the reference's value of the metric (the fall matters to the
    metric, not only to the test)."""
    shift = decision["positives_shift"]
    likelihood = decision["likelihood_part"]
    if shift is None or likelihood is None or reference_value is None:
        return False
    return bool(shift["p_value"] < p and likelihood < -PAGE_MATERIAL * reference_value)


def calibrated_drop_holds(
    *, calibrated: float, reference: float, likelihood_interval: Bounds
) -> bool:
    """``CalmonCalibratedMetricDrop``: the metric calibrated at the reference prior below
    :data:`DROP_FRACTION` of the reference's value, and the likelihood part of its change
    below 0 at one-sided 99% confidence (:data:`ONE_SIDED_99`)."""
    lower, upper = likelihood_interval
    return calibrated < DROP_FRACTION * reference and upper + ONE_SIDED_99 * (upper - lower) < 0.0


def ratio_shift(ratio: float, interval: Bounds, reference: float) -> Direction | None:
    """``CalmonPriorShift`` and ``CalmonPriorShiftPooled``: "up" or "down" when ``ratio``
    moved from ``reference`` by more than a factor :data:`SHIFT_FACTOR` and its ``interval``
    excludes ``reference``, else None."""
    if ratio > SHIFT_FACTOR * reference and interval[0] > reference:
        return "up"
    if ratio < reference / SHIFT_FACTOR and interval[1] < reference:
        return "down"
    return None


def estimated_shift(interval: Bounds, reference: float) -> Direction | None:
    """``CalmonPriorShiftEstimated`` (where the check holds): "up" or "down" when the
    label-free ratio's ``interval`` lies wholly beyond ``reference`` times or divided by
    :data:`SHIFT_FACTOR`, else None."""
    if interval[0] > SHIFT_FACTOR * reference:
        return "up"
    if interval[1] < reference / SHIFT_FACTOR:
        return "down"
    return None


def check_holds(p_value: float) -> bool:
    """Whether the label-shift check's assumption holds: its p-value is at least
    :data:`CHECK_LEVEL` (below it, ``CalmonScoresChangedUnexplained``)."""
    return p_value >= CHECK_LEVEL


def estimate_of(*, check: bool | None, interval: Bounds, reference: float) -> Estimate:
    """The label-free estimate's verdict of a window: not enough data without a check (too
    few scored predictions), the scores changed where it rejects; where it holds, a rise or
    a fall where the estimate's ``interval`` left the reference band (:func:`estimated_shift`),
    else no change."""
    if check is None:
        return Estimate.UNKNOWN
    if not check:
        return Estimate.SCORES_CHANGED
    shift = estimated_shift(interval, reference)
    if shift is None:
        return Estimate.NO_CHANGE
    return Estimate.ROSE if shift == "up" else Estimate.FELL


def labels_decide(labelled: int, unlabelled: int) -> bool:
    """Whether a window's own labels, rather than its label-free estimate, tell its class
    ratio: once at least half its predictions are labelled. Before that, the labels that did
    land may be a biased sample (positives are often confirmed first)."""
    return labelled > 0 and labelled >= unlabelled


def speaking_estimate(code: str | None, *, labelled: int, unlabelled: int) -> Estimate | None:
    """The label-free estimate's verdict (its stored ``code``) where it, not the labels,
    speaks for a window of ``labelled`` and ``unlabelled`` predictions
    (:func:`labels_decide`); None where the labels decide, or without a known code."""
    if code is None or code not in _ESTIMATES:
        return None
    return None if labels_decide(labelled, unlabelled) else Estimate(code)


def is_stale(computed_at: datetime, *, now: datetime, length: timedelta) -> bool:
    """``CalmonMetricsStale``: the model's latest computation is more than
    :data:`STALE_LENGTHS` window lengths old."""
    return now - computed_at > STALE_LENGTHS * length
