"""`evaluate`: every metric of one evaluation set as a plain JSON-able dict.

The set is validated and each class sorted once (:mod:`calmon.metrics.prepared`), and every
number comes from those two sorted arrays: the curve metrics through the
:class:`~calmon.metrics.ranking.Ranking`, the thresholded counts and the probability metrics
through binary searches and slice sums.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray
from calmon.catalogue import CALIBRATED_METRICS, REGULAR_METRICS
from calmon.metrics.curves import curve_metrics
from calmon.metrics.intervals import bootstrap_intervals
from calmon.metrics.prepared import PreparedSet, ScoreKind, check_options, pi0_key, prepare
from calmon.metrics.probability import (
    ECE_BINS,
    BinTable,
    ProbabilitySums,
    bin_table,
    metrics_from_sums,
    probability_sums,
    quantile_edges,
    reliability,
    uniform_edges,
)
from calmon.metrics.ranking import Ranking
from calmon.metrics.thresholded import threshold_metrics


def evaluate(
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    threshold: float = 0.5,
    pi0: Sequence[float] = (),
    score_kind: ScoreKind = "probability",
    reliability_bins: int = ECE_BINS,
    reliability_strategy: Literal["uniform", "quantile"] = "uniform",
    intervals: bool = False,
    seed: int | None = None,
) -> dict[str, Any]:
    """Every metric of ``docs/reference/metrics.md`` for one evaluation set, as a JSON-able dict.

    ``scores`` (n,) finite (in [0, 1] when ``score_kind`` is "probability"), ``labels`` (n,)
    0/1; a row is predicted positive iff score ≥ ``threshold``. Returns::

        {"n", "n_pos", "n_neg", "prior",
         "regular": {metric: float | None},               # REGULAR_METRICS
         "calibrated": {pi0_key(pi0): {metric: ...}},  # CALIBRATED_METRICS
         "reliability": [{"lower", "upper", "count", "mean_score", "fraction_positive"}],
         "intervals": {"regular": {metric: [lo, hi] | None}, "calibrated": {...}}}

    Probability metrics and ``reliability`` exist only for probability models
    (``reliability_bins`` bins, equal-width or at score quantiles; an empty set has no
    quantile bins). ``intervals`` (bootstrap, see :mod:`calmon.metrics.intervals`, seeded by
    ``seed``) only when asked. Undefined values are None; an empty set or a set with one
    class is not an error. Bad arrays or options raise ValueError naming the index or field.
    """
    pi0_values = check_options(
        threshold=threshold,
        pi0=pi0,
        score_kind=score_kind,
        reliability_bins=reliability_bins,
        reliability_strategy=reliability_strategy,
    )
    prepared = prepare(scores, labels, score_kind=score_kind)
    result = evaluate_prepared(
        prepared,
        threshold=float(threshold),
        pi0=pi0_values,
        score_kind=score_kind,
        reliability_bins=reliability_bins,
        reliability_strategy=reliability_strategy,
    )
    if intervals:
        result["intervals"] = bootstrap_intervals(
            prepared,
            threshold=float(threshold),
            pi0=pi0_values,
            seed=seed,
            score_kind=score_kind,
        )
    return result


def evaluate_prepared(
    prepared: PreparedSet,
    *,
    threshold: float,
    pi0: Sequence[float],
    score_kind: str,
    reliability_bins: int = ECE_BINS,
    reliability_strategy: str = "uniform",
) -> dict[str, Any]:
    """:func:`evaluate` on an already validated and sorted set (options already checked)."""
    pos_sorted, neg_sorted = prepared.pos_sorted, prepared.neg_sorted
    ece_table = (
        bin_table(pos_sorted, neg_sorted, uniform_edges(ECE_BINS))
        if score_kind == "probability"
        else None
    )
    sums = set_sums(
        pos_sorted, neg_sorted, threshold=threshold, score_kind=score_kind, ece_table=ece_table
    )
    result = evaluate_ranked(
        prepared.ranking, sums, threshold=threshold, pi0=pi0, score_kind=score_kind
    )
    if ece_table is not None:
        if reliability_strategy == "uniform" and reliability_bins == ECE_BINS:
            result["reliability"] = reliability(ece_table)
        elif reliability_strategy == "uniform":
            edges = uniform_edges(reliability_bins)
            result["reliability"] = reliability(bin_table(pos_sorted, neg_sorted, edges))
        elif prepared.ranking.n_pos + prepared.ranking.n_neg:
            edges = quantile_edges(prepared.scores, reliability_bins)
            result["reliability"] = reliability(bin_table(pos_sorted, neg_sorted, edges))
        else:
            result["reliability"] = []
    return result


@dataclass(frozen=True, slots=True)
class SetSums:
    """Everything the metrics of a set need besides its :class:`Ranking`; additive over
    disjoint sets, so a pooled set's sums are the sums of its parts' sums.

    Attributes:
        tp, fp: positives and negatives with s ≥ the threshold the sums were made for.
        pos_sum, neg_sum: Σ s over each class (``ks_abc``).
        probability: the :class:`ProbabilitySums` of a probability model's set, else None.
    """

    tp: int
    fp: int
    pos_sum: float
    neg_sum: float
    probability: ProbabilitySums | None

    def __add__(self, other: SetSums) -> SetSums:
        if (self.probability is None) != (other.probability is None):
            raise ValueError("cannot add the sums of a probability set and of a score set")
        probability = (
            None
            if self.probability is None or other.probability is None
            else self.probability + other.probability
        )
        return SetSums(
            tp=self.tp + other.tp,
            fp=self.fp + other.fp,
            pos_sum=self.pos_sum + other.pos_sum,
            neg_sum=self.neg_sum + other.neg_sum,
            probability=probability,
        )


def set_sums(
    pos_sorted: FloatArray,
    neg_sorted: FloatArray,
    *,
    threshold: float,
    score_kind: str,
    ece_table: BinTable | None = None,
) -> SetSums:
    """The :class:`SetSums` of a set given each class's validated scores, ascending (either
    may be empty, e.g. one part of a pooled set). ``ece_table``: the equal-width ECE table
    of a probability set when already built."""
    return SetSums(
        tp=pos_sorted.size - int(np.searchsorted(pos_sorted, threshold, side="left")),
        fp=neg_sorted.size - int(np.searchsorted(neg_sorted, threshold, side="left")),
        pos_sum=float(pos_sorted.sum()),
        neg_sum=float(neg_sorted.sum()),
        probability=(
            probability_sums(pos_sorted, neg_sorted, ece_table=ece_table)
            if score_kind == "probability"
            else None
        ),
    )


def evaluate_ranked(
    ranking: Ranking,
    sums: SetSums,
    *,
    threshold: float,
    pi0: Sequence[float],
    score_kind: str,
) -> dict[str, Any]:
    """Every metric of a set given as its :class:`Ranking` and :class:`SetSums` (made for
    ``threshold``), without its rows: the same dict as :func:`evaluate` minus
    ``reliability`` and ``intervals``. Used for pooled sets (reference periods) that are
    never held in memory at once; options must already be checked."""
    n_pos, n_neg = ranking.n_pos, ranking.n_neg
    n = n_pos + n_neg
    at_threshold = threshold_metrics(sums.tp, sums.fp, n_pos, n_neg, pi0=pi0)
    curves = curve_metrics(
        ranking.thresholds,
        ranking.pos,
        ranking.neg_tied,
        ranking.neg_above,
        ranking.neg_below,
        pi0=pi0,
    )
    values: dict[str, Any] = {**at_threshold.regular, **curves.regular}
    values["ks_abc"] = sums.pos_sum / n_pos - sums.neg_sum / n_neg if n_pos and n_neg else None
    if score_kind == "probability" and sums.probability is not None:
        values.update(metrics_from_sums(sums.probability))
    calibrated: dict[str, dict[str, float | None]] = {}
    for p in pi0:
        merged = {**at_threshold.calibrated[float(p)], **curves.calibrated[float(p)]}
        calibrated[pi0_key(p)] = {name: _number(merged[name]) for name in CALIBRATED_METRICS}
    return {
        "n": n,
        "n_pos": n_pos,
        "n_neg": n_neg,
        "prior": n_pos / n if n else None,
        "regular": {name: _number(values[name]) for name in REGULAR_METRICS if name in values},
        "calibrated": calibrated,
    }


def _number(value: Any) -> float | None:
    """A plain float, or None for NaN / None."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number
