"""Threshold advice at a window's class ratio, from the reference's class-conditional scores.

Assumption (label shift, as in :mod:`calmon.metrics.label_free`): the window's P(score | y) is
the reference's; only π moved. The reference's :class:`~calmon.metrics.ranking.Ranking` then
gives, at each of its distinct positive scores t_k (the only thresholds where the recall
moves), TPR(t_k) = TP_k / n_pos and FPR(t_k) = FP_k / n_neg, which do not depend on π, and
at any prior π:

    precision(t) = π·TPR / (π·TPR + (1 - π)·FPR)
    alert_rate(t) = π·TPR + (1 - π)·FPR          (the fraction of predictions flagged)
    cost(t) = c_fp·(1 - π)·FPR + c_fn·π·(1 - TPR)  (expected cost per prediction)

TPR and FPR are the reference's estimates, not its truth: above its highest-scoring negative
the reference's FPR is exactly 0 and the precision there 1 at any prior, however few
negatives stand behind that 0. :func:`expected_bounds` therefore bounds each quantity by the
reference's sampling: a one-sided Wilson bound on TPR (positives) and on FPR (negatives), each
at √(0.975) (for :data:`LEVEL` 0.95), so that, the two classes being independent samples, each
end of a 95% interval holds with probability 0.975. The FPR's upper bound is never 0
(z²/(n_neg + z²) at FP = 0). An objective picks one t_k from them (:func:`advise`), and
:func:`window_advice` withholds a threshold whose objective (a precision, a budget, a cost)
a window of this size could not keep (:func:`window_hold`). Where the assumption fails (a
likelihood drift), these expectations are wrong in a direction no prior can fix:
:func:`class_shift_p_value` tests it from a window's labelled scores (two-sample
Kolmogorov-Smirnov per class against the reference, at the reference's thresholds).

:func:`window_advice` gives the ``advice`` of a window record: the window's class ratio comes
from its labels when it has enough of them (``measured``), else from the label-free estimate,
only where that estimate's label-shift check holds (``estimated``); otherwise there is no
advice and the record says why (:func:`window_prior`, ``docs/reference/acting.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Final

import numpy as np

from calmon.arrays import BoolArray, FloatArray, IntArray
from calmon.metrics.intervals import wilson_interval
from calmon.metrics.prepared import PreparedSet
from calmon.metrics.ranking import Ranking

#: The objectives a model may configure (one key each).
OBJECTIVES: Final = ("target_precision", "costs", "alert_rate")
#: A window's own prior is used when at least this share of its scored predictions is
#: labelled, with at least :data:`MIN_CLASS_ROWS` labelled rows of each class.
MIN_LABELLED_SHARE: Final = 0.9
MIN_CLASS_ROWS: Final = 30
#: The measured path's assumption check fails below this p-value (per-class KS, Bonferroni).
ALPHA: Final = 0.01
ASSUMPTION_METHOD: Final = "ks_by_class"
#: Terms of the Kolmogorov series (its terms fall as exp(-2 j² λ²)).
KS_TERMS: Final = 100
#: Thresholds whose bounds :func:`advise` computes at a time (:func:`_last`).
_CHUNK: Final = 2048
#: Level of the expected values' intervals (the reference's sampling only).
LEVEL: Final = 0.95
#: A target precision is held when a window's precision is within this of it ...
PRECISION_TOLERANCE: Final = 0.05
#: ... with at least this probability (:func:`hold_probability`); otherwise no advice.
HOLD_PROBABILITY: Final = 0.9
#: An alert budget r is kept when a window flags at most r·(1 + this) of its predictions, and
#: a cost is no worse than promised when a window's cost per prediction is at most the upper
#: end of the expected cost's interval·(1 + this), each with :data:`HOLD_PROBABILITY`
#: (:func:`window_hold`).
RELATIVE_TOLERANCE: Final = 0.1
#: The largest window, in rows, that :func:`rows_needed` names.
MAX_ROWS: Final = 10**9
#: z of each class's one-sided bound, so that both hold at once w.p. 1 - (1 - LEVEL)/2.
_Z_CLASS: Final = NormalDist().inv_cdf(math.sqrt(1.0 - (1.0 - LEVEL) / 2.0))
#: z of a two-sided interval at :data:`LEVEL` (the recall, the class ratio).
_Z_LEVEL: Final = NormalDist().inv_cdf(0.5 + LEVEL / 2.0)


@dataclass(frozen=True, slots=True)
class Advice:
    """The threshold an objective picks at a prior, and what it is expected to give there
    (``cost`` per prediction, NaN without a cost objective), with ``intervals``: name ->
    [lower, upper] at :data:`LEVEL` over the reference's sampling (``cost`` only with a cost
    objective)."""

    threshold: float
    precision: float
    recall: float
    alert_rate: float
    cost: float
    intervals: Mapping[str, list[float]]


def objective_kind(objective: Mapping[str, Any]) -> str:
    """The one key of :data:`OBJECTIVES` an objective holds."""
    (kind,) = objective.keys() & set(OBJECTIVES)
    return str(kind)


def expected_curves(ranking: Ranking, prior: float) -> dict[str, FloatArray]:
    """(K,) ``threshold`` (descending), ``recall``, ``fpr``, ``precision``, ``alert_rate`` of
    the reference at ``prior`` at each of its distinct positive scores; the reference must
    hold both classes."""
    tpr = ranking.tp / ranking.n_pos
    fpr = ranking.fp / ranking.n_neg
    flagged = prior * tpr + (1.0 - prior) * fpr
    return {
        "threshold": ranking.thresholds,
        "recall": tpr,
        "fpr": fpr,
        "precision": prior * tpr / flagged,
        "alert_rate": flagged,
    }


def wilson_arrays(successes: IntArray, trials: int, z: float) -> tuple[FloatArray, FloatArray]:
    """Element-wise Wilson score bounds (lower, upper) of successes/trials at quantile z, as
    :func:`calmon.metrics.intervals.wilson_bounds` for one proportion; ``trials`` > 0. The upper
    bound of 0 successes is z²/(trials + z²), never 0; the ends hold the estimate."""
    p = successes / trials
    denominator = 1.0 + z * z / trials
    centre = (p + z * z / (2.0 * trials)) / denominator
    half = z * np.sqrt(p * (1.0 - p) / trials + z * z / (4.0 * trials * trials)) / denominator
    lower: FloatArray = np.clip(np.minimum(p, centre - half), 0.0, 1.0)
    upper: FloatArray = np.clip(np.maximum(p, centre + half), 0.0, 1.0)
    return lower, upper


def _precision(prior: float, tpr: FloatArray, fpr: FloatArray) -> FloatArray:
    flagged = prior * tpr + (1.0 - prior) * fpr
    out: FloatArray = np.divide(prior * tpr, flagged, out=np.zeros_like(flagged), where=flagged > 0)
    return out


def expected_bounds(
    ranking: Ranking, prior: float, at: IntArray | None = None
) -> dict[str, tuple[FloatArray, FloatArray]]:
    """(lower, upper) of ``recall``, ``tpr``, ``fpr``, ``precision`` and ``alert_rate`` at
    ``prior`` at each threshold of :func:`expected_curves` (K,), or at its indices ``at``
    only, over the reference's sampling at :data:`LEVEL` (two-sided; each end fails with
    probability at most (1 - LEVEL)/2).

    TPR and FPR are bounded one-sided with Wilson at √(1 - (1 - LEVEL)/2) each; as the
    classes are independent samples, both hold at once with probability 1 - (1 - LEVEL)/2,
    and every quantity monotone in both is then bounded by its value at the corner:
    precision ≥ precision(TPR_lo, FPR_hi), alert_rate ≤ π·TPR_hi + (1 - π)·FPR_hi, and so on.
    ``recall`` alone is Wilson's two-sided interval at LEVEL. The prior is taken as known:
    its own error is not in these bounds."""
    tp, fp = ranking.tp, ranking.fp
    if at is not None:
        tp, fp = tp[at], fp[at]
    t_lo, t_hi = wilson_arrays(tp, ranking.n_pos, _Z_CLASS)
    f_lo, f_hi = wilson_arrays(fp, ranking.n_neg, _Z_CLASS)
    return {
        "recall": wilson_arrays(tp, ranking.n_pos, _Z_LEVEL),
        "tpr": (t_lo, t_hi),
        "fpr": (f_lo, f_hi),
        "precision": (_precision(prior, t_lo, f_hi), _precision(prior, t_hi, f_lo)),
        "alert_rate": (
            prior * t_lo + (1.0 - prior) * f_lo,
            prior * t_hi + (1.0 - prior) * f_hi,
        ),
    }


def _last(candidates: IntArray, qualifies: Callable[[IntArray], BoolArray]) -> int | None:
    """The last of ``candidates`` (ascending indices) that ``qualifies``, or None; bounds are
    computed a chunk of :data:`_CHUNK` from the end at a time, as the answer is nearly always
    among the last few candidates (K runs to 10^5 and more)."""
    end = candidates.size
    while end > 0:
        chunk = candidates[max(0, end - _CHUNK) : end]
        found = np.flatnonzero(qualifies(chunk))
        if found.size:
            return int(chunk[found[-1]])
        end -= _CHUNK
    return None


def _costs(costs: Mapping[str, Any], prior: float, tpr: FloatArray, fpr: FloatArray) -> FloatArray:
    out: FloatArray = float(costs["false_positive"]) * (1.0 - prior) * fpr + float(
        costs["false_negative"]
    ) * prior * (1.0 - tpr)
    return out


def advise(ranking: Ranking, *, prior: float, objective: Mapping[str, Any]) -> Advice | None:
    """The advised threshold for ``objective`` at ``prior`` ∈ (0, 1), or None when no
    threshold meets it (or the reference lacks a class).

    - ``{"target_precision": p}``: the lowest threshold whose expected precision is ≥ p and
      whose lower bound (:func:`expected_bounds`) is ≥ p - :data:`PRECISION_TOLERANCE` (the
      most recall at that precision, where the reference shows it); above the reference's top
      negative the lower bound is below 1 by as much as its few positives there allow;
    - ``{"costs": {"false_positive": c_fp, "false_negative": c_fn}}``: the threshold of least
      expected cost (the highest one on a tie); its interval is the cost at the corners of the
      TPR/FPR bounds;
    - ``{"alert_rate": r}``: the lowest threshold whose alert rate's upper bound is ≤ r (a
      budget kept whatever the reference's sampling hid).
    """
    if ranking.n_pos == 0 or ranking.n_neg == 0:
        return None
    curves = expected_curves(ranking, prior)
    costs = objective.get("costs")
    cost = np.full(ranking.thresholds.size, np.nan)
    if costs is not None:
        cost = _costs(costs, prior, curves["recall"], curves["fpr"])
    kind = objective_kind(objective)
    found: int | None
    if kind == "costs":
        found = int(np.argmin(cost))
    elif kind == "target_precision":
        target = float(objective["target_precision"])
        found = _last(
            np.flatnonzero(curves["precision"] >= target),
            lambda at: (
                expected_bounds(ranking, prior, at)["precision"][0] >= target - PRECISION_TOLERANCE
            ),
        )
    else:
        budget = float(objective["alert_rate"])
        found = _last(
            np.flatnonzero(curves["alert_rate"] <= budget),
            lambda at: expected_bounds(ranking, prior, at)["alert_rate"][1] <= budget,
        )
    if found is None:
        return None
    k = found
    bounds = expected_bounds(ranking, prior, np.array([k]))
    intervals = {
        name: [float(bounds[name][0][0]), float(bounds[name][1][0])]
        for name in ("precision", "recall", "alert_rate")
    }
    if costs is not None:
        (t_lo, t_hi), (f_lo, f_hi) = bounds["tpr"], bounds["fpr"]
        low = _costs(costs, prior, t_hi, f_lo)
        high = _costs(costs, prior, t_lo, f_hi)
        intervals["cost"] = [float(low[0]), float(high[0])]
    return Advice(
        threshold=float(curves["threshold"][k]),
        precision=float(curves["precision"][k]),
        recall=float(curves["recall"][k]),
        alert_rate=float(curves["alert_rate"][k]),
        cost=float(cost[k]),
        intervals=intervals,
    )


@dataclass(frozen=True, slots=True)
class Spread:
    """Standard deviations of the value a window gives at an advised threshold, by source
    (:func:`precision_spread`, :func:`alert_rate_spread`, :func:`cost_spread`)."""

    window: float
    reference: float
    ratio: float

    @property
    def total(self) -> float:
        """The three together (independent errors)."""
        return math.sqrt(self.window**2 + self.reference**2 + self.ratio**2)

    def at_rows(self, factor: float) -> Spread:
        """The spread of a window ``factor`` times this one's size: the window's own sampling
        and the ratio's error (measured from, or estimated on, the window) scale as
        1/√factor; the reference's does not."""
        shrink = 1.0 / math.sqrt(factor)
        return Spread(self.window * shrink, self.reference, self.ratio * shrink)


def _ratio_sd(prior_interval: Sequence[float] | None) -> float:
    """The class ratio's standard deviation from its interval at :data:`LEVEL` (0 if none)."""
    if prior_interval is None:
        return 0.0
    lo, hi = (float(x) for x in prior_interval)
    return max(hi - lo, 0.0) / (2.0 * _Z_LEVEL)


def _fpr(advice: Advice, prior: float) -> float:
    """The reference's FPR at the advised threshold, from its expected alert rate."""
    return max(advice.alert_rate - prior * advice.recall, 0.0) / (1.0 - prior)


def precision_spread(
    advice: Advice, *, window_rows: int, prior_interval: Sequence[float] | None
) -> Spread:
    """How much the precision that a window of ``window_rows`` predictions gives at the
    advised threshold varies around the expected ``advice.precision`` = p, from three
    independent errors (delta method):

    - ``window``, its own sampling: given the M = window_rows·alert_rate rows it flags, its
      true positives are binomial, √(p(1 - p)/M); infinite when M = 0;
    - ``reference``, the reference's: (p - its lower bound)/z of that bound (at most, as the
      bound moves both classes' rates to their ends at once);
    - ``ratio``, the class ratio's, when its ``prior_interval`` (at :data:`LEVEL`) is known:
      the precision's log-odds move one for one with the ratio's, so p(1 - p)·(the width of
      the ratio's log-odds interval)/(2·z).

    Precision is a ratio of counts: no reference, however large, makes a threshold that flags
    a handful of rows a window hold a target."""
    p = advice.precision
    flagged = window_rows * advice.alert_rate
    window = math.sqrt(p * (1.0 - p) / flagged) if flagged > 0.0 else math.inf
    reference = (p - advice.intervals["precision"][0]) / _Z_CLASS
    ratio = 0.0
    if prior_interval is not None:
        lo, hi = (min(max(x, 1e-12), 1.0 - 1e-12) for x in prior_interval)
        width = math.log(hi / (1.0 - hi)) - math.log(lo / (1.0 - lo))
        ratio = p * (1.0 - p) * width / (2.0 * _Z_LEVEL)
    return Spread(window=window, reference=reference, ratio=ratio)


def alert_rate_spread(
    advice: Advice, *, prior: float, window_rows: int, prior_interval: Sequence[float] | None
) -> Spread:
    """How much the alert rate a = π·TPR + (1 - π)·FPR that a window of ``window_rows``
    predictions gives at the advised threshold varies around ``advice.alert_rate``:
    ``window``, each row flagged independently with probability a, √(a(1 - a)/rows);
    ``reference``, (its upper bound - a)/z of that bound; ``ratio``, |TPR - FPR| times the
    ratio's standard deviation (its interval's width/(2·z))."""
    a = advice.alert_rate
    window = math.sqrt(a * (1.0 - a) / window_rows) if window_rows > 0 else math.inf
    reference = (advice.intervals["alert_rate"][1] - a) / _Z_CLASS
    ratio = abs(advice.recall - _fpr(advice, prior)) * _ratio_sd(prior_interval)
    return Spread(window=window, reference=reference, ratio=ratio)


def cost_spread(
    advice: Advice,
    *,
    costs: Mapping[str, Any],
    prior: float,
    window_rows: int,
    prior_interval: Sequence[float] | None,
) -> Spread:
    """How much the cost per prediction c = (c_fp·FP + c_fn·FN)/rows that a window of
    ``window_rows`` predictions gives at the advised threshold varies around ``advice.cost``:
    ``window``, FP and FN being two cells of a multinomial with probabilities
    q_fp = (1 - π)·FPR and q_fn = π·(1 - TPR),
    √((c_fp²·q_fp(1 - q_fp) + c_fn²·q_fn(1 - q_fn) - 2·c_fp·c_fn·q_fp·q_fn)/rows);
    ``reference``, (its upper bound - c)/z of that bound; ``ratio``,
    |c_fn·(1 - TPR) - c_fp·FPR| times the ratio's standard deviation."""
    c_fp, c_fn = float(costs["false_positive"]), float(costs["false_negative"])
    fpr = _fpr(advice, prior)
    q_fp, q_fn = (1.0 - prior) * fpr, prior * (1.0 - advice.recall)
    variance = (
        c_fp * c_fp * q_fp * (1.0 - q_fp)
        + c_fn * c_fn * q_fn * (1.0 - q_fn)
        - 2.0 * c_fp * c_fn * q_fp * q_fn
    )
    window = math.sqrt(max(variance, 0.0) / window_rows) if window_rows > 0 else math.inf
    reference = (advice.intervals["cost"][1] - advice.cost) / _Z_CLASS
    ratio = abs(c_fn * (1.0 - advice.recall) - c_fp * fpr) * _ratio_sd(prior_interval)
    return Spread(window=window, reference=reference, ratio=ratio)


def _within(mean: float, spread: float, low: float, high: float) -> float:
    """P(low ≤ X ≤ high) for X normal with ``mean`` and standard deviation ``spread``."""
    if not math.isfinite(spread):
        return 0.0
    if spread <= 0.0:
        return float(low <= mean <= high)
    normal = NormalDist(mean, spread)
    return (1.0 if math.isinf(high) else normal.cdf(high)) - (
        0.0 if math.isinf(low) else normal.cdf(low)
    )


def hold_probability(precision: float, spread: float, target: float) -> float:
    """P(|X - target| ≤ :data:`PRECISION_TOLERANCE`) for X normal with mean ``precision`` and
    standard deviation ``spread``: how often a window's precision holds the target."""
    return _within(precision, spread, target - PRECISION_TOLERANCE, target + PRECISION_TOLERANCE)


def upper_hold_probability(mean: float, spread: float, limit: float) -> float:
    """P(X ≤ ``limit``) for X normal with ``mean`` and standard deviation ``spread``: how
    often a window's alert rate keeps a budget, or its cost the promise (:func:`window_hold`)."""
    return _within(mean, spread, -math.inf, limit)


@dataclass(frozen=True, slots=True)
class Hold:
    """Whether a window of ``rows`` predictions keeps what an objective's advice promises:
    its ``quantity`` (``precision``, ``alert_rate`` or ``cost``) has expectation ``mean`` and
    ``spread``, and the promise is kept when it lies in [``low``, ``high``]."""

    quantity: str
    mean: float
    spread: Spread
    rows: int
    low: float
    high: float

    def probability(self, factor: float = 1.0) -> float:
        """How often a window ``factor`` times this one's size keeps it (normal model)."""
        return _within(self.mean, self.spread.at_rows(factor).total, self.low, self.high)

    def rows_needed(self) -> int | None:
        """The fewest rows a window needs to keep it with :data:`HOLD_PROBABILITY` (to about
        2%), with this reference at this ratio; None when none up to :data:`MAX_ROWS` does
        (the reference's error alone is too large, or the expectation is off the promise)."""
        top = MAX_ROWS / max(self.rows, 1)
        if self.probability(top) < HOLD_PROBABILITY:
            return None
        low, high = 1.0, top
        while high / low > 1.02:
            middle = math.sqrt(low * high)
            low, high = (
                (middle, high)
                if self.probability(middle) < HOLD_PROBABILITY
                else (
                    low,
                    middle,
                )
            )
        return math.ceil(high * max(self.rows, 1))

    def reference_factor(self) -> float | None:
        """How many times as many reference rows (at the same class ratio) would let a large
        enough window keep it, the reference's error shrinking as 1/√rows; None when its
        expectation is off the promise (no reference helps) or beyond 10^6 times."""

        def held(factor: float) -> bool:
            alone = Spread(0.0, self.spread.reference / math.sqrt(factor), 0.0)
            return _within(self.mean, alone.total, self.low, self.high) >= HOLD_PROBABILITY

        if not held(1e6):
            return None
        low, high = 1.0, 1e6
        while high / low > 1.02:
            middle = math.sqrt(low * high)
            low, high = (middle, high) if not held(middle) else (low, middle)
        return high


def window_hold(
    objective: Mapping[str, Any],
    advice: Advice,
    *,
    prior: float,
    rows: int,
    prior_interval: Sequence[float] | None,
) -> Hold:
    """The :class:`Hold` of ``advice`` for ``objective`` on a window of ``rows`` predictions
    at ``prior`` (whose interval at :data:`LEVEL` is ``prior_interval``, None if unknown):

    - ``target_precision`` p: the precision within ±:data:`PRECISION_TOLERANCE` of p;
    - ``alert_rate`` r: the alert rate at most r·(1 + :data:`RELATIVE_TOLERANCE`);
    - ``costs``: the cost per prediction at most the upper end of the expected cost's 95%
      interval·(1 + :data:`RELATIVE_TOLERANCE`) (no worse than promised: the interval holds
      the reference's error, the tolerance the window's)."""
    kind = objective_kind(objective)
    if kind == "target_precision":
        target = float(objective["target_precision"])
        spread = precision_spread(advice, window_rows=rows, prior_interval=prior_interval)
        return Hold(
            "precision",
            advice.precision,
            spread,
            rows,
            target - PRECISION_TOLERANCE,
            target + PRECISION_TOLERANCE,
        )
    if kind == "alert_rate":
        budget = float(objective["alert_rate"])
        spread = alert_rate_spread(
            advice, prior=prior, window_rows=rows, prior_interval=prior_interval
        )
        return Hold(
            "alert_rate",
            advice.alert_rate,
            spread,
            rows,
            -math.inf,
            budget * (1 + RELATIVE_TOLERANCE),
        )
    spread = cost_spread(
        advice,
        costs=objective["costs"],
        prior=prior,
        window_rows=rows,
        prior_interval=prior_interval,
    )
    promised = advice.intervals["cost"][1] * (1 + RELATIVE_TOLERANCE)
    return Hold("cost", advice.cost, spread, rows, -math.inf, promised)


def kolmogorov_p_value(statistic: float, n1: int, n2: int) -> float:
    """Asymptotic p-value of a two-sample KS statistic D for samples of n1 and n2 rows:
    Q(λ) = 2 Σ (-1)^(j-1) exp(-2 j² λ²), λ = D·√(n1·n2/(n1 + n2)); 1 for λ ≤ 0."""
    lam = statistic * math.sqrt(n1 * n2 / (n1 + n2))
    if lam <= 0.0:
        return 1.0
    j = np.arange(1, KS_TERMS + 1, dtype=np.float64)
    total = 2.0 * float(np.sum((-1.0) ** (j - 1) * np.exp(-2.0 * j * j * lam * lam)))
    return float(min(max(total, 0.0), 1.0))


def class_shift_p_value(ranking: Ranking, pos_sorted: FloatArray, neg_sorted: FloatArray) -> float:
    """p-value of "the window's P(score | y) is the reference's", from the window's labelled
    scores of each class (ascending): the smaller of the two per-class KS p-values, doubled
    (Bonferroni), capped at 1. NaN unless both sets hold both classes.

    The statistic compares the survival functions P(s ≥ t | y) at the reference's distinct
    positive scores only (where the reference's negatives are counted), which is at most the
    full KS distance: the test is conservative, never more alarming than the full one."""
    if ranking.n_pos == 0 or ranking.n_neg == 0 or pos_sorted.size == 0 or neg_sorted.size == 0:
        return float("nan")
    t = ranking.thresholds
    p_values = []
    for reference_survival, window, n_ref in (
        (ranking.tp / ranking.n_pos, pos_sorted, ranking.n_pos),
        (ranking.fp / ranking.n_neg, neg_sorted, ranking.n_neg),
    ):
        survival = (window.size - np.searchsorted(window, t, side="left")) / window.size
        statistic = float(np.max(np.abs(survival - reference_survival)))
        p_values.append(kolmogorov_p_value(statistic, n_ref, int(window.size)))
    return float(min(1.0, 2.0 * min(p_values)))


def labels_measure_prior(*, n: int, n_pos: int, unlabelled: int) -> bool:
    """Whether a window's labels measure its class ratio (``n`` labelled predictions, ``n_pos``
    positives among them, ``unlabelled`` without a label): at least
    :data:`MIN_LABELLED_SHARE` of its scored predictions labelled, with
    :data:`MIN_CLASS_ROWS` of each class. Then its own prior is the advice's and the
    recalibration map's, and the label-free estimate is not computed (nothing reads it)."""
    scored = n + unlabelled
    return (
        scored > 0 and n >= MIN_LABELLED_SHARE * scored and min(n_pos, n - n_pos) >= MIN_CLASS_ROWS
    )


def window_prior(
    *, result: Mapping[str, Any], unlabelled: int, estimated: Mapping[str, Any] | None
) -> tuple[float | None, str | None, str | None]:
    """(prior, source, reason): the window's class ratio and where it comes from
    (``measured`` or ``estimated``), or (None, None, why there is none)."""
    n, n_pos = int(result["n"]), int(result["n_pos"])
    scored = n + unlabelled
    if labels_measure_prior(n=n, n_pos=n_pos, unlabelled=unlabelled):
        return float(result["prior"]), "measured", None
    labels = (
        f"{n} of {scored} predictions labelled ({n_pos} positive); the measured ratio needs "
        f"{MIN_LABELLED_SHARE:.0%} labelled and {MIN_CLASS_ROWS} of each class"
    )
    if estimated is None:
        return None, None, f"{labels}, and there is no label-free estimate"
    check = estimated["label_shift"]
    if not isinstance(check, dict) or check.get("holds") is not True:
        state = (
            "has no label-shift check"
            if not isinstance(check, dict)
            else "could not be run"
            if check.get("holds") is None
            else "does not hold"
        )
        return None, None, f"{labels}, and the label-free estimate's label-shift check {state}"
    ratio = estimated.get("positive_class_ratio")
    if ratio is None:
        return None, None, f"{labels}, and the label-free estimate has no ratio"
    return float(ratio), "estimated", None


def window_advice(
    *,
    objective: Mapping[str, Any],
    threshold: float,
    prepared: PreparedSet,
    result: Mapping[str, Any],
    unlabelled: int,
    reference: Ranking | None,
    estimated: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ``advice`` of a window record for ``objective`` (the model's, whose threshold is
    ``threshold``), from the window's labelled classes ``prepared`` and its ``result``, against
    the ranking of its ``reference`` (None: no usable reference).

    ``threshold`` and ``expected`` are null with a ``reason`` when there is no advice.
    ``assumption`` says whether label shift was checked and held: from the window's labels
    (``ks_by_class``) on the measured path, from the label-free check on the estimated one.
    ``expected_intervals`` holds the 95% intervals of the expected values (:func:`advise`):
    they cover the reference's sampling at the window's ratio, not the next window's own
    noise nor the ratio's error. Advice is given only when a window of this one's size
    (``result["n"]`` + ``unlabelled``) would keep the objective with probability
    :data:`HOLD_PROBABILITY` (:func:`window_hold`); otherwise ``reason`` says how many rows the
    threshold would flag, how often it would keep it, which error weighs most and what window
    or reference size would make advice possible (``docs/reference/acting.md``)."""
    out: dict[str, Any] = {
        "objective": objective,
        "configured_threshold": threshold,
        "prior": None,
        "prior_source": None,
        "threshold": None,
        "expected": None,
        "expected_intervals": None,
        "assumption": None,
        "reason": None,
    }
    if reference is None or reference.n_pos == 0 or reference.n_neg == 0:
        out["reason"] = "the reference has no labelled rows of both classes"
        return out
    prior, source, reason = window_prior(result=result, unlabelled=unlabelled, estimated=estimated)
    out["prior"], out["prior_source"] = prior, source
    if prior is None:
        out["reason"] = reason
        return out
    if source == "measured":
        p_value = class_shift_p_value(reference, prepared.pos_sorted, prepared.neg_sorted)
        out["assumption"] = {
            "holds": p_value >= ALPHA,
            "p_value": p_value,
            "method": ASSUMPTION_METHOD,
        }
    else:
        check = (estimated or {})["label_shift"]
        out["assumption"] = {
            "holds": True,
            "p_value": check.get("p_value"),
            "method": check.get("method"),
        }
    if not 0.0 < prior < 1.0:
        out["reason"] = f"the window's class ratio is {prior:g}: no threshold separates classes"
        return out
    advice = advise(reference, prior=prior, objective=objective)
    if advice is None:
        out["reason"] = _unmet(objective, reference)
        return out
    rows = int(result["n"]) + unlabelled
    interval = (
        wilson_interval(int(result["n_pos"]), int(result["n"]), LEVEL)
        if source == "measured"
        else (estimated or {}).get("positive_class_ratio_interval")
    )
    hold = window_hold(objective, advice, prior=prior, rows=rows, prior_interval=interval)
    held = hold.probability()
    if held < HOLD_PROBABILITY:
        out["reason"] = _not_held(advice, hold, held=held)
        return out
    out["threshold"] = advice.threshold
    out["expected"] = {
        "precision": advice.precision,
        "recall": advice.recall,
        "alert_rate": advice.alert_rate,
        "cost": advice.cost,
    }
    out["expected_intervals"] = {
        "precision": advice.intervals["precision"],
        "recall": advice.intervals["recall"],
        "alert_rate": advice.intervals["alert_rate"],
        "cost": advice.intervals.get("cost"),
    }
    return out


def _unmet(objective: Mapping[str, Any], reference: Ranking) -> str:
    counts = f"the reference's {reference.n_pos} positives and {reference.n_neg} negatives"
    if "target_precision" in objective:
        target = float(objective["target_precision"])
        return (
            f"no threshold meets the objective at this class ratio: none has an expected "
            f"precision of at least {target:g} with its 95% lower bound within "
            f"{PRECISION_TOLERANCE:g} of it ({counts})"
        )
    if "alert_rate" in objective:
        return (
            "no threshold meets the objective at this class ratio: none flags at most "
            f"{float(objective['alert_rate']):g} of the predictions at its 95% upper bound "
            f"({counts})"
        )
    return "no threshold meets the objective at this class ratio"


def _not_held(advice: Advice, hold: Hold, *, held: float) -> str:
    spread, rows = hold.spread, hold.rows
    flagged = rows * advice.alert_rate
    sources = {
        "the window's own sampling (too few flagged rows)": spread.window,
        "the reference's sampling (too few reference rows at this threshold)": spread.reference,
        "the class ratio's error": spread.ratio,
    }
    worst = max(sources, key=lambda name: sources[name])
    p = advice.precision
    lo, hi = advice.intervals[hold.quantity]
    deviations = (
        f"standard deviations: {spread.window:.3g} from the window, {spread.reference:.3g} "
        f"from the reference, {spread.ratio:.3g} from the ratio"
    )
    if hold.quantity == "precision":
        target = (hold.low + hold.high) / 2.0
        text = (
            f"the target would not hold on a window of this size: mostly from {worst}. At this "
            f"class ratio the threshold {advice.threshold:.4g} (expected precision {p:.3f}, 95% "
            f"interval {lo:.3f}-{hi:.3f}) would flag about {flagged:.1f} of a window's {rows} "
            f"predictions ({flagged * p:.1f} of them positive); the window's precision would "
            f"be within ±{PRECISION_TOLERANCE:g} of {target:g} in {held:.0%} of windows, under "
            f"the {HOLD_PROBABILITY:.0%} needed ({deviations})"
        )
    elif hold.quantity == "alert_rate":
        text = (
            f"the budget would not be kept on a window of this size: mostly from {worst}. At "
            f"this class ratio the threshold {advice.threshold:.4g} (expected alert rate "
            f"{advice.alert_rate:.4g}, 95% interval {lo:.4g}-{hi:.4g}) would flag about "
            f"{flagged:.1f} of a window's {rows} predictions; the window would flag at most "
            f"{hold.high:.4g} of them (the budget and {RELATIVE_TOLERANCE:.0%}) in {held:.0%} "
            f"of windows, under the {HOLD_PROBABILITY:.0%} needed ({deviations})"
        )
    else:
        text = (
            f"the cost would not be kept on a window of this size: mostly from {worst}. At "
            f"this class ratio the threshold {advice.threshold:.4g} (expected cost "
            f"{advice.cost:.4g} per prediction, 95% interval {lo:.4g}-{hi:.4g}) would flag "
            f"about {flagged:.1f} of a window's {rows} predictions; the window's cost would be "
            f"at most {hold.high:.4g} (the interval's upper end and {RELATIVE_TOLERANCE:.0%}) in "
            f"{held:.0%} of windows, under the {HOLD_PROBABILITY:.0%} needed ({deviations})"
        )
    return text + ". " + _what_would_help(hold)


#: The larger reference :func:`_what_would_help` weighs, as a multiple of the rows.
LARGER_REFERENCE: Final = 4


def _what_would_help(hold: Hold) -> str:
    """What would make advice possible, by the normal model of :class:`Hold` (approximate):
    the window size that would keep the objective with this reference; when none does, or it
    is over ten times this window, the size with a reference :data:`LARGER_REFERENCE` times
    as large (the reference's error shrinking as 1/√rows), or how much larger a reference
    would have to be."""
    needed = hold.rows_needed()
    parts = []
    if needed is not None:
        parts.append(
            f"With this reference, windows of about {needed} predictions would keep it "
            "(e.g. a longer window)"
        )
    else:
        parts.append("No window size would keep it with this reference")
    if needed is None or needed > 10 * hold.rows:
        spread = hold.spread
        larger = Hold(
            hold.quantity,
            hold.mean,
            Spread(spread.window, spread.reference / math.sqrt(LARGER_REFERENCE), spread.ratio),
            hold.rows,
            hold.low,
            hold.high,
        ).rows_needed()
        factor = hold.reference_factor()
        if larger is not None:
            parts.append(
                f"with a reference {LARGER_REFERENCE} times as large (in rows at the same class "
                f"ratio), windows of about {larger} would"
            )
        elif factor is not None:
            parts.append(
                f"its own error needs a reference about {factor:.1f} times as large (in rows "
                "at the same class ratio) for a large enough window to keep it"
            )
        elif needed is None:
            parts.append(
                "nor would a larger reference: the expected value at this threshold is itself "
                "off the objective's tolerance"
            )
    return "; ".join(parts)
