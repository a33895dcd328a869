"""The evaluation of one window (or one segment of it) against its reference: the one entry
point the service calls per segment (:func:`evaluate_window`), giving everything its stored
record is built from (:class:`WindowEvaluation`).

The window's regular metrics, its calibrated ones at the configured π0 and at the reference's
prior, their 95% intervals, the drift split against the reference, the label-free estimate and
the advice, and the pooled decision with the trailing windows it pools (:class:`TrailingSet`);
the bootstrap seeds are drawn from the window's data (:func:`segment_seed`). What
each part means: ``docs/reference/metrics.md``; the record's fields: ``docs/reference/scheduler.md``
("The record").
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray
from calmon.catalogue import DECISION_METRIC
from calmon.metrics.advice import labels_measure_prior, window_advice
from calmon.metrics.decision import (
    decide,
    decision_from_split,
    finite_or_none,
    positives_shift,
)
from calmon.metrics.evaluation import SetSums, evaluate_prepared, evaluate_ranked
from calmon.metrics.intervals import Interval, bootstrap_intervals, wilson_interval
from calmon.metrics.label_free import LabelShiftReference, estimate_window, label_shift_reference
from calmon.metrics.pool import Pool
from calmon.metrics.prepared import PreparedSet, pi0_key, prepare
from calmon.metrics.ranking import Ranking
from calmon.metrics.resampling import cut_prepared, cut_with_fp
from calmon.metrics.split import drift_split, split_intervals_ranked
from calmon.verdict import OWN_PAGE_P

#: the level of every interval of a window's evaluation
LEVEL: Final = 0.95


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """The settings of a model the evaluation of its windows needs.

    Attributes:
        threshold: the decision threshold.
        score_kind: ``probability`` or ``score``.
        pi0: the configured π0 the calibrated metrics are given at, in their order.
        objective: what the advised threshold aims at (one key, as stored), None: no advice.
    """

    threshold: float
    score_kind: str
    pi0: tuple[float, ...]
    objective: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ReferenceSet:
    """The pooled reference set of a window, as the engine reads it.

    Attributes:
        ranking, sums: the pooled set, for the split and its intervals.
        evaluation: its regular metrics (:func:`calmon.metrics.evaluation.evaluate_ranked`).

    Its isotonic levels (:attr:`label_shift`) are built on first use: only the label-free
    estimate and the recalibration map read them, and a window whose labels measure its
    class ratio has no estimate, so a reference used only by such windows (a trailing one of
    a window or two, built anew for each window) never pays for them.
    """

    ranking: Ranking
    sums: SetSums
    evaluation: dict[str, Any]
    _levels: list[LabelShiftReference | None] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    @property
    def label_shift(self) -> LabelShiftReference | None:
        """Its isotonic levels for the label-free estimate
        (:func:`~calmon.metrics.label_free.label_shift_reference`), None without both classes;
        built once, on first use."""
        if not self._levels:
            self._levels.append(label_shift_reference(self.ranking))
        return self._levels[0]

    @property
    def n(self) -> int:
        """Labelled predictions in the reference set."""
        return self.ranking.n_pos + self.ranking.n_neg


@dataclass(frozen=True, slots=True)
class WindowSet:
    """The predictions of a window (or one segment of it).

    Attributes:
        prepared: its labelled predictions, each class sorted.
        unlabelled: the scores of its predictions without a label, in any order.
        name: what salts its bootstrap seeds besides its data (the segment's name).
    """

    prepared: PreparedSet
    unlabelled: FloatArray
    name: str


def window_set(
    scores: FloatArray, labels: npt.NDArray[np.int8], *, name: str, score_kind: str
) -> WindowSet:
    """The :class:`WindowSet` of ``scores`` and ``labels`` (-1: no label)."""
    labelled = labels >= 0
    return WindowSet(
        prepared=prepare(scores[labelled], labels[labelled], score_kind=score_kind),
        unlabelled=scores[~labelled],
        name=name,
    )


@dataclass(frozen=True, slots=True)
class TrailingSet:
    """The trailing windows a window's decision pools besides it.

    Attributes:
        positives, negatives: each trailing window's sorted positives and negatives.
        reference: the set the pooled one is compared with (for a trailing reference, the
            one of the oldest pooled window; for a fixed one, the window's own), None
            without one.
    """

    positives: Sequence[FloatArray]
    negatives: Sequence[FloatArray]
    reference: ReferenceSet | None


@dataclass(frozen=True, slots=True)
class WindowEvaluation:
    """What a window's record is built from (values as computed: NaN where undefined).

    Attributes:
        n, n_pos, prior: labelled predictions, positives among them, and their ratio.
        unlabelled: predictions without a label.
        prior_interval: the 95% Wilson interval of ``prior``.
        regular: the regular metrics.
        calibrated: the calibrated metrics keyed ``reference`` (at the reference's prior,
            None when it is not in (0, 1) or there is no usable reference), then
            :func:`~calmon.metrics.prepared.pi0_key` of each configured π0, in their order.
        intervals: ``{"regular": ..., "calibrated": ..., "absent": ...}``, keyed as the
            metrics; ``absent`` the reason of each None (``{"regular": {metric: code},
            "calibrated": {key: {metric: code} | None}}``, ABSENT_REASONS).
        reliability: the reliability table (probability models), else None.
        split: the drift split against the reference with its intervals, None without a
            usable reference (one with labelled predictions).
        estimated: the label-free estimate; None without a reference holding both classes
            or a scored prediction, and where the window's labels measure its class ratio
            (:func:`~calmon.metrics.advice.labels_measure_prior`): the estimate speaks
            only before labels do.
        advice: the advice for the configured objective, None without one.
        decision: the pooled decision (``docs/reference/metrics.md``, "Decisions at few positives"):
            the window's own split of DECISION_METRIC when it is pooled alone, else the
            split of the pooled set against the pooled reference.
        prepared: the window's labelled predictions, each class sorted.
        seed: the seed of its bootstrap draws (and of its decision's).
    """

    n: int
    n_pos: int
    prior: float | None
    unlabelled: int
    prior_interval: Interval
    regular: dict[str, Any]
    calibrated: dict[str, Any]
    intervals: dict[str, Any]
    reliability: Any
    split: dict[str, Any] | None
    estimated: dict[str, Any] | None
    advice: dict[str, Any] | None
    decision: dict[str, Any]
    prepared: PreparedSet
    seed: int


def segment_seed(segment: str, data: Sequence[FloatArray]) -> int:
    """The bootstrap seed of a window's segment: a stable hash (not Python's salted ``hash``)
    of the segment's name and the window's data (``data``: its sorted score arrays, which
    stand for the data's version: the labelled classes and every score for the bootstrap of
    the measured metrics, every score alone for the label-free estimate, which labels landing
    later must not move).

    A recomputation of the same data, in any process, gives the same intervals, and changed
    data new draws. The window's start and the model's name are left out on purpose: a stream
    sent again at another time or to another model (``calmon simulate --seed``, whose windows
    end at the present and which picks a fresh model name) holds the same data and must show
    the same intervals.
    """
    digest = hashlib.blake2b(segment.encode(), digest_size=8)
    for array in data:
        digest.update(array.size.to_bytes(8, "little"))
        digest.update(np.ascontiguousarray(array, dtype=np.float64).data)  # no copy
    return int.from_bytes(digest.digest(), "little") >> 1


def all_sorted(prepared: PreparedSet, unlabelled: FloatArray) -> FloatArray:
    """Every scored prediction of a window ascending (n,): only the unlabelled scores are
    sorted here; the classes, already sorted, are merged with them (a stable sort of three
    ascending runs is a merge, O(n))."""
    out: FloatArray = np.sort(
        np.concatenate((prepared.pos_sorted, prepared.neg_sorted, np.sort(unlabelled))),
        kind="stable",
    )
    return out


def evaluate_window(
    window: WindowSet,
    reference: ReferenceSet | None,
    config: WindowConfig,
    trailing: TrailingSet | None = None,
) -> WindowEvaluation:
    """Evaluate ``window`` against ``reference`` (None, or without labelled predictions: no
    split, no calibration at the reference's prior; its label-shift levels still serve the
    label-free estimate) with the model's settings ``config``; its decision pools
    ``trailing`` with it (None: the window alone)."""
    prepared = window.prepared
    usable = reference if reference is not None and reference.n > 0 else None
    pi0, reference_key = calibration_priors(config.pi0, usable)
    result = evaluate_prepared(
        prepared, threshold=config.threshold, pi0=pi0, score_kind=config.score_kind
    )
    every = all_sorted(prepared, window.unlabelled)
    seed = segment_seed(window.name, (prepared.pos_sorted, prepared.neg_sorted, every))
    intervals = bootstrap_intervals(
        prepared,
        threshold=config.threshold,
        pi0=pi0,
        level=LEVEL,
        seed=seed,
        score_kind=config.score_kind,
    )
    split = (
        None
        if usable is None
        else window_split(
            prepared=prepared, window=result, reference=usable, config=config, seed=seed
        )
    )
    unlabelled = int(window.unlabelled.size)
    estimated = (
        None
        if reference is None
        or labels_measure_prior(n=result["n"], n_pos=result["n_pos"], unlabelled=unlabelled)
        else estimate_window(
            reference.label_shift,
            every,
            threshold=config.threshold,
            pi0=list(config.pi0),
            seed=segment_seed(window.name, (every,)),
        )
    )
    advice = (
        None
        if config.objective is None
        else window_advice(
            objective=config.objective,
            threshold=config.threshold,
            prepared=prepared,
            result=result,
            unlabelled=unlabelled,
            reference=None if usable is None else usable.ranking,
            estimated=estimated,
        )
    )
    return WindowEvaluation(
        n=result["n"],
        n_pos=result["n_pos"],
        prior=result["prior"],
        unlabelled=unlabelled,
        prior_interval=wilson_interval(result["n_pos"], result["n"]),
        regular=result["regular"],
        calibrated=keyed(result["calibrated"], config.pi0, reference_key),
        intervals={
            "regular": intervals["regular"],
            "calibrated": keyed(intervals["calibrated"], config.pi0, reference_key),
            "absent": {
                "regular": intervals["absent"]["regular"],
                "calibrated": keyed(intervals["absent"]["calibrated"], config.pi0, reference_key),
            },
        },
        reliability=result.get("reliability"),
        split=split,
        estimated=estimated,
        advice=advice,
        decision=window_decision(
            prepared=prepared,
            split=split,
            reference=usable,
            trailing=trailing,
            config=config,
            seed=seed,
        ),
        prepared=prepared,
        seed=seed,
    )


def calibration_priors(
    configured: Sequence[float], reference: ReferenceSet | None
) -> tuple[list[float], str | None]:
    """The π0 a window is evaluated at: the ``configured`` ones, plus the prior of a usable
    ``reference`` when it lies in (0, 1); and that prior's key among the calibrated values
    (None when it is not among them)."""
    pi0 = [float(p) for p in configured]
    ref_prior: float | None = None if reference is None else reference.evaluation["prior"]
    if ref_prior is None or not 0.0 < ref_prior < 1.0:
        return pi0, None
    if float(ref_prior) not in pi0:
        pi0.append(float(ref_prior))
    return pi0, pi0_key(ref_prior)


def keyed(
    values: dict[str, Any], configured: Sequence[float], reference_key: str | None
) -> dict[str, Any]:
    """Calibrated values (or intervals) keyed "reference", then pi0_key(π0) per configured
    π0."""
    out: dict[str, Any] = {"reference": None if reference_key is None else values[reference_key]}
    for p in configured:
        out[pi0_key(p)] = values[pi0_key(p)]
    return out


def window_split(
    *,
    prepared: PreparedSet,
    window: dict[str, Any],
    reference: ReferenceSet,
    config: WindowConfig,
    seed: int,
) -> dict[str, Any]:
    """The drift split of a window's result against its reference, with the 95% intervals
    of both parts (``docs/reference/metrics.md``).

    ``window`` was evaluated with the reference prior among its π0; the reference, pooled and
    cached without calibrated values, is evaluated here at the window's prior (O(K) from its
    ranking). Both are needed only when both priors are in (0, 1); otherwise every part and
    interval is None.
    """
    window_prior, ref_prior = window["prior"], reference.evaluation["prior"]
    calibratable = all(p is not None and 0.0 < p < 1.0 for p in (window_prior, ref_prior))
    ref_result = reference.evaluation
    if calibratable:
        ref_result = evaluate_ranked(
            reference.ranking,
            reference.sums,
            threshold=config.threshold,
            pi0=(float(window_prior),),
            score_kind=config.score_kind,
        )
    split = drift_split(window, ref_result)
    bounds = (
        split_intervals_ranked(
            prepared.ranking,
            cut_prepared(prepared, config.threshold),
            reference.ranking,
            cut_with_fp(reference.ranking, config.threshold, reference.sums.fp),
            level=LEVEL,
            seed=seed,
        )
        if calibratable
        else {}
    )
    for name, parts in split.items():
        metric_bounds = bounds.get(name, {})
        parts["prior_interval"] = metric_bounds.get("prior")
        parts["likelihood_interval"] = metric_bounds.get("likelihood")
    return split


def window_decision(
    *,
    prepared: PreparedSet,
    split: dict[str, Any] | None,
    reference: ReferenceSet | None,
    trailing: TrailingSet | None,
    config: WindowConfig,
    seed: int,
) -> dict[str, Any]:
    """The decision of a window (see :attr:`WindowEvaluation.decision`): ``reference`` is
    the window's usable reference, ``split`` its split against it."""
    if trailing is None:
        return decision_from_split(
            n=prepared.ranking.n_pos + prepared.ranking.n_neg,
            n_pos=prepared.ranking.n_pos,
            reference_n=0 if reference is None else reference.n,
            reference_n_pos=0 if reference is None else reference.ranking.n_pos,
            parts=None if split is None else split.get(DECISION_METRIC),
            shift=None
            if reference is None
            else positives_shift(prepared.ranking, reference.ranking, (prepared.neg_sorted,)),
            reference_value=None
            if reference is None
            else finite_or_none(reference.evaluation["regular"].get(DECISION_METRIC)),
            page_p=OWN_PAGE_P,
        )
    pool = Pool(
        np.sort(np.concatenate([prepared.pos_sorted, *trailing.positives])),
        threshold=config.threshold,
        score_kind=config.score_kind,
    )
    for negatives in (prepared.neg_sorted, *trailing.negatives):
        pool.add_negatives(negatives)
    usable = trailing.reference
    if usable is not None and usable.n == 0:
        usable = None
    return decide(
        pool.ranking(),
        pool.sums,
        None if usable is None else usable.ranking,
        None if usable is None else usable.sums,
        threshold=config.threshold,
        score_kind=config.score_kind,
        seed=seed,
        negatives=(prepared.neg_sorted, *trailing.negatives),
    )
