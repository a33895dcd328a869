"""Confidence intervals for one evaluation set, by metric family (``docs/reference/intervals.md``).

- Metrics at the decision threshold τ, from the confusion counts: Wilson intervals, F1 through
  the Jaccard index, the calibrated precision and F1 by MOVER (:func:`count_intervals`).
- Average precision: bias-corrected normal intervals from Poisson-bootstrap replicates
  (:mod:`calmon.metrics.resampling`) on the logit scale (:func:`replicate_interval`), only at
  priors where it covers (:func:`ap_interval_published`); ROC AUC: DeLong's standard error on
  the logit scale with Student's t (:func:`roc_auc_delong`), the replicates deciding the
  bounds.
- best F1, AUPRG, KS: None. Plain means (Brier scores, log loss, ``ks_abc``): Student's t
  intervals on a logit, log or identity scale, corrected for the mean's skewness by Hall's
  cubic transformation (:func:`mean_intervals`, :func:`skew_corrected_quantiles`).
- The curve metrics' and the means' intervals hold the values the set would have with a few
  rows of each class added beyond the other class's extreme (:func:`unseen_row_sets`,
  :func:`unseen_mean_values`, :func:`hull_unseen`): a rare component a sample did not draw.

:func:`bootstrap_intervals` puts them together for a prepared set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np

from calmon.arrays import FloatArray, IntArray
from calmon.catalogue import BY_NAME, INTERVAL_KEYS
from calmon.metrics.curves import curve_metrics
from calmon.metrics.prepared import PreparedSet, pi0_key
from calmon.metrics.ranking import Ranking, distinct_runs
from calmon.metrics.resampling import (
    Replicates,
    Values,
    cut_prepared,
    default_replicates,
    observed,
    replicate_chunks,
)

Interval = list[float] | None

MIN_DEFINED_FRACTION = 0.9
"""An interval is only reported when at least this share of the replicates define the metric
(e.g. hold both classes); below it the replicate distribution says little about the set."""

REGULAR_INTERVAL_METRICS = tuple(name for name in INTERVAL_KEYS if BY_NAME[name].interval != "mean")
CALIBRATED_INTERVAL_METRICS = tuple(
    name for name in REGULAR_INTERVAL_METRICS if BY_NAME[name].calibrated
)
"""The metrics :func:`bootstrap_intervals` reports an interval (or None) for, a subset of
:data:`calmon.metrics.evaluation.REGULAR_METRICS` / ``CALIBRATED_METRICS``, in the order
records store them."""
MEAN_METRICS = tuple(
    name
    for name in INTERVAL_KEYS
    if BY_NAME[name].interval == "mean" and BY_NAME[name].probability_only
)
"""Student's t intervals of means, for ``score_kind="probability"`` only (plus ``ks_abc``)."""

COUNT_REGULAR = tuple(name for name in INTERVAL_KEYS if BY_NAME[name].interval == "counts")
COUNT_CALIBRATED = tuple(name for name in COUNT_REGULAR if BY_NAME[name].calibrated)
"""Metrics at τ with count-based intervals (Wilson, Jaccard-Wilson, MOVER)."""
BOOTSTRAP_REGULAR = tuple(name for name in INTERVAL_KEYS if BY_NAME[name].interval == "bootstrap")
BOOTSTRAP_CALIBRATED = tuple(name for name in BOOTSTRAP_REGULAR if BY_NAME[name].calibrated)
"""Curve metrics with bootstrap intervals."""
MIN_AP_PRIOR = 0.1
MAX_AP_ODDS_RATIO = 2.0
"""Average precision at a prior p (the set's own prior π̂ for the regular AP, π0 for a
calibrated one) gets an interval only when p ≥ MIN_AP_PRIOR and the odds of π̂ are at most
MAX_AP_ODDS_RATIO times those of p (each negative then weighs r = odds(π̂)/odds(p) ≤ 2 in
P_c = TP/(TP + r·FP)). At small p the AP weighs the top of the ranking, where few negatives
sit, ever more heavily, and weighing each negative r > 1 times does the same: the bootstrap
interval undercovers, 0.875-0.93 at p = 0.01 with 20-200 positives, 0.905-0.96 at p = 0.02,
0.89-0.955 at p = 0.05 (calibrated at π0 = 0.05 on tied or three-level scores 0.887-0.92),
0.925-0.96 at p ≥ 0.1; at r ≈ 2.1-2.25 0.90-0.95 (``docs/reference/intervals.md``)."""


def ap_interval_published(p: float, prior: float) -> bool:
    """Whether average precision at prior ``p`` of a set with prior ``prior`` gets an interval
    (MIN_AP_PRIOR, MAX_AP_ODDS_RATIO)."""
    if not (MIN_AP_PRIOR <= p < 1.0 and 0.0 < prior < 1.0):
        return False
    return prior / (1.0 - prior) <= MAX_AP_ODDS_RATIO * p / (1.0 - p)


NO_INTERVAL = tuple(name for name in REGULAR_INTERVAL_METRICS if BY_NAME[name].interval == "none")
"""Metrics that get None: no method here reaches nominal coverage for them at window sizes
(maxima over thresholds, and AUPRG, whose curve hinges on the few top-scored positives)."""

_LOG_LOSS_EPS = 1e-15

ABSENT_REASONS = (
    "no_method",
    "undefined",
    "prior_out_of_range",
    "too_few_positives",
    "too_few_negatives",
    "too_few_rows",
    "constant_scores",
    "undefined_in_replicates",
)
"""Why a metric has no interval (``bootstrap_intervals(...)["absent"]``,
``docs/reference/intervals.md``, "Absent intervals"): ``no_method``, no method here covers for it
(NO_INTERVAL); ``undefined``, its value is undefined (a class missing, nothing at or above τ);
``prior_out_of_range``, average precision at a prior where it does not cover
(:func:`ap_interval_published`); ``too_few_positives`` / ``too_few_negatives`` /
``too_few_rows``, fewer rows of that class (or in all) than the interval needs to cover
(MIN_MEAN_TERMS, :func:`curve_interval_published`); ``constant_scores``, the terms of a mean
do not vary (no estimate of their spread); ``undefined_in_replicates``, fewer than
MIN_DEFINED_FRACTION of the bootstrap replicates define it."""


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
"""Differences of metrics (the parts of a drift split, :mod:`calmon.metrics.split`)."""


def replicate_interval(
    values: FloatArray,
    point: float,
    *,
    level: float,
    scale: Scale,
    events: float | None = None,
    df: float | None = None,
    spread: float | None = None,
) -> Interval:
    """The interval at ``level`` from the replicate ``values`` (B,) of a metric valued ``point``.

    On the scale g = ``scale[0]``: centre g(point) - (mean g(θ*) - g(point)) (the bootstrap
    estimate of the bias removed), half-width z·sd(g(θ*)), mapped back with ``scale[1]``.

    When g is infinite at the point or at a replicate (a value on the bound, e.g. ROC AUC 1 under
    perfect separation), the replicates cannot say how far from the bound the population value
    may be: the interval is then the hull of the replicates' percentile interval and the Wilson
    interval of a proportion ``point`` over ``events`` trials (a [0, 1]-valued mean over
    ``events`` independent terms has variance at most point·(1 - point)/events, so this bound
    is conservative). Without ``events`` the percentile interval alone. None when ``point`` is
    undefined or fewer than MIN_DEFINED_FRACTION of the replicates are defined (NaN).

    ``df``: the standard error rests on about that many degrees of freedom (e.g. a few
    positives carry all of it), so the normal quantile z becomes Student's t with ``df``
    degrees of freedom (:func:`t_quantile`); None or inf keeps z.

    ``spread``: a standard error of g(point) known in closed form (DeLong's for ROC AUC,
    :func:`roc_auc_delong`); the interval is then g(point) ± q·``spread`` (q the quantile
    above), and the replicates only decide whether the value sits on a bound (above) and
    whether enough are defined.
    """
    if not math.isfinite(point) or values.size == 0:
        return None
    defined = values[np.isfinite(values)]
    if defined.size < max(2, MIN_DEFINED_FRACTION * values.size):
        return None
    forward, back = scale
    g_point = forward(np.array([point]))
    g_values = forward(defined)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    if np.isfinite(g_point[0]) and np.all(np.isfinite(g_values)):
        z = t_quantile(z, df)
        if spread is None:
            centre = 2 * g_point[0] - float(np.mean(g_values))
            half = z * float(np.std(g_values, ddof=1))
        else:
            centre, half = float(g_point[0]), z * spread
        lo, hi = sorted(float(x) for x in back(np.array([centre - half, centre + half])))
        return [lo, hi]
    alpha = 1.0 - level
    q_lo, q_hi = (float(q) for q in np.quantile(defined, [alpha / 2, 1 - alpha / 2]))
    if events is None:
        return [q_lo, q_hi]
    wilson = wilson_bounds(point, events, z)
    return [min(q_lo, wilson[0]), max(q_hi, wilson[1])]


def t_quantile(z: float, df: float | None) -> float:
    """Student's t quantile with ``df`` degrees of freedom at the level of the normal quantile
    ``z`` (Cornish-Fisher expansion in 1/df to the fourth order, Abramowitz & Stegun 26.7.5;
    within 0.2% of the exact value for df ≥ 3 at z = 1.96). ``df`` is clipped to ≥ 3; None or
    inf gives z."""
    if df is None or not math.isfinite(df):
        return z
    v = max(3.0, df)
    z2 = z * z
    terms = (
        (z2 + 1) / 4,
        ((5 * z2 + 16) * z2 + 3) / 96,
        (((3 * z2 + 19) * z2 + 17) * z2 - 15) / 384,
        ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) / 92160,
    )
    return z * (1 + sum(term / v ** (i + 1) for i, term in enumerate(terms)))


def roc_auc_delong(ranking: Ranking) -> tuple[float, float] | None:
    """DeLong's variance of the ROC AUC and the Welch-Satterthwaite degrees of freedom of its
    standard error: the AUC is the mean placement of the positives (the share of negatives
    below, ties ½) and of the negatives (the share of positives above), with variance
    S₁ + S₀, S₁ = var(positive placements)/n_pos and S₀ likewise; then
    df = (S₁ + S₀)² / (S₁²/(n_pos - 1) + S₀²/(n_neg - 1)). With many negatives and few
    positives df ≈ n_pos - 1. ROC AUC's interval uses this standard error, not the
    bootstrap's, which over-states the spread of the logit at a few dozen positives
    (``docs/reference/intervals.md``). None when a class has fewer than two rows or both
    variances are 0 (perfect separation). O(K)."""
    n1, n0 = ranking.n_pos, ranking.n_neg
    if n1 < 2 or n0 < 2:
        return None
    pos = ranking.pos.astype(np.float64)
    tied = ranking.neg_tied.astype(np.float64)
    above = ranking.neg_above.astype(np.float64)
    negatives_to_here = np.cumsum(above + tied)
    pos_placement = (n0 - negatives_to_here + 0.5 * tied) / n0
    positives_before = np.cumsum(pos) - pos
    groups = np.concatenate([above, tied, [float(ranking.neg_below)]])
    neg_placement = (
        np.concatenate([positives_before, positives_before + 0.5 * pos, [float(n1)]]) / n1
    )

    def variance(values: FloatArray, weights: FloatArray, m: int) -> float:
        mean = float(np.dot(values, weights)) / m
        return float(np.dot(weights, np.square(values - mean))) / (m - 1)

    s1 = variance(pos_placement, pos, n1) / n1
    s0 = variance(1.0 - neg_placement, groups, n0) / n0
    denominator = s1 * s1 / (n1 - 1) + s0 * s0 / (n0 - 1)
    if denominator <= 0:
        return None
    return s1 + s0, (s1 + s0) ** 2 / denominator


def roc_auc_logit_spread(delong: tuple[float, float] | None, point: float) -> float | None:
    """DeLong's standard error (:func:`roc_auc_delong`) of logit(ROC AUC) at ``point`` by the
    delta method, √variance / (point·(1 - point)); None without a variance or on a bound."""
    if delong is None or not 0.0 < point < 1.0:
        return None
    return math.sqrt(delong[0]) / (point * (1.0 - point))


UNSEEN_ROWS = 3
"""Rows of each class the unseen-row bound adds beyond the other class's extreme
(:func:`unseen_row_sets`, :func:`unseen_mean_values`). A component of a class with share q
is missing from a sample of n rows of that class with probability (1 - q)^n ≈ e^(-nq), above
5% while nq < 3 (the rule of three): the sample cannot rule out about three such rows per
class, so every interval of a curve metric or a mean holds the value the set would have with
them (``docs/reference/intervals.md``, "What a sample cannot show")."""


UNSEEN_LOSS_ROWS = 1.5
UNSEEN_LOSS_EPS = 1e-3
"""Log loss adds UNSEEN_LOSS_ROWS rows per class (not UNSEEN_ROWS; a weight, so one row and a
half), their scores clipped to [UNSEEN_LOSS_EPS, 1 - UNSEEN_LOSS_EPS]: its terms are
unbounded, and three rows at the set's extreme scores over-covered on every family (0.96-0.99
at 20 and 60 positives), one row undercovered where a class's rare rows carry the loss
(0.866-0.880 on *confident mistakes* at π = 0.2 with 20 positives; 1.5 rows: 0.920-0.935);
a score of exactly 0 or 1 would make an added term 34.5 (the clip of the point value), which
says more about the clip than about the population (``docs/reference/intervals.md``)."""


def unseen_row_sets(ranking: Ranking) -> Replicates:
    """The set of ``ranking`` with UNSEEN_ROWS rows of each class added beyond the other
    class's extreme, as two one-set replicates: index 0 the *worse* set (positives below every
    negative and negatives above every positive), index 1 the *better* set (positives above
    every negative and negatives below every positive). Shape (2, K + 2): a block above the
    first and one below the last, each holding at most the added positive.

    A sample of n rows of a class misses a component of that class of share up to about 3/n
    (label noise, a cluster of confident mistakes) with probability above 5%, and its
    bootstrap then cannot show it: :func:`hull_unseen` widens an interval to hold the metric of
    both sets (``docs/reference/intervals.md``, "What a sample cannot show"). ``tp`` and ``fp`` are
    not meaningful (no threshold)."""
    k = ranking.thresholds.size
    zero = np.zeros((2, 1), dtype=np.int64)
    pos = np.concatenate([zero, np.tile(ranking.pos, (2, 1)), zero], axis=1)
    tied = np.concatenate([zero, np.tile(ranking.neg_tied, (2, 1)), zero], axis=1)
    above = np.concatenate([zero, np.tile(ranking.neg_above, (2, 1)), zero], axis=1)
    above[:, k + 1] = ranking.neg_below
    pos[0, k + 1] = UNSEEN_ROWS
    above[0, 0] = UNSEEN_ROWS
    pos[1, 0] = UNSEEN_ROWS
    below = np.array([0, UNSEEN_ROWS], dtype=np.int64)
    none = np.zeros(2, dtype=np.int64)
    return Replicates(pos=pos, neg_tied=tied, neg_above=above, neg_below=below, tp=none, fp=none)


def unseen_thresholds(thresholds: FloatArray) -> FloatArray:
    """The thresholds of :func:`unseen_row_sets`: one above the highest, one below the lowest
    (K = 0: 1 and 0)."""
    if thresholds.size == 0:
        return np.array([1.0, 0.0])
    out: FloatArray = np.concatenate(
        [[thresholds[0] + 1.0], thresholds, [thresholds[-1] - 1.0]]
    ).astype(np.float64)
    return out


def hull_unseen(interval: Interval, worse: float, better: float) -> Interval:
    """``interval`` widened to hold ``worse`` and ``better`` (the metric with the unseen rows of
    each class added, :func:`unseen_row_sets`, :func:`unseen_mean_values`); unchanged when it
    is None or a value is undefined."""
    if interval is None:
        return None
    lo, hi = interval
    values = [v for v in (worse, better) if math.isfinite(v)]
    return [min([lo, *values]), max([hi, *values])]


def wilson_bounds(proportion: float, trials: float, z: float) -> tuple[float, float]:
    """The Wilson score interval of ``proportion`` over ``trials`` > 0 (not necessarily an
    integer) at quantile z: the p with |p̂ - p| ≤ z·√(p(1 - p)/n), in closed form."""
    n, p = trials, proportion
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(max(0.0, p * (1 - p)) / n + z * z / (4 * n * n)) / denominator
    # The ends hold p exactly (rounding would leave 1e-17 above 0 for p = 0).
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def wilson_interval(successes: float, n: float, level: float = 0.95) -> Interval:
    """The Wilson score interval at ``level`` of a proportion successes/n (None when n = 0).

    Near nominal coverage down to a few events, inside [0, 1], and of positive width for any
    n > 0: 0 of n gives [0, u] with u > 0, n of n gives [l, 1] with l < 1.
    """
    if n <= 0:
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2)
    lo, hi = wilson_bounds(successes / n, n, z)
    return [lo, hi]


Proportion = tuple[float, float, float]
"""A proportion's estimate and its interval: (p̂, lower, upper)."""


def mover_interval(
    metric: Callable[[float, float], float], tpr: Proportion, fpr: Proportion
) -> Interval:
    """MOVER interval of ``metric``(TPR, FPR), increasing in TPR and decreasing in FPR, from
    independent intervals of TPR (positives) and FPR (negatives).

    On the logit scale g of the metric, with θ̂ = g(metric(t̂, f̂)), each proportion moved alone
    to the end of its interval that lowers the metric gives a one-sided distance, and the two
    combine as the root of their sum of squares (Newcombe's method of variance estimates
    recovery, as for a difference of proportions): lower = θ̂ - √(d_T² + d_F²), and likewise
    for the upper end. A point on a bound (0 or 1) keeps that bound as its end, and its other
    end, or an end whose distance is infinite, moves both proportions at once (the box
    corner metric(t_lo, f_hi), which is conservative). None when the metric is undefined.
    """
    t, t_lo, t_hi = tpr
    f, f_lo, f_hi = fpr
    point = metric(t, f)
    if not math.isfinite(point):
        return None

    def logit(x: float) -> float:
        return math.log(x) - math.log1p(-x) if 0.0 < x < 1.0 else math.copysign(math.inf, x - 0.5)

    def expit(y: float) -> float:
        return 0.5 * (1.0 + math.tanh(0.5 * y))

    g = logit(point)
    lower, upper = 0.0, 1.0
    if point > 0.0:
        lower = metric(t_lo, f_hi)
        if point < 1.0:
            spread = math.hypot(g - logit(metric(t_lo, f)), g - logit(metric(t, f_hi)))
            if math.isfinite(spread):
                lower = expit(g - spread)
    if point < 1.0:
        upper = metric(t_hi, f_lo)
        if point > 0.0:
            spread = math.hypot(logit(metric(t_hi, f)) - g, logit(metric(t, f_lo)) - g)
            if math.isfinite(spread):
                upper = expit(g + spread)
    return [lower, upper]


def count_intervals(
    tp: int, fp: int, n_pos: int, n_neg: int, *, pi0: Sequence[float], level: float = 0.95
) -> tuple[dict[str, Interval], dict[float, dict[str, Interval]]]:
    """Intervals of the metrics at τ from its confusion counts: ({name: interval}, {π0: {...}}).

    - ``precision``: Wilson of TP out of TP + FP; ``recall``: TP out of n_pos; ``fpr``: FP out
      of n_neg (given those totals the counts are binomial, as in a Poisson bootstrap).
    - ``f1`` = 2J/(1 + J), increasing in the Jaccard index J = TP/(TP + FP + FN), which is a
      proportion of the TP + FP + FN rows that are flagged or positive: Wilson of J mapped.
    - calibrated ``precision`` = π0·TPR/(π0·TPR + (1 - π0)·FPR) and ``f1`` =
      2·TPR/(1 + TPR + (1 - π0)/π0·FPR) (the regular definitions at prior π0) depend on the
      counts only through TPR and FPR: :func:`mover_interval` from their Wilson intervals.

    Undefined like the point values (:func:`calmon.metrics.thresholded.threshold_metrics`):
    None for precision and F1 unless both classes are present and TP + FP > 0, for recall
    without positives, for FPR without negatives.
    """
    z = NormalDist().inv_cdf(0.5 + level / 2)
    both = n_pos > 0 and n_neg > 0
    defined = both and tp + fp > 0
    fn = n_pos - tp
    regular: dict[str, Interval] = {
        "precision": wilson_interval(tp, tp + fp, level) if defined else None,
        "recall": wilson_interval(tp, n_pos, level),
        "fpr": wilson_interval(fp, n_neg, level),
        "f1": None,
    }
    if defined:
        j_lo, j_hi = wilson_bounds(tp / (tp + fp + fn), tp + fp + fn, z)
        regular["f1"] = [2 * j_lo / (1 + j_lo), 2 * j_hi / (1 + j_hi)]
    calibrated: dict[float, dict[str, Interval]] = {}
    for value in pi0:
        key = float(value)
        calibrated[key] = {"precision": None, "f1": None}
        if not (defined and 0.0 < key < 1.0):
            continue
        odds = (1.0 - key) / key
        tpr = (tp / n_pos, *wilson_bounds(tp / n_pos, n_pos, z))
        fpr = (fp / n_neg, *wilson_bounds(fp / n_neg, n_neg, z))

        def precision(t: float, f: float, odds: float = odds) -> float:
            return t / (t + odds * f) if t + odds * f > 0 else math.nan

        def f1(t: float, f: float, odds: float = odds) -> float:
            return 2 * t / (1 + t + odds * f)

        calibrated[key] = {
            "precision": mover_interval(precision, tpr, fpr),
            "f1": mover_interval(f1, tpr, fpr),
        }
    return regular, calibrated


def _check(level: float, replicates: int | None) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if replicates is not None and replicates < 2:
        raise ValueError(f"replicates must be ≥ 2, got {replicates}")


MIN_MEAN_TERMS = 10
"""A mean (MEAN_METRICS, ``ks_abc``) gets an interval only when each class it averages over has
at least this many rows: below it the spread of a handful of skewed terms says too little
(``docs/reference/intervals.md``, "Means")."""


class Moments(NamedTuple):
    """Count, mean and the sums of the second and third powers of the deviations from the
    mean of a class's terms (or of several classes' pooled, :func:`_pooled`)."""

    n: int
    mean: float
    m2: float
    m3: float


def _moments(terms: FloatArray, counts: IntArray | None) -> Moments:
    """The :class:`Moments` of ``terms`` (each standing for ``counts`` rows when weighted), in
    two passes: terms may sit far from 0, where sums of their powers would cancel (einsum
    allocates no array of powers)."""
    m = terms.size if counts is None else int(counts.sum())
    if m == 0:
        return Moments(0, 0.0, 0.0, 0.0)
    if counts is None:
        mean = float(terms.sum()) / m
        d = terms - mean
        m2, m3 = np.einsum("i,i->", d, d), np.einsum("i,i,i->", d, d, d)
    else:
        mean = float(np.dot(terms, counts)) / m
        d = terms - mean
        m2, m3 = np.einsum("i,i,i->", d, d, counts), np.einsum("i,i,i,i->", d, d, d, counts)
    return Moments(m, mean, float(m2), float(m3))


def _pooled(a: Moments, b: Moments) -> Moments:
    """The :class:`Moments` of two classes' terms together (Chan, Golub & LeVeque's update)."""
    if a.n == 0 or b.n == 0:
        return a if b.n == 0 else b
    n = a.n + b.n
    delta = b.mean - a.mean
    m2 = a.m2 + b.m2 + delta * delta * a.n * b.n / n
    m3 = (
        a.m3
        + b.m3
        + delta**3 * a.n * b.n * (a.n - b.n) / (n * n)
        + 3.0 * delta * (a.n * b.m2 - b.n * a.m2) / n
    )
    return Moments(n, a.mean + delta * b.n / n, m2, m3)


def skew_corrected_quantiles(q: float, skew: float, curvature: float = 0.0) -> tuple[float, float]:
    """(lower, upper) quantiles of a studentized estimate T = (g(θ̂) - g(θ))/(se·g'(θ̂)) whose
    estimate θ̂ has skewness ``skew`` (its third cumulant over its variance^1.5, O(1/√n)),
    from Hall's (1992) cubic transformation: to order 1/√n, T has mean -(skew + curvature)/2
    and third cumulant -2·skew - 3·curvature (``curvature`` = se·g''/g'(θ̂), 0 on the
    identity scale; the -1/2 and -2 come from the correlation of a mean with its standard
    error), so h(T) = T + a·T² + a²·T³/3 + b with a = skew/3 + curvature/2 and b = skew/6 is
    nearly normal; h is increasing, and h⁻¹(x) = ((1 + 3a(x - b))^(1/3) - 1)/a. With skew and
    curvature 0 this is (-q, q): Student's t. Right-skewed terms (skew > 0) give a T skewed
    left, and the interval reaches further above the estimate than below it."""
    a, b = skew / 3.0 + curvature / 2.0, skew / 6.0
    if abs(a) < 1e-12:
        return -q - b, q - b
    return (math.cbrt(1.0 + 3.0 * a * (-q - b)) - 1.0) / a, (
        math.cbrt(1.0 + 3.0 * a * (q - b)) - 1.0
    ) / a


def _mean_interval(terms: Moments, level: float, scale: str) -> Interval:
    """The interval of the mean of m terms given their :class:`Moments`, on the scale g
    (``"logit"`` for means in [0, 1], ``"log"`` for positive ones): θ = the mean's population
    value is in g⁻¹(g(mean) - se·g'(mean)·[upper, lower]) with the skewness-corrected
    quantiles of :func:`skew_corrected_quantiles` at Student's t with m - 1 degrees of
    freedom; the mean's skewness is m3/(s³·√m), m3 = Σ(t - mean)³/m and s² the sample
    variance. The terms of these means are skewed (squares of small gaps, a rare component
    drawn a few times), and at a few dozen rows a symmetric interval misses on the high
    side; the scale keeps the interval inside the mean's range. None below MIN_MEAN_TERMS
    terms, when the terms do not vary (no variance estimate is not zero variance: a class
    of constant scores says nothing about the spread of its population), and when the mean
    sits on the bound of its scale."""
    m, mean = terms.n, terms.mean
    if m < MIN_MEAN_TERMS:
        return None
    variance = terms.m2 / (m - 1)
    if not variance > 1e-12 * max(1.0, mean * mean):
        return None
    q = t_quantile(NormalDist().inv_cdf(0.5 + level / 2), m - 1)
    sd = math.sqrt(variance)
    se = sd / math.sqrt(m)
    skew = terms.m3 / m / (sd**3 * math.sqrt(m))
    if scale == "logit":
        if not 0.0 < mean < 1.0:
            return None
        centre, slope = math.log(mean) - math.log1p(-mean), 1.0 / (mean * (1.0 - mean))
        lower, upper = skew_corrected_quantiles(q, skew, se * (2.0 * mean - 1.0) * slope)
        bounds = _expit(np.array([centre - se * slope * upper, centre - se * slope * lower]))
        return [float(bounds[0]), float(bounds[1])]
    if not mean > 0.0:
        return None
    lower, upper = skew_corrected_quantiles(q, skew, -se / mean)
    return [mean * math.exp(-se / mean * upper), mean * math.exp(-se / mean * lower)]


Weighted = tuple[FloatArray, IntArray | None]
"""A class's scores as (values, counts): its distinct scores and their counts when ties make
that cheaper, else the sorted scores themselves with counts None."""


def _weighted(sorted_scores: FloatArray) -> Weighted:
    """One pass over ascending ``sorted_scores`` deciding how the sums below run over them."""
    runs = distinct_runs(sorted_scores, max_runs=sorted_scores.size // 8)
    return (sorted_scores, None) if runs is None else runs


def _term_moments(scores: Weighted, term: Callable[[FloatArray], FloatArray]) -> Moments:
    """The :class:`Moments` of term(s) over a class (one term per distinct score when
    weighted)."""
    values, counts = scores
    return _moments(term(values), counts)


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
    """Intervals for the metrics that are means of per-row terms, given each class's scores
    ascending (``PreparedSet.pos_sorted``, ``neg_sorted``).

    ``ks_abc`` = mean(s | y=1) - mean(s | y=0): the two means are independent, so its
    standard error is √(var₁/n_pos + var₀/n_neg), with Student's t at the Welch degrees of
    freedom, corrected for the difference's skewness (:func:`_difference_interval`). For
    ``score_kind="probability"`` also ``brier`` (terms (s-y)²), ``brier_pos`` ((s-1)² over
    positives), ``brier_neg`` (s² over negatives), each on the logit scale, and ``log_loss``
    (-y log s - (1-y) log(1-s), s clipped to [1e-15, 1 - 1e-15]) on the log scale, with
    Student's t at m - 1 degrees of freedom corrected for the terms' skewness and the scale's
    curvature (:func:`_mean_interval`, :func:`skew_corrected_quantiles`: a rare component drawn
    a few times makes the mean skewed, and a t interval, even on the logit or log scale,
    missed on one side), and ``brier_skill`` by the delta method
    (:func:`_brier_skill_interval`). Each is widened to hold the mean with the unseen rows
    added (:func:`unseen_mean_values`). None when a needed class has fewer than
    MIN_MEAN_TERMS rows or its terms do not vary (a class of constant scores). O(n), or
    O(distinct scores) for heavily tied sets.
    """
    _check(level, None)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    pos, neg = pos_sorted, neg_sorted
    pos_w, neg_w = _weighted(pos), _weighted(neg)
    out: dict[str, Interval] = {"ks_abc": _difference_interval(pos_w, neg_w, z)}
    if score_kind != "probability":
        if pos.size and neg.size:
            worse, better = unseen_mean_values(pos, neg, 0.0, 0.0, 0.0, 0.0)["ks_abc"]
            out["ks_abc"] = hull_unseen(out["ks_abc"], worse, better)
        return out
    brier_pos = _term_moments(pos_w, lambda v: np.square(1.0 - v))
    brier_neg = _term_moments(neg_w, np.square)
    loss_pos = _term_moments(pos_w, lambda v: -np.log(_clip(v)))
    loss_neg = _term_moments(neg_w, lambda v: -np.log1p(-_clip(v)))
    terms = {
        "brier": (_pooled(brier_pos, brier_neg), "logit"),
        "brier_pos": (brier_pos, "logit"),
        "brier_neg": (brier_neg, "logit"),
        "log_loss": (_pooled(loss_pos, loss_neg), "log"),
    }
    for name, (moments, scale) in terms.items():
        out[name] = _mean_interval(moments, level, scale)
    out["brier_skill"] = _brier_skill_interval(brier_pos, brier_neg, z)
    if pos.size and neg.size:
        sums = (moments.mean * moments.n for moments in (brier_pos, brier_neg, loss_pos, loss_neg))
        unseen = unseen_mean_values(pos, neg, *sums)
        for name, (worse, better) in unseen.items():
            out[name] = hull_unseen(out[name], worse, better)
    return out


def unseen_mean_values(
    pos_sorted: FloatArray,
    neg_sorted: FloatArray,
    brier_pos: float,
    brier_neg: float,
    loss_pos: float,
    loss_neg: float,
) -> dict[str, tuple[float, float]]:
    """(worse, better) value of each mean metric on the set with UNSEEN_ROWS rows of each class
    added at the other end of the scores (:func:`unseen_row_sets` for the means; log loss
    UNSEEN_LOSS_ROWS): worse, positives at the set's lowest score and negatives at its
    highest; better, the reverse. ``brier_pos``
    ... ``loss_neg`` are the sums of each class's terms. A metric of one class (``brier_pos``,
    ``brier_neg``) adds that class's rows only; ``brier_skill`` uses the prior of the set with
    both rows added. Both classes must be present."""
    n1, n0 = pos_sorted.size, neg_sorted.size
    lowest = float(min(pos_sorted[0], neg_sorted[0]))
    highest = float(max(pos_sorted[-1], neg_sorted[-1]))
    sum_pos, sum_neg = float(pos_sorted.sum()), float(neg_sorted.sum())
    low, high = (float(v) for v in np.clip([lowest, highest], UNSEEN_LOSS_EPS, 1 - UNSEEN_LOSS_EPS))

    u = UNSEEN_ROWS
    v = min(u, UNSEEN_LOSS_ROWS)

    def abc(p: float, q: float) -> float:
        return (sum_pos + u * p) / (n1 + u) - (sum_neg + u * q) / (n0 + u)

    def brier(p: float, q: float) -> float:
        return (brier_pos + u * (1.0 - p) ** 2 + brier_neg + u * q * q) / (n1 + n0 + 2 * u)

    def loss(p: float, q: float) -> float:
        return (loss_pos - v * math.log(p) + loss_neg - v * math.log1p(-q)) / (n1 + n0 + 2 * v)

    spread = (n1 + u) * (n0 + u) / (n1 + n0 + 2 * u) ** 2
    return {
        "ks_abc": (abc(lowest, highest), abc(highest, lowest)),
        "brier": (brier(lowest, highest), brier(highest, lowest)),
        "brier_pos": (
            (brier_pos + u * (1.0 - lowest) ** 2) / (n1 + u),
            (brier_pos + u * (1.0 - highest) ** 2) / (n1 + u),
        ),
        "brier_neg": (
            (brier_neg + u * highest**2) / (n0 + u),
            (brier_neg + u * lowest**2) / (n0 + u),
        ),
        "log_loss": (loss(low, high), loss(high, low)),
        "brier_skill": (
            1.0 - brier(lowest, highest) / spread,
            min(1.0, 1.0 - brier(highest, lowest) / spread),
        ),
    }


def _difference_interval(pos: Weighted, neg: Weighted, z: float) -> Interval:
    """``ks_abc`` = d = mean(s | y=1) - mean(s | y=0): d - se·[upper, lower] with
    se = √(var₁/n_pos + var₀/n_neg), Student's t at the Welch-Satterthwaite degrees of freedom
    and the skewness-corrected quantiles of :func:`skew_corrected_quantiles`: the two means
    are independent, so d's third cumulant is m3₁/n_pos² - m3₀/n_neg² (m3 each class's third
    central moment) and its skewness that over se³ (a few positives scored like negatives make
    d skewed left, and the interval then reaches further below). None unless each class has at
    least MIN_MEAN_TERMS rows and its scores vary (a class of constant scores gives no estimate
    of its spread, not a spread of 0)."""
    pos_m, neg_m = _moments(*pos), _moments(*neg)
    n_pos, n_neg = pos_m.n, neg_m.n
    if min(n_pos, n_neg) < MIN_MEAN_TERMS:
        return None
    for moments in (pos_m, neg_m):
        variance = moments.m2 / (moments.n - 1)
        if not variance > (1e-9 * max(1.0, abs(moments.mean))) ** 2:  # constant up to rounding
            return None
    s1, s0 = pos_m.m2 / (n_pos - 1) / n_pos, neg_m.m2 / (n_neg - 1) / n_neg
    df = (s1 + s0) ** 2 / (s1 * s1 / (n_pos - 1) + s0 * s0 / (n_neg - 1))
    third = pos_m.m3 / n_pos**3 - neg_m.m3 / n_neg**3
    se = math.sqrt(s1 + s0)
    lower, upper = skew_corrected_quantiles(t_quantile(z, df), third / se**3)
    diff = pos_m.mean - neg_m.mean
    return [diff - se * upper, diff - se * lower]


def _brier_skill_interval(brier_pos: Moments, brier_neg: Moments, z: float) -> Interval:
    """Delta-method interval of brier_skill = 1 - B/(p(1-p)), B the mean Brier term t and p
    the prior, from each class's :class:`Moments` of t: the estimate's influence per row is
    a·(t - B) + b·(y - p) with a = -1/(p(1-p)) and b = B(1-2p)/(p(1-p))², whose variance
    a²·var(t) + b²·var(y) + 2ab·cov(t, y) over n gives the standard error. Clipped to ≤ 1;
    None unless both classes are present and n ≥ 3."""
    n_pos, n_neg = brier_pos.n, brier_neg.n
    n = n_pos + n_neg
    if n_pos == 0 or n_neg == 0 or n < 3:
        return None
    pooled = _pooled(brier_pos, brier_neg)
    brier, p = pooled.mean, n_pos / n
    spread = p * (1 - p)
    var_t = pooled.m2 / (n - 1)
    var_y = spread * n / (n - 1)
    cov_ty = n_pos * (brier_pos.mean - brier) / (n - 1)
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

    ``prepared`` is the validated set sorted once (:func:`calmon.metrics.prepared.prepare`).
    Returns ``{"regular": {metric: [lo, hi] | None}, "calibrated": {repr(π0): {metric:
    [lo, hi] | None}}}`` for REGULAR_INTERVAL_METRICS and CALIBRATED_INTERVAL_METRICS: the
    metrics at τ from their counts (:func:`count_intervals`); ROC AUC (DeLong's standard error,
    :func:`roc_auc_delong`) and AP from ``replicates`` Poisson-bootstrap replicates (by
    default :func:`default_replicates`; a calibrated replicate uses its own prior, as the
    point value does; :func:`replicate_interval` with min(n_pos, n_neg) events), widened
    to hold the unseen rows (:func:`hull_unseen`);
    None for NO_INTERVAL. Plus ``ks_abc`` and, for ``score_kind="probability"``, MEAN_METRICS
    under "regular" (Student's t, see :func:`mean_intervals`). None also when the
    point value is undefined or too few replicates are defined. ``"absent"`` says why each None
    is None: ``{"regular": {metric: reason}, "calibrated": {repr(π0): {metric: reason}}}``, a
    code of ABSENT_REASONS for every metric without an interval. The same ``seed`` gives the
    same intervals.
    """
    _check(level, replicates)
    ranking = prepared.ranking
    b = default_replicates(ranking.thresholds.size) if replicates is None else replicates
    pi0s = [float(p) for p in pi0]
    cut = cut_prepared(prepared, threshold)
    point = observed(ranking, cut)
    n_pos, n_neg = int(point.n_pos[0]), int(point.n_neg[0])
    point_curves = _curve_replicates(ranking.thresholds, point, pi0s)
    rng = np.random.default_rng(seed)
    parts: dict[str, list[FloatArray]] = {name: [] for name in point_curves}
    for reps in replicate_chunks(ranking, cut, replicates=b, rng=rng):
        for name, values in _curve_replicates(ranking.thresholds, reps, pi0s).items():
            parts[name].append(values)
    events = min(n_pos, n_neg)
    prior = n_pos / (n_pos + n_neg) if n_pos + n_neg else math.nan
    delong = roc_auc_delong(ranking)
    dfs = {"roc_auc": None if delong is None else delong[1]}
    spreads = {"roc_auc": roc_auc_logit_spread(delong, float(point_curves["roc_auc"][0]))}
    published = {"roc_auc": True, "average_precision": ap_interval_published(prior, prior)}
    for p in pi0s:
        published[f"average_precision@{p!r}"] = ap_interval_published(p, prior)
    curve_intervals = {
        name: replicate_interval(
            np.concatenate(values),
            float(point_curves[name][0]),
            level=level,
            scale=UNIT,
            events=events,
            df=dfs.get(name),
            spread=spreads.get(name),
        )
        if published[name]
        else None
        for name, values in parts.items()
    }
    unseen = _curve_replicates(
        unseen_thresholds(ranking.thresholds), unseen_row_sets(ranking), pi0s
    )
    curve_intervals = {
        name: hull_unseen(interval, float(unseen[name][0]), float(unseen[name][1]))
        for name, interval in curve_intervals.items()
    }
    at_tau, at_tau_calibrated = count_intervals(
        int(point.tp[0]), int(point.fp[0]), n_pos, n_neg, pi0=pi0s, level=level
    )
    out_regular: dict[str, Interval] = {}
    for name in REGULAR_INTERVAL_METRICS:
        out_regular[name] = at_tau[name] if name in COUNT_REGULAR else curve_intervals.get(name)
    out_regular |= mean_intervals(
        prepared.pos_sorted, prepared.neg_sorted, score_kind=score_kind, level=level
    )
    out_calibrated: dict[str, dict[str, Interval]] = {}
    for p in pi0s:
        metrics: dict[str, Interval] = {}
        for name in CALIBRATED_INTERVAL_METRICS:
            if name in COUNT_CALIBRATED:
                metrics[name] = at_tau_calibrated[p][name]
            else:
                metrics[name] = curve_intervals.get(f"{name}@{p!r}")
        out_calibrated[pi0_key(p)] = metrics
    point_values = {name: float(values[0]) for name, values in point_curves.items()}
    absent = _absent(out_regular, out_calibrated, pi0s, published, point_values, n_pos, n_neg)
    return {
        "regular": out_regular,
        "calibrated": out_calibrated,
        "absent": absent,
    }


def _absent(
    regular: dict[str, Interval],
    calibrated: dict[str, dict[str, Interval]],
    pi0s: list[float],
    published: dict[str, bool],
    points: dict[str, float],
    n_pos: int,
    n_neg: int,
) -> dict[str, Any]:
    """The reason of every None among ``regular`` and ``calibrated`` (keyed like them)."""

    def reason(name: str, key: str) -> str:
        return _absent_reason(name, published.get(key), points.get(key), n_pos, n_neg)

    out_calibrated: dict[str, dict[str, str]] = {}
    for p in pi0s:
        metrics = calibrated[pi0_key(p)]
        out_calibrated[pi0_key(p)] = {
            name: reason(name, f"{name}@{p!r}") for name, v in metrics.items() if v is None
        }
    return {
        "regular": {name: reason(name, name) for name, v in regular.items() if v is None},
        "calibrated": out_calibrated,
    }


def _absent_reason(
    name: str, published: bool | None, point: float | None, n_pos: int, n_neg: int
) -> str:
    """Why ``name`` has no interval (ABSENT_REASONS): ``published`` and ``point`` are the
    publication rule and the point value of a bootstrap metric (None for the others)."""
    if name in NO_INTERVAL:
        return "no_method"
    if name in COUNT_REGULAR:
        return "undefined"
    if published is not None:
        if not published:
            return "prior_out_of_range"
        return (
            "undefined"
            if point is None or not math.isfinite(point)
            else ("undefined_in_replicates")
        )
    return _mean_absent(name, n_pos, n_neg)


def _mean_absent(name: str, n_pos: int, n_neg: int) -> str:
    """Why the mean metric ``name`` (MEAN_METRICS, ``ks_abc``) of a set with ``n_pos`` and
    ``n_neg`` rows has no interval (ABSENT_REASONS), given :func:`mean_intervals` gave None."""
    if name == "brier_skill":
        return "undefined" if n_pos == 0 or n_neg == 0 else "too_few_rows"
    needs = {"ks_abc": (True, True), "brier_pos": (True, False), "brier_neg": (False, True)}
    pos, neg = needs.get(name, (False, False))
    if (pos and n_pos == 0) or (neg and n_neg == 0):
        return "undefined"
    if pos and n_pos < MIN_MEAN_TERMS:
        return "too_few_positives"
    if neg and n_neg < MIN_MEAN_TERMS:
        return "too_few_negatives"
    if not (pos or neg) and n_pos + n_neg < MIN_MEAN_TERMS:
        return "too_few_rows"
    return "constant_scores"


def _curve_replicates(thresholds: FloatArray, reps: Replicates, pi0: list[float]) -> Values:
    """BOOTSTRAP_REGULAR (by name) and BOOTSTRAP_CALIBRATED (as ``"name@repr(π0)"``) of each
    replicate, shape (B,)."""
    curves = curve_metrics(
        thresholds, reps.pos, reps.neg_tied, reps.neg_above, reps.neg_below, pi0=pi0
    )
    values = {name: np.asarray(curves.regular[name], np.float64) for name in BOOTSTRAP_REGULAR}
    for p in pi0:
        for name in BOOTSTRAP_CALIBRATED:
            values[f"{name}@{p!r}"] = np.asarray(curves.calibrated[p][name], np.float64)
    return values
