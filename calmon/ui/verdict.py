"""What a window record says, and which of the alert rules it would fire: the web view's
reading of records, by the codes, thresholds and predicates of :mod:`calmon.verdict`.

Pure functions of window records (typed :class:`calmon.records.WindowRecord`); nothing here reads
the database.

The verdict shown is the record's pooled ``decision`` (:func:`record_verdict`,
``docs/reference/metrics.md``, "Decisions at few positives"), computed once by the scheduler;
the window's own split reads its numbers (:func:`read_window`). Before a window's labels
decide (fewer labelled than unlabelled predictions), its label-free estimate speaks where the
decision cannot (:func:`estimate_speaks`): its record's ``estimated.verdict``. Codes become
words only where they are shown (:data:`calmon.verdict.VERDICT_WORDS`).

The alert states apply the rules of ``deploy/prometheus/rules/calmon.yml``
(``CalmonCalibratedMetricDrop``, ``CalmonPriorShift``, ``CalmonPriorShiftEstimated``,
``CalmonScoresChangedUnexplained``, ``CalmonDecisionMetricDrop``, ``CalmonPriorShiftPooled``;
``CalmonMetricsStale`` is :func:`calmon.verdict.is_stale`) to the latest records, with the
predicates of :mod:`calmon.verdict`, so that the page and Prometheus agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from calmon.metrics.intervals import wilson_interval
from calmon.names import ALL_SEGMENTS
from calmon.records import WindowRecord, metric_value, split_parts
from calmon.verdict import (
    VERDICT_METRIC,
    Bounds,
    Direction,
    Estimate,
    Verdict,
    calibrated_drop_holds,
    check_holds,
    estimated_shift,
    labels_decide,
    page,
    ratio_shift,
    speaking_estimate,
    stored_verdict,
    window_verdict,
)
from calmon.words import reference_words, verdict_against

#: segments named after an alert that holds in some of them; the others are counted
NAMED_SEGMENTS: Final = 3
#: between an alert's words and where it holds (its reference, its segments): the pages show
#: what follows in a smaller line
ALERT_DETAIL: Final = " \u2014 "


@dataclass(frozen=True, slots=True)
class WindowReading:
    """A window's verdict and the numbers behind it (None where absent)."""

    verdict: Verdict
    ratio: float | None
    ratio_interval: Bounds | None
    reference_ratio: float | None
    reference_interval: Bounds | None
    prior_part: float | None
    prior_interval: Bounds | None
    likelihood_part: float | None
    likelihood_interval: Bounds | None


def number(value: Any) -> float | None:
    """``value`` as a float, or None when it is not a number (null, absent)."""
    kind = type(value)
    if kind is float:
        return float(value)
    return float(value) if kind is int else None


def bounds(value: Any) -> Bounds | None:
    """A ``[lo, hi]`` pair of numbers, or None."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    lo, hi = number(value[0]), number(value[1])
    return None if lo is None or hi is None else (lo, hi)


def _reference_prior(record: WindowRecord) -> float | None:
    reference = record["reference"]
    return None if reference is None else number(reference["prior"])


def reference_interval(record: WindowRecord) -> Bounds | None:
    """The 95% Wilson interval of the reference's positive class ratio (as the window's
    ``prior_interval`` is computed), or None without a labelled reference."""
    reference = record["reference"]
    if reference is None:
        return None
    return bounds(wilson_interval(float(reference["n_pos"]), float(reference["n"])))


def read_window(record: WindowRecord, *, metric: str = VERDICT_METRIC) -> WindowReading:
    """The verdict of one window record from its own split of ``metric``'s change
    (:func:`calmon.verdict.window_verdict`; not enough data where an interval is absent)."""
    split = record["split"]
    parts = None if split is None else split_parts(split, metric)
    ratio_iv, ref_iv = bounds(record["prior_interval"]), reference_interval(record)
    prior_iv = None if parts is None else bounds(parts["prior_interval"])
    lik_iv = None if parts is None else bounds(parts["likelihood_interval"])
    verdict = Verdict.UNKNOWN
    if ratio_iv is not None and ref_iv is not None and prior_iv is not None and lik_iv is not None:
        verdict = window_verdict(
            ratio_interval=ratio_iv,
            reference_interval=ref_iv,
            prior_interval=prior_iv,
            likelihood_interval=lik_iv,
        )
    return WindowReading(
        verdict=verdict,
        ratio=number(record["prior"]),
        ratio_interval=ratio_iv,
        reference_ratio=_reference_prior(record),
        reference_interval=ref_iv,
        prior_part=None if parts is None else number(parts["prior"]),
        prior_interval=prior_iv,
        likelihood_part=None if parts is None else number(parts["likelihood"]),
        likelihood_interval=lik_iv,
    )


@dataclass(frozen=True, slots=True)
class DecisionReading:
    """A window's pooled decision (``decision`` of its record): the verdict, the pooled span
    and counts, the parts of the change of its metric with their intervals, and the p-value
    of the positives' shift test the page reads (None without one)."""

    verdict: Verdict
    windows: int
    start: str | None
    n: int | None
    n_pos: int | None
    metric: str | None
    ratio: float | None
    ratio_interval: Bounds | None
    prior_part: float | None
    prior_interval: Bounds | None
    likelihood_part: float | None
    likelihood_interval: Bounds | None
    shift_p_value: float | None = None


def read_decision(record: WindowRecord) -> DecisionReading:
    """The pooled decision of a window record."""
    decision = record["decision"]
    shift = decision["positives_shift"]
    return DecisionReading(
        verdict=stored_verdict(decision["verdict"]),
        windows=decision["windows"],
        start=decision["start"],
        n=decision["n"],
        n_pos=decision["n_pos"],
        metric=decision["metric"],
        ratio=number(decision["positive_class_ratio"]),
        ratio_interval=bounds(decision["positive_class_ratio_interval"]),
        prior_part=number(decision["prior_part"]),
        prior_interval=bounds(decision["prior_interval"]),
        likelihood_part=number(decision["likelihood_part"]),
        likelihood_interval=bounds(decision["likelihood_interval"]),
        shift_p_value=None if shift is None else number(shift["p_value"]),
    )


def record_verdict(record: WindowRecord) -> Verdict:
    """The one verdict of a window: its pooled decision's."""
    return stored_verdict(record["decision"]["verdict"])


def _pooled_speaks(record: WindowRecord) -> bool:
    """The pooled alerts' domain: the decision pools more than one window and the window alone
    has no interval for the likelihood part of its AP change (a window with one is the
    window's own alerts')."""
    split = record["split"]
    parts = None if split is None else split_parts(split, VERDICT_METRIC)
    own = None if parts is None else parts["likelihood_interval"]
    return record["decision"]["windows"] > 1 and own is None


def decision_drop(record: WindowRecord) -> bool:
    """``CalmonDecisionMetricDrop``: where the pooled alerts speak (:func:`_pooled_speaks`;
    elsewhere it is :func:`calibrated_drop`'s), the decision's positives score lower than the
    reference's (p < 0.00135) and its likelihood part is below -5% of the reference's value
    of its metric, a fall of more than 5% (:func:`calmon.verdict.page`)."""
    if not _pooled_speaks(record):
        return False
    decision = record["decision"]
    reference = record["reference"]
    value = (
        None
        if reference is None
        else number(metric_value(reference["regular"], decision["metric"]))
    )
    return page(dict(decision), reference_value=value)


def pooled_prior_shift(record: WindowRecord) -> Direction | None:
    """``CalmonPriorShiftPooled``: "up" or "down" where the pooled alerts speak
    (:func:`_pooled_speaks`) and the decision's ratio moved by more than a factor 1.5 with a
    Wilson interval excluding the reference ratio, else None. None too where the window alone
    shows a shift (:func:`prior_shift`): that is ``CalmonPriorShift``'s, one alert, not two."""
    if not _pooled_speaks(record) or prior_shift(record) is not None:
        return None
    decision = record["decision"]
    return _ratio_shift(
        number(decision["positive_class_ratio"]),
        bounds(decision["positive_class_ratio_interval"]),
        _reference_prior(record),
    )


def calibrated_drop(record: WindowRecord) -> bool:
    """``CalmonCalibratedMetricDrop`` (:func:`calmon.verdict.calibrated_drop_holds`): AP
    calibrated at the reference prior below 95% of the reference's AP, and the likelihood part
    below 0 at one-sided 99% confidence."""
    at_reference = record["calibrated"]["reference"]
    calibrated = (
        None if at_reference is None else number(metric_value(at_reference, VERDICT_METRIC))
    )
    summary = record["reference"]
    reference = (
        None if summary is None else number(metric_value(summary["regular"], VERDICT_METRIC))
    )
    split = record["split"]
    parts = None if split is None else split_parts(split, VERDICT_METRIC)
    interval = None if parts is None else bounds(parts["likelihood_interval"])
    if calibrated is None or reference is None or interval is None:
        return False
    return calibrated_drop_holds(
        calibrated=calibrated, reference=reference, likelihood_interval=interval
    )


def _ratio_shift(
    ratio: float | None, interval: Bounds | None, reference: float | None
) -> Direction | None:
    """:func:`calmon.verdict.ratio_shift` where all three are known, else None."""
    if ratio is None or interval is None or reference is None:
        return None
    return ratio_shift(ratio, interval, reference)


def prior_shift(record: WindowRecord) -> Direction | None:
    """``CalmonPriorShift``: "up" or "down" when the window's ratio moved by more than a factor
    1.5 and its Wilson interval excludes the reference ratio, else None."""
    return _ratio_shift(
        number(record["prior"]), bounds(record["prior_interval"]), _reference_prior(record)
    )


def estimate_speaks(record: WindowRecord) -> Estimate | None:
    """The label-free estimate's verdict of a window (``estimated.verdict``) where it, not the
    labels, speaks for the window (:func:`calmon.verdict.speaking_estimate`); else None."""
    estimated = record["estimated"]
    return speaking_estimate(
        None if estimated is None else estimated["verdict"],
        labelled=record["n"],
        unlabelled=record["unlabelled"],
    )


def estimated_prior_shift(record: WindowRecord) -> Direction | None:
    """``CalmonPriorShiftEstimated``: "up" or "down" when the label-free ratio's interval lies
    wholly beyond the reference ratio times or divided by 1.5
    (:func:`calmon.verdict.estimated_shift`), the label-shift check holds and the window's
    labels do not decide yet; else None."""
    estimated = record["estimated"]
    if estimated is None:
        return None
    interval = bounds(estimated["positive_class_ratio_interval"])
    reference = _reference_prior(record)
    check = estimated["label_shift"]
    if interval is None or reference is None or check is None or check["holds"] is not True:
        return None
    if labels_decide(record["n"], record["unlabelled"]):
        return None
    return estimated_shift(interval, reference)


def scores_changed(record: WindowRecord) -> bool:
    """``CalmonScoresChangedUnexplained``: the label-shift check rejects (p below
    :data:`calmon.verdict.CHECK_LEVEL`)."""
    estimated = record["estimated"]
    check = None if estimated is None else estimated["label_shift"]
    p_value = None if check is None else number(check["p_value"])
    return p_value is not None and not check_holds(p_value)


def alerts(record: WindowRecord) -> list[str]:
    """The record-level alert states of a latest window, in words (empty when quiet), each
    naming the reference it compares with (:func:`calmon.words.reference_words`)."""
    out: list[str] = []
    if calibrated_drop(record):
        out.append("calibrated AP drop: the model got worse")
    if (direction := prior_shift(record)) is not None:
        out.append(f"prior shift: class ratio went {direction}")
    if (direction := estimated_prior_shift(record)) is not None:
        out.append(
            "estimated prior shift (no labels needed): class ratio went up, or negatives score "
            "like positives; labels will tell"
            if direction == "up"
            else "estimated fall (no labels needed): fewer positives, or positives scoring lower "
            "(a model that got worse looks the same); labels will tell"
        )
    if scores_changed(record):
        out.append(
            "scores changed in a way a class-ratio change does not explain: the model or its "
            "inputs changed, labels needed to tell how much"
        )
    against = f"{ALERT_DETAIL}against {reference_words(record['reference'])}"
    return [text + against for text in out] + decision_alerts(record)


def decision_alerts(record: WindowRecord) -> list[str]:
    """The alert states of a latest window's pooled decision, in words (empty when quiet),
    naming the reference the decision compares with."""
    out: list[str] = []
    if decision_drop(record):
        out.append("pooled AP drop: the model got worse over the pooled windows")
    if (direction := pooled_prior_shift(record)) is not None:
        out.append(f"pooled prior shift: class ratio of the pooled windows went {direction}")
    return [f"{text}{ALERT_DETAIL}{verdict_against(record)}" for text in out]


def _where(segments: Sequence[str], tracked: int) -> str:
    """Where an alert holds, after its words: nothing for all predictions alone (``*``),
    ``, in segment eu``, ``, in all predictions and all 6 segments`` or ``, in 2 of 6
    segments: eu, us`` (at most :data:`NAMED_SEGMENTS` names, the rest counted)."""
    named = [s for s in segments if s != ALL_SEGMENTS]
    if not named:
        return ""
    shown = ", ".join(named[:NAMED_SEGMENTS])
    if len(named) > NAMED_SEGMENTS:
        shown += f" and {len(named) - NAMED_SEGMENTS} more"
    if tracked == 1:
        counted = f"segment {shown}"
    elif len(named) == tracked:
        counted = f"all {tracked} segments"
    else:
        counted = f"{len(named)} of {tracked} segments: {shown}"
    return f", in {'all predictions and ' if ALL_SEGMENTS in segments else ''}{counted}"


def group_alerts(
    latest: Sequence[tuple[str, Sequence[str]]], *, tracked: int | None = None
) -> list[str]:
    """The alert states of a model's latest windows, given as (segment, its :func:`alerts`)
    pairs, one per latest window, each said once with the segments where it holds counted
    (:func:`_where`), in the order they first appear: one model's rows stay short however
    many segments it tracks. ``tracked``: how many segment windows the model has, when
    ``latest`` holds only those with alert states (by default, those in ``latest``)."""
    where: dict[str, list[str]] = {}
    for segment, texts in latest:
        for text in texts:
            where.setdefault(text, []).append(segment)
    if tracked is None:
        tracked = sum(1 for segment, _ in latest if segment != ALL_SEGMENTS)
    return [f"{text}{_where(segments, tracked)}" for text, segments in where.items()]


def segment_alerts(latest: Sequence[tuple[str, WindowRecord]]) -> list[str]:
    """:func:`group_alerts` of a model's latest windows given as (segment, record) pairs."""
    return group_alerts([(segment, alerts(record)) for segment, record in latest])
