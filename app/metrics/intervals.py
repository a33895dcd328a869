"""Confidence intervals for one evaluation set, and the bootstrap the drift split's intervals use.

Method (``docs/intervals.md``): a Poisson bootstrap drawn per positive block of a
:class:`~app.metrics.ranking.Ranking`. Giving every row an independent Poisson(1) weight is the
Poisson bootstrap; the summed weight of a group of m exchangeable rows is Poisson(m), and the
curve metrics only see rows through their block counts, so drawing one Poisson(count) per
block and per count kind reproduces the row-level replicate distribution exactly, at cost
O(B·K) instead of O(B·n). The decision threshold τ may fall inside a run of negatives between
two blocks; that run is split into its part ≥ τ and its part < τ, each drawn on its own, so
TP(τ), FP(τ) of a replicate come from the same draws as its curves.

Intervals are bias-corrected normal intervals on a scale where the metric is unbounded (logit
for metrics in [0, 1], log(1 - x) for AUPRG, which is ≤ 1; the identity for likelihood
differences), using the replicates' standard deviation and mean on that scale; percentile
intervals where the scale is infinite (a value at 0 or 1). The metrics that are plain means
(Brier scores, log loss, ``ks_abc``) get normal-approximation intervals from each class's
sorted scores (O(n), or one term per distinct score when ties are heavy).

Everything here is pure NumPy; replicates are processed in chunks of bounded size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from app.metrics.curves import curve_metrics
from app.metrics.evaluation import PreparedSet
from app.metrics.poisson import poisson
from app.metrics.ranking import FloatArray, IntArray, Ranking, distinct_runs
from app.metrics.thresholded import threshold_metrics

Interval = list[float] | None
Labels = npt.NDArray[np.integer] | npt.NDArray[np.bool_]

MIN_REPLICATES = 100
MAX_REPLICATES = 400
REPLICATE_CELLS = 1_000_000
"""Default replicate count B = REPLICATE_CELLS // K clipped to [MIN_REPLICATES,
MAX_REPLICATES]: every set with up to 10^4 positive blocks costs at most about 10^6
(replicate, block) cells, and small sets get more replicates for free. The intervals only need
the replicates' mean and standard deviation (not tail quantiles), which 100 replicates give to
within a few percent of the interval's width."""

MIN_DEFINED_FRACTION = 0.9
"""An interval is only reported when at least this share of the replicates define the metric
(e.g. hold both classes); below it the replicate distribution says little about the set."""

CHUNK_CELLS = 1 << 17
"""Replicates are drawn and evaluated in chunks of about this many (replicate, block) cells
(at least one replicate): each of the dozen or so arrays a chunk passes through is then about
1 MiB and stays in cache, which makes the bootstrap 1.5-2 times faster than chunks of 10^6
cells, and the working memory stays near 50 MB whatever K and B are."""

REGULAR_METRICS = (
    "precision",
    "recall",
    "fpr",
    "f1",
    "roc_auc",
    "average_precision",
    "best_f1",
    "pr_gain_auc",
    "ks",
)
CALIBRATED_METRICS = ("precision", "f1", "average_precision", "best_f1", "pr_gain_auc")
MEAN_METRICS = ("brier", "brier_pos", "brier_neg", "log_loss", "brier_skill")
"""Normal-approximation intervals, for ``score_kind="probability"`` only (plus ``ks_abc``)."""

_CURVE_REGULAR = ("roc_auc", "average_precision", "best_f1", "pr_gain_auc", "ks")
_CURVE_CALIBRATED = ("average_precision", "best_f1", "pr_gain_auc")
_THRESHOLD_REGULAR = ("precision", "recall", "fpr", "f1")
_THRESHOLD_CALIBRATED = ("precision", "f1")
_LOG_LOSS_EPS = 1e-15

Values = dict[str, FloatArray]


@dataclass(frozen=True, slots=True)
class ThresholdCut:
    """Where the decision threshold τ falls in a :class:`Ranking`.

    Attributes:
        blocks: number m of positive blocks whose threshold is ≥ τ; they count whole towards
            TP(τ) and FP(τ).
        neg_hi, neg_lo: the negatives of the run just below those blocks (``neg_above[m]``,
            or ``neg_below`` when m = K) with s ≥ τ and with s < τ. ``neg_hi`` is 0 when τ is
            itself a block threshold.
    """

    blocks: int
    neg_hi: int
    neg_lo: int


@dataclass(frozen=True, slots=True)
class Replicates:
    """B bootstrap replicates of a :class:`Ranking`, as block counts.

    Attributes:
        pos, neg_tied, neg_above: shape (B, K), the replicate counts of each block (may be 0).
        neg_below: shape (B,).
        tp, fp: shape (B,), positives and negatives with s ≥ τ in each replicate.
    """

    pos: IntArray
    neg_tied: IntArray
    neg_above: IntArray
    neg_below: IntArray
    tp: IntArray
    fp: IntArray

    @property
    def n_pos(self) -> IntArray:
        """Shape (B,): positives of each replicate."""
        total: IntArray = np.sum(self.pos, axis=-1)
        return total

    @property
    def n_neg(self) -> IntArray:
        """Shape (B,): negatives of each replicate."""
        total: IntArray = np.sum(self.neg_tied, axis=-1) + np.sum(self.neg_above, axis=-1)
        return total + self.neg_below


def cut_at(scores: FloatArray, labels: Labels, ranking: Ranking, threshold: float) -> ThresholdCut:
    """Locate ``threshold`` in ``ranking`` (built from the same ``scores`` (n,), ``labels`` (n,)).

    The ranking does not keep where negatives sit inside a run between two blocks, so the
    negatives with s ≥ τ are counted once from the raw arrays (O(n)).
    """
    fp = int(np.count_nonzero((scores >= threshold) & ~labels.astype(bool, copy=False)))
    return cut_with_fp(ranking, threshold, fp)


def cut_prepared(prepared: PreparedSet, threshold: float) -> ThresholdCut:
    """Locate ``threshold`` in a prepared set's ranking: its negatives with s ≥ τ are found by
    binary search in the sorted negatives (O(log n))."""
    neg = prepared.neg_sorted
    fp = neg.size - int(np.searchsorted(neg, threshold, side="left"))
    return cut_with_fp(prepared.ranking, threshold, fp)


def cut_with_fp(ranking: Ranking, threshold: float, fp: int) -> ThresholdCut:
    """Locate ``threshold`` in ``ranking`` given ``fp``, the set's negatives with s ≥ τ (for
    a set that is not held as arrays, such as a pooled reference)."""
    k = ranking.thresholds.size
    blocks = int(np.count_nonzero(ranking.thresholds >= threshold))
    fp_blocks = int(np.sum(ranking.neg_above[:blocks]) + np.sum(ranking.neg_tied[:blocks]))
    run = int(ranking.neg_above[blocks]) if blocks < k else ranking.neg_below
    neg_hi = fp - fp_blocks
    return ThresholdCut(blocks=blocks, neg_hi=neg_hi, neg_lo=run - neg_hi)


def observed(ranking: Ranking, cut: ThresholdCut) -> Replicates:
    """The set itself as a single replicate (B = 1), so point values take the replicate path."""
    m = cut.blocks
    tp = int(np.sum(ranking.pos[:m]))
    fp = int(np.sum(ranking.neg_above[:m]) + np.sum(ranking.neg_tied[:m])) + cut.neg_hi
    return Replicates(
        pos=ranking.pos[None, :],
        neg_tied=ranking.neg_tied[None, :],
        neg_above=ranking.neg_above[None, :],
        neg_below=np.array([ranking.neg_below], dtype=np.int64),
        tp=np.array([tp], dtype=np.int64),
        fp=np.array([fp], dtype=np.int64),
    )


def draw_replicates(
    ranking: Ranking, cut: ThresholdCut, *, size: int, rng: np.random.Generator
) -> Replicates:
    """Draw ``size`` Poisson-bootstrap replicates of ``ranking`` in O(size·K).

    Each count (every block's positives, tied negatives, negatives above, the negatives
    below the last block) becomes an independent Poisson draw with that count as mean; the run
    cut by τ is drawn as two independent parts, whose sum is again Poisson(run). The replicate
    distribution is exactly that of giving each row a Poisson(1) weight.
    """
    m = cut.blocks
    k = ranking.thresholds.size
    pos = poisson(rng, ranking.pos, size)
    neg_tied = poisson(rng, ranking.neg_tied, size)
    above_mean = ranking.neg_above.copy()
    if m < k:
        above_mean[m] = 0
    neg_above = poisson(rng, above_mean, size)
    neg_hi = rng.poisson(cut.neg_hi, size=size).astype(np.int64, copy=False)
    neg_lo = rng.poisson(cut.neg_lo, size=size).astype(np.int64, copy=False)
    if m < k:
        neg_above[:, m] = neg_hi + neg_lo
        neg_below = rng.poisson(ranking.neg_below, size=size).astype(np.int64, copy=False)
    else:
        neg_below = neg_hi + neg_lo
    tp = np.sum(pos[:, :m], axis=-1)
    fp = np.sum(neg_above[:, :m], axis=-1) + np.sum(neg_tied[:, :m], axis=-1) + neg_hi
    return Replicates(
        pos=pos, neg_tied=neg_tied, neg_above=neg_above, neg_below=neg_below, tp=tp, fp=fp
    )


def default_replicates(blocks: int) -> int:
    """B for a set with ``blocks`` positive blocks (see REPLICATE_CELLS)."""
    return min(MAX_REPLICATES, max(MIN_REPLICATES, REPLICATE_CELLS // max(1, blocks)))


def _replicate_chunks(
    ranking: Ranking, cut: ThresholdCut, *, replicates: int, rng: np.random.Generator
) -> Iterator[Replicates]:
    """``replicates`` draws of :func:`draw_replicates`, in chunks of about CHUNK_CELLS cells."""
    rows = max(1, CHUNK_CELLS // max(1, ranking.thresholds.size))
    for start in range(0, replicates, rows):
        yield draw_replicates(ranking, cut, size=min(rows, replicates - start), rng=rng)


def evaluate_replicates(
    thresholds: FloatArray, reps: Replicates, pi0: Sequence[float]
) -> tuple[Values, dict[float, Values]]:
    """Regular and calibrated (per π0) values of each replicate: ({name: (B,)}, {π0: {...}})."""
    pi0s = [float(p) for p in pi0]
    curves = curve_metrics(
        thresholds, reps.pos, reps.neg_tied, reps.neg_above, reps.neg_below, pi0=pi0s
    )
    at_tau = threshold_metrics(reps.tp, reps.fp, reps.n_pos, reps.n_neg, pi0=pi0s)
    curve_reg, tau_reg = curves.regular, at_tau.regular
    curve_cal, tau_cal = curves.calibrated, at_tau.calibrated
    regular = {name: np.asarray(curve_reg[name], dtype=np.float64) for name in _CURVE_REGULAR}
    regular |= {name: np.asarray(tau_reg[name], dtype=np.float64) for name in _THRESHOLD_REGULAR}
    calibrated: dict[float, Values] = {}
    for p in pi0s:
        values = {name: np.asarray(curve_cal[p][name], np.float64) for name in _CURVE_CALIBRATED}
        values |= {name: np.asarray(tau_cal[p][name], np.float64) for name in _THRESHOLD_CALIBRATED}
        calibrated[p] = values
    return regular, calibrated


def _logit(x: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.log(x) - np.log1p(-x)
    return out


def _expit(y: FloatArray) -> FloatArray:
    out: FloatArray = 0.5 * (1.0 + np.tanh(0.5 * y))
    return out


def _log_gap(x: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.log1p(-x)
    return out


def _from_log_gap(y: FloatArray) -> FloatArray:
    out: FloatArray = -np.expm1(y)
    return out


def _identity(x: FloatArray) -> FloatArray:
    return x


Scale = tuple[Callable[[FloatArray], FloatArray], Callable[[FloatArray], FloatArray]]
UNIT: Scale = (_logit, _expit)
"""Metrics in [0, 1]."""
BELOW_ONE: Scale = (_log_gap, _from_log_gap)
"""Metrics ≤ 1 without a lower bound (AUPRG)."""
REAL: Scale = (_identity, _identity)
"""Differences of metrics (the parts of a drift split, :mod:`app.metrics.split`)."""


def _scale(name: str) -> Scale:
    return BELOW_ONE if name == "pr_gain_auc" else UNIT


def replicate_interval(values: FloatArray, point: float, *, level: float, scale: Scale) -> Interval:
    """The interval at ``level`` from the replicate ``values`` (B,) of a metric valued ``point``.

    On the scale g = ``scale[0]``: centre g(point) - (mean g(θ*) - g(point)) (the bootstrap
    estimate of the bias removed), half-width z·sd(g(θ*)), mapped back with ``scale[1]``. When
    g is infinite at the point or at a replicate (a value on the bound, e.g. recall 1),
    the percentile interval of the replicates instead. None when ``point`` is undefined or
    fewer than MIN_DEFINED_FRACTION of the replicates are defined (NaN).
    """
    if not math.isfinite(point) or values.size == 0:
        return None
    defined = values[np.isfinite(values)]
    if defined.size < max(2, MIN_DEFINED_FRACTION * values.size):
        return None
    forward, back = scale
    g_point = forward(np.array([point]))
    g_values = forward(defined)
    if np.isfinite(g_point[0]) and np.all(np.isfinite(g_values)):
        z = NormalDist().inv_cdf(0.5 + level / 2)
        centre = 2 * g_point[0] - float(np.mean(g_values))
        half = z * float(np.std(g_values, ddof=1))
        lo, hi = sorted(float(x) for x in back(np.array([centre - half, centre + half])))
        return [lo, hi]
    alpha = 1.0 - level
    q_lo, q_hi = np.quantile(defined, [alpha / 2, 1 - alpha / 2])
    return [float(q_lo), float(q_hi)]


def _check(level: float, replicates: int | None) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if replicates is not None and replicates < 2:
        raise ValueError(f"replicates must be ≥ 2, got {replicates}")


def _normal_interval(total: float, squares: float, m: int, z: float) -> Interval:
    """mean ± z·sd/√m of m values given their sum and sum of squares (the terms here are
    bounded or logs, far from cancellation); None below two values."""
    if m < 2:
        return None
    mean = total / m
    variance = max(0.0, (squares - total * mean) / (m - 1))
    half = z * math.sqrt(variance / m)
    return [mean - half, mean + half]


Weighted = tuple[FloatArray, IntArray | None]
"""A class's scores as (values, counts): its distinct scores and their counts when ties make
that cheaper, else the sorted scores themselves with counts None."""


def _weighted(sorted_scores: FloatArray) -> Weighted:
    """One pass over ascending ``sorted_scores`` deciding how the sums below run over them."""
    runs = distinct_runs(sorted_scores, max_runs=sorted_scores.size // 8)
    return (sorted_scores, None) if runs is None else runs


def _term_sums(scores: Weighted, term: Callable[[FloatArray], FloatArray]) -> tuple[float, float]:
    """Σ term(s) and Σ term(s)² over a class (one term per distinct score when weighted)."""
    values, counts = scores
    terms = term(values)
    weighted = terms if counts is None else terms * counts
    return float(weighted.sum()), float(np.einsum("i,i->", weighted, terms))


def _mean_var(scores: Weighted, m: int) -> tuple[float, float]:
    """Mean and sample variance of a class of m ≥ 2 scores, in two passes (scores may sit
    far from 0, where a sum of squares would cancel)."""
    values, counts = scores
    if counts is None:
        return float(np.mean(values)), float(np.var(values, ddof=1))
    mean = float(np.dot(values, counts)) / m
    deviation = values - mean
    return mean, float(np.einsum("i,i,i->", deviation, deviation, counts)) / (m - 1)


def _clip(values: FloatArray) -> FloatArray:
    clipped: FloatArray = np.clip(values, _LOG_LOSS_EPS, 1 - _LOG_LOSS_EPS)
    return clipped


def mean_intervals(
    pos_sorted: FloatArray,
    neg_sorted: FloatArray,
    *,
    score_kind: str,
    level: float = 0.95,
) -> dict[str, Interval]:
    """Normal-approximation intervals for the metrics that are means of per-row terms, given
    each class's scores ascending (``PreparedSet.pos_sorted``, ``neg_sorted``).

    ``ks_abc`` = mean(s | y=1) - mean(s | y=0): the two means are independent, so its
    standard error is √(var₁/n_pos + var₀/n_neg). For ``score_kind="probability"`` also
    ``brier`` (terms (s-y)²), ``brier_pos`` ((s-1)² over positives), ``brier_neg`` (s² over
    negatives) and ``log_loss`` (-y log s - (1-y) log(1-s), s clipped to [1e-15, 1 - 1e-15]),
    each clipped to its range ([0, 1] for Brier scores, [0, ∞) for log loss), and
    ``brier_skill`` by the delta method (:func:`_brier_skill_interval`). None when a needed
    class has fewer than two rows. O(n), or O(distinct scores) for heavily tied sets.
    """
    _check(level, None)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    pos, neg = pos_sorted, neg_sorted
    pos_w, neg_w = _weighted(pos), _weighted(neg)
    out: dict[str, Interval] = {"ks_abc": None}
    if pos.size >= 2 and neg.size >= 2:
        (pos_mean, pos_var) = _mean_var(pos_w, pos.size)
        (neg_mean, neg_var) = _mean_var(neg_w, neg.size)
        diff = pos_mean - neg_mean
        half = z * math.sqrt(pos_var / pos.size + neg_var / neg.size)
        out["ks_abc"] = [diff - half, diff + half]
    if score_kind != "probability":
        return out
    brier_pos = _term_sums(pos_w, lambda v: np.square(1.0 - v))
    brier_neg = _term_sums(neg_w, np.square)
    loss_pos = _term_sums(pos_w, lambda v: -np.log(_clip(v)))
    loss_neg = _term_sums(neg_w, lambda v: -np.log1p(-_clip(v)))
    n = pos.size + neg.size
    terms = {
        "brier": (brier_pos[0] + brier_neg[0], brier_pos[1] + brier_neg[1], n),
        "brier_pos": (*brier_pos, pos.size),
        "brier_neg": (*brier_neg, neg.size),
        "log_loss": (loss_pos[0] + loss_neg[0], loss_pos[1] + loss_neg[1], n),
    }
    for name, (total, squares, m) in terms.items():
        interval = _normal_interval(total, squares, m, z)
        if interval is not None:
            upper = math.inf if name == "log_loss" else 1.0
            interval = [max(interval[0], 0.0), min(interval[1], upper)]
        out[name] = interval
    out["brier_skill"] = _brier_skill_interval(pos.size, neg.size, brier_pos, brier_neg, z)
    return out


def _brier_skill_interval(
    n_pos: int,
    n_neg: int,
    brier_pos: tuple[float, float],
    brier_neg: tuple[float, float],
    z: float,
) -> Interval:
    """Delta-method interval of brier_skill = 1 - B/(p(1-p)), B the mean Brier term t and p
    the prior, from Σt and Σt² of each class: the estimate's influence per row is
    a·(t - B) + b·(y - p) with a = -1/(p(1-p)) and b = B(1-2p)/(p(1-p))², whose variance
    a²·var(t) + b²·var(y) + 2ab·cov(t, y) over n gives the standard error. Clipped to ≤ 1;
    None unless both classes are present and n ≥ 3."""
    n = n_pos + n_neg
    if n_pos == 0 or n_neg == 0 or n < 3:
        return None
    total = brier_pos[0] + brier_neg[0]
    squares = brier_pos[1] + brier_neg[1]
    brier, p = total / n, n_pos / n
    spread = p * (1 - p)
    var_t = max(0.0, (squares - n * brier * brier) / (n - 1))
    var_y = spread * n / (n - 1)
    cov_ty = (brier_pos[0] - n * brier * p) / (n - 1)
    a = -1.0 / spread
    b = brier * (1 - 2 * p) / (spread * spread)
    variance = max(0.0, a * a * var_t + b * b * var_y + 2 * a * b * cov_ty)
    point = 1.0 - brier / spread
    half = z * math.sqrt(variance / n)
    return [point - half, min(point + half, 1.0)]


def bootstrap_intervals(
    prepared: PreparedSet,
    *,
    threshold: float,
    pi0: Sequence[float],
    level: float = 0.95,
    replicates: int | None = None,
    seed: int | None = None,
    score_kind: str = "score",
) -> dict[str, Any]:
    """Confidence intervals at ``level`` for the metrics of one set.

    ``prepared`` is the validated set sorted once (:func:`app.metrics.evaluation.prepare`).
    Returns ``{"regular": {metric: [lo, hi] | None}, "calibrated": {repr(π0): {metric:
    [lo, hi] | None}}}`` for REGULAR_METRICS and CALIBRATED_METRICS (see
    :func:`replicate_interval`; ``replicates`` Poisson-bootstrap replicates, by default
    :func:`default_replicates`; a calibrated replicate uses its own prior, as the point value
    does), plus ``ks_abc`` and, for ``score_kind="probability"``, MEAN_METRICS under "regular"
    (normal approximation, see :func:`mean_intervals`). None when the point value is undefined
    or too few replicates are defined. The same ``seed`` gives the same intervals.
    """
    _check(level, replicates)
    ranking = prepared.ranking
    b = default_replicates(ranking.thresholds.size) if replicates is None else replicates
    pi0s = [float(p) for p in pi0]
    cut = cut_prepared(prepared, threshold)
    point_regular, point_calibrated = evaluate_replicates(
        ranking.thresholds, observed(ranking, cut), pi0s
    )
    rng = np.random.default_rng(seed)
    regular_parts: dict[str, list[FloatArray]] = {name: [] for name in REGULAR_METRICS}
    calibrated_parts: dict[float, dict[str, list[FloatArray]]] = {
        p: {name: [] for name in CALIBRATED_METRICS} for p in pi0s
    }
    for reps in _replicate_chunks(ranking, cut, replicates=b, rng=rng):
        regular, calibrated = evaluate_replicates(ranking.thresholds, reps, pi0s)
        for name, parts in regular_parts.items():
            parts.append(regular[name])
        for p, metrics in calibrated_parts.items():
            for name, parts in metrics.items():
                parts.append(calibrated[p][name])

    def interval(name: str, parts: list[FloatArray], point: FloatArray) -> Interval:
        values = np.concatenate(parts)
        return replicate_interval(values, float(point[0]), level=level, scale=_scale(name))

    out_regular: dict[str, Interval] = {
        name: interval(name, parts, point_regular[name]) for name, parts in regular_parts.items()
    }
    out_regular |= mean_intervals(
        prepared.pos_sorted, prepared.neg_sorted, score_kind=score_kind, level=level
    )
    out_calibrated = {
        repr(p): {
            name: interval(name, parts, point_calibrated[p][name])
            for name, parts in metrics.items()
        }
        for p, metrics in calibrated_parts.items()
    }
    return {"regular": out_regular, "calibrated": out_calibrated}
