"""`evaluate`: every metric of one evaluation set as a plain JSON-able dict, and its validation.

The set is validated once, each class is sorted once, and every number comes from those two
sorted arrays: the curve metrics through the :class:`~app.metrics.ranking.Ranking`, the
thresholded counts and the probability metrics through binary searches and slice sums.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from app.arrays import BoolArray, FloatArray
from app.metrics.curves import curve_metrics
from app.metrics.probability import (
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
from app.metrics.ranking import Ranking, rank_sorted
from app.metrics.thresholded import threshold_metrics

ScoreKind = Literal["probability", "score"]

SCORE_KINDS = ("probability", "score")
RELIABILITY_STRATEGIES = ("uniform", "quantile")
#: Regular metrics in report order; the last seven exist only for probability models.
REGULAR_METRICS = (
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
CALIBRATED_METRICS = (
    "precision",
    "f1",
    "average_precision",
    "best_f1",
    "best_f1_threshold",
    "pr_gain_auc",
)

#: smallest π0 accepted: 2^126·(1 - π0)/π0 is finite from here on (see :func:`check_pi0`)
MIN_PI0 = 4.8e-271


@dataclass(frozen=True, slots=True)
class PreparedSet:
    """A validated evaluation set, sorted once.

    Attributes:
        scores: (n,) float64, finite (in [0, 1] for probability models).
        is_pos: (n,) bool, the labels.
        pos_sorted, neg_sorted: (n_pos,), (n_neg,) each class's scores ascending.
        ranking: the positive blocks built from them.
    """

    scores: FloatArray
    is_pos: BoolArray
    pos_sorted: FloatArray
    neg_sorted: FloatArray
    ranking: Ranking


def check_options(
    *,
    threshold: float,
    pi0: Sequence[float],
    score_kind: str,
    reliability_bins: int = ECE_BINS,
    reliability_strategy: str = "uniform",
) -> tuple[float, ...]:
    """Validate the options of :func:`evaluate`; return the π0 values as floats.

    Raises ValueError naming the option (e.g. "pi0[1] is 1.5; each pi0 must be in (0, 1)").
    """
    if score_kind not in SCORE_KINDS:
        raise ValueError(f"score_kind is {score_kind!r}; must be 'probability' or 'score'")
    if reliability_strategy not in RELIABILITY_STRATEGIES:
        raise ValueError(
            f"reliability_strategy is {reliability_strategy!r}; must be 'uniform' or 'quantile'"
        )
    if (
        isinstance(reliability_bins, bool)
        or not isinstance(reliability_bins, int | np.integer)
        or reliability_bins < 1
    ):
        raise ValueError(f"reliability_bins is {reliability_bins!r}; must be an integer ≥ 1")
    try:
        tau = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold is {threshold!r}; must be a finite number") from None
    if not math.isfinite(tau):
        raise ValueError(f"threshold is {tau!r}; must be a finite number")
    if isinstance(pi0, str | bytes) or not isinstance(pi0, Sequence | np.ndarray):
        raise ValueError(f"pi0 is {pi0!r}; must be a list of numbers in (0, 1), such as [0.5]")
    return tuple(check_pi0(value, where=f"pi0[{i}]") for i, value in enumerate(pi0))


def check_pi0(value: object, *, where: str = "pi0") -> float:
    """One reference prior π0 as a float, or ValueError saying what is wrong with ``where``.

    π0 must be a real number (not a string or a bool), a normal float in (0, 1), and such that
    the calibration ratio r = π(1 - π0)/(π0(1 - π)) stays finite even multiplied by a count
    of false positives, for any set: π/(1 - π) ≤ n - 1 and FP ≤ n with n < 2^63 rows, so
    r·FP < 2^126·(1 - π0)/π0, which must be finite. That refuses subnormals and π0 below
    :data:`MIN_PI0` (4.8e-271), where r·FP would overflow and the calibrated metrics would mix 0 and
    undefined values. Every entry point (:func:`evaluate`, the model configuration of the API,
    the CLI's ``--pi0``) validates π0 with this function.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{where} is {value!r}; each pi0 must be a number in (0, 1)")
    p = float(value)
    if not 0.0 < p < 1.0:
        raise ValueError(f"{where} is {p!r}; each pi0 must be in (0, 1)")
    if p < sys.float_info.min:
        raise ValueError(f"{where} is {p!r}; each pi0 must be a normal float, not subnormal")
    if p < MIN_PI0:
        raise ValueError(
            f"{where} is {p!r}; each pi0 must be at least {MIN_PI0!r}, or the calibration "
            "ratio overflows"
        )
    return p


def prepare(scores: npt.ArrayLike, labels: npt.ArrayLike, *, score_kind: str) -> PreparedSet:
    """Validate ``scores`` and ``labels`` and sort each class once.

    Raises ValueError saying what and where: non-1-D arrays, length mismatch, a label other
    than 0/1 ("labels[3] is 2; labels must be 0 or 1"), a NaN or infinite score
    ("scores[17] is nan; scores must be finite"), a probability score outside [0, 1].
    """
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scores must be numbers: {exc}") from None
    y = np.asarray(labels)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {s.shape}")
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {y.shape}")
    if s.size != y.size:
        raise ValueError(f"scores has {s.size} values but labels has {y.size}")
    is_pos = _label_mask(y)
    pos_sorted = np.sort(s[is_pos])
    neg_sorted = s[~is_pos]
    neg_sorted.sort()
    ends = [arr[i] for arr in (pos_sorted, neg_sorted) if arr.size for i in (0, -1)]
    if ends:
        # NaN sorts last and ±inf sit at the ends, so the ends of each class decide.
        if not all(math.isfinite(v) for v in ends):
            bad = int(np.flatnonzero(~np.isfinite(s))[0])
            raise ValueError(f"scores[{bad}] is {s[bad].item()!r}; scores must be finite")
        if score_kind == "probability" and (min(ends) < 0.0 or max(ends) > 1.0):
            bad = int(np.flatnonzero((s < 0.0) | (s > 1.0))[0])
            raise ValueError(
                f"scores[{bad}] is {s[bad].item()!r}; probability scores must be in [0, 1]"
            )
    return PreparedSet(
        scores=s,
        is_pos=is_pos,
        pos_sorted=pos_sorted,
        neg_sorted=neg_sorted,
        ranking=rank_sorted(pos_sorted, neg_sorted),
    )


def _label_mask(y: npt.NDArray[Any]) -> BoolArray:
    if y.dtype == np.bool_:
        return y
    with np.errstate(invalid="ignore"):
        try:
            is_pos = np.asarray(y == 1, dtype=bool)
            is_neg_count = int(np.count_nonzero(y == 0))
        except (TypeError, ValueError):
            is_pos = np.zeros(y.shape, dtype=bool)
            is_neg_count = -1
    if is_neg_count + int(np.count_nonzero(is_pos)) != y.size:
        good = np.zeros(y.shape, dtype=bool)
        for value in (0, 1):
            with contextlib.suppress(TypeError, ValueError):
                good |= np.asarray(y == value, dtype=bool)
        bad = int(np.flatnonzero(~good)[0])
        raise ValueError(f"labels[{bad}] is {y[bad].item()!r}; labels must be 0 or 1")
    return is_pos


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
    """Every metric of ``docs/metrics.md`` for one evaluation set, as a JSON-able dict.

    ``scores`` (n,) finite (in [0, 1] when ``score_kind`` is "probability"), ``labels`` (n,)
    0/1; a row is predicted positive iff score ≥ ``threshold``. Returns::

        {"n", "n_pos", "n_neg", "prior",
         "regular": {metric: float | None},               # REGULAR_METRICS
         "calibrated": {repr(float(pi0)): {metric: ...}},  # CALIBRATED_METRICS
         "reliability": [{"lower", "upper", "count", "mean_score", "fraction_positive"}],
         "intervals": {"regular": {metric: [lo, hi] | None}, "calibrated": {...}}}

    Probability metrics and ``reliability`` exist only for probability models
    (``reliability_bins`` bins, equal-width or at score quantiles; an empty set has no
    quantile bins). ``intervals`` (bootstrap, see :mod:`app.metrics.intervals`, seeded by
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
        from app.metrics.intervals import bootstrap_intervals

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
        calibrated[repr(float(p))] = {name: _number(merged[name]) for name in CALIBRATED_METRICS}
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
