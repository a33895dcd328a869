"""Label-free estimates of a window: its positive class ratio π̂ and its metrics at π̂.

Assumption (label shift): the window may have another positive ratio π than the reference,
but the distribution of scores within each class, P(score | y), is the reference's. Under
that assumption alone, unlabelled scores determine π; nothing here can see a change of
P(score | y) (a likelihood drift), which only labels reveal (``docs/metrics.md``).

Method (Saerens, Latinne & Decaestecker 2002, on scores recalibrated on the reference):

1. The reference, given as its :class:`~app.metrics.ranking.Ranking`, is split into its
   elementary groups in ascending score order: the negatives below the lowest positive score,
   then for each distinct positive score t_k the rows at t_k, then the negatives strictly
   between t_k and t_{k+1}, …, the negatives above the highest. Pool-adjacent-violators
   (isotonic regression of the label on the score, weighted by group size) merges them into
   J levels with a nondecreasing positive fraction q_j = pos_j / (pos_j + neg_j): the
   isotonic recalibration of the score on the reference, valid for score models too.
2. Each window score falls into one level (the level of its group). With
   a_j = P(level j | y = 1) and b_j = P(level j | y = 0) from the reference counts (plus
   :data:`PSEUDOCOUNT`, see :func:`class_shares`), the prior-adjusted probability of a row of
   level j at prior π is p'_j(π) = π·a_j / (π·a_j + (1 - π)·b_j), which is the prior
   adjustment p' = (π/π_ref)·q / ((π/π_ref)·q + ((1 - π)/(1 - π_ref))·(1 - q)) of q = q_j.
3. Saerens' EM iterates π ← mean of p'(π) over the window's rows; its fixed point is the
   maximum-likelihood π of the mixture π·a + (1 - π)·b, whose score equation
   Σ_j m_j (a_j - b_j) / (π a_j + (1 - π) b_j) = 0 (m_j window rows in level j) is decreasing
   in π. It is solved here by bisection on [0, 1] (:data:`BISECTIONS` steps, to 2^-60), which
   reaches the EM fixed point exactly instead of iterating EM to a tolerance; 0 or 1 when the
   score equation keeps its sign.
4. 95% interval: π̂ ± 1.96·sd, sd the standard deviation of π̂ over a Poisson bootstrap of
   the window and of the reference at once, by level (window counts m_j, reference counts
   pos_j and neg_j), the levels kept fixed; clipped to [0, 1]. Any fixed grouping keeps
   P(level | y) unchanged under label shift, so the replicates estimate the same π. The
   normal form, not the percentile interval: π̂ is skewed and slightly biased upwards at small
   π (the levels are fitted on the same reference), and percentiles then covered 0.82 at
   π = 0.01 and 10^5 rows, the normal interval 0.95 (``docs/metrics.md``).

Estimated metrics at π̂ are those of the expected confusion counts: each window row counts
p' as a positive and 1 - p' as a negative at its own score, so at threshold τ
TP = Σ_{s ≥ τ} p', FP = Σ_{s ≥ τ} (1 - p'), n_pos = Σ p', and the curves have one block per
distinct window score with these fractional counts. The π0-calibrated metrics reweight the
same counts with r = π̂'(1 - π0)/(π0(1 - π̂')), π̂' = Σ p'/n (= π̂ at an interior
optimum). They hardly depend on π̂: when the window's level counts fit the mixture,
Σ_{level ≥ τ} m_j·p'_j = n·π̂·Σ_{level ≥ τ} a_j, so the expected TPR (and FPR) are the
reference's whatever π̂, and P_c = π0·TPR/(π0·TPR + (1 - π0)·FPR) is the reference's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from app.arrays import FloatArray, IntArray
from app.metrics.curves import curve_metrics
from app.metrics.ranking import Ranking, distinct_runs
from app.metrics.thresholded import threshold_metrics

#: The method named in window records.
METHOD = "saerens_em_isotonic"
#: Bisection steps of the score equation (interval width 2^-60).
BISECTIONS = 60
#: Added to each class count of each level (see :func:`class_shares`).
PSEUDOCOUNT = 0.5
#: Bootstrap replicates of the interval of π̂.
REPLICATES = 400
#: Estimated metrics, regular and calibrated at each π0.
ESTIMATED_REGULAR = ("precision", "recall", "f1", "roc_auc", "average_precision")
ESTIMATED_CALIBRATED = ("precision", "f1", "average_precision")


@dataclass(frozen=True, slots=True)
class LabelShiftReference:
    """The reference recalibrated by isotonic regression, as J levels.

    Attributes:
        group_level: (2K + 2,) the level of each elementary group (see the module docstring),
            indexed by ``searchsorted(ascending, s, "left") + searchsorted(.., "right")``.
        ascending: (K,) the reference's distinct positive scores, ascending.
        pos, neg: (J,) reference positives and negatives of each level.
    """

    group_level: IntArray
    ascending: FloatArray
    pos: FloatArray
    neg: FloatArray

    @property
    def prior(self) -> float:
        """π_ref, the reference's positive ratio."""
        return float(self.pos.sum() / (self.pos.sum() + self.neg.sum()))

    @property
    def fraction(self) -> FloatArray:
        """(J,) q_j, the recalibrated probability of each level (nondecreasing)."""
        out: FloatArray = self.pos / (self.pos + self.neg)
        return out

    def levels(self, scores: FloatArray) -> IntArray:
        """(n,) the level of each score."""
        group = np.searchsorted(self.ascending, scores, side="left") + np.searchsorted(
            self.ascending, scores, side="right"
        )
        out: IntArray = self.group_level[group]
        return out

    def level_bounds(self, sorted_values: FloatArray) -> IntArray:
        """(J + 1,) where each level begins in an ascending array (n,), then n: the values of
        level j are ``sorted_values[bounds[j]:bounds[j + 1]]``, as :meth:`levels` assigns them.

        O(J log n) instead of the O(n log K) of :meth:`levels`: a level starting at group
        2m + 1 (the rows at t_m) begins at the first value ≥ t_m, one starting at group 2m
        (the rows strictly between t_{m-1} and t_m) at the first value > t_{m-1}.
        """
        start_groups = np.flatnonzero(np.diff(self.group_level)) + 1
        odd = (start_groups % 2).astype(bool)
        bounds = np.empty(start_groups.size + 2, dtype=np.int64)
        bounds[0], bounds[-1] = 0, sorted_values.size
        inner = bounds[1:-1]
        inner[odd] = np.searchsorted(
            sorted_values, self.ascending[start_groups[odd] // 2], side="left"
        )
        inner[~odd] = np.searchsorted(
            sorted_values, self.ascending[start_groups[~odd] // 2 - 1], side="right"
        )
        return bounds


@dataclass(frozen=True, slots=True)
class PriorEstimate:
    """π̂ of one window with its 95% bootstrap interval and the rows used."""

    ratio: float
    lower: float
    upper: float
    n: int


def pav(values: FloatArray, weights: FloatArray) -> IntArray:
    """Pool-adjacent-violators: (G,) the level index of each of G ordered values, such that the
    weighted means of the levels are nondecreasing and every level is a run of adjacent values
    whose mean is the isotonic least-squares fit. Weights must be positive."""
    starts: list[int] = []
    sums: list[float] = []
    totals: list[float] = []
    for i in range(values.size):
        starts.append(i)
        sums.append(float(values[i] * weights[i]))
        totals.append(float(weights[i]))
        while len(sums) > 1 and sums[-2] * totals[-1] >= sums[-1] * totals[-2]:
            top_sum, top_total = sums.pop(), totals.pop()
            sums[-1] += top_sum
            totals[-1] += top_total
            starts.pop()
    level = np.zeros(values.size, dtype=np.int64)
    if starts:
        marks = np.zeros(values.size, dtype=np.int64)
        marks[np.asarray(starts[1:], dtype=np.int64)] = 1
        level = np.cumsum(marks)
    return level


def label_shift_reference(ranking: Ranking) -> LabelShiftReference | None:
    """The isotonic levels of a reference set given as its ranking; None unless it holds both
    classes (π̂ is not identifiable from one class).

    Groups with no rows (no negatives between two positive scores) join the level below them
    (the lowest level when they are first), so every score has a level. Adjacent groups with
    equal fractions are merged too (ties count as violations), so levels are strictly
    increasing in q.
    """
    if ranking.n_pos == 0 or ranking.n_neg == 0:
        return None
    k = ranking.thresholds.size
    pos = np.zeros(2 * k + 1)
    neg = np.zeros(2 * k + 1)
    pos[1::2] = ranking.pos[::-1]
    neg[1::2] = ranking.neg_tied[::-1]
    neg[0] = ranking.neg_below
    neg[2::2][:-1] = ranking.neg_above[:0:-1]
    neg[-1] = ranking.neg_above[0]
    size = pos + neg
    kept = np.flatnonzero(size > 0)
    kept_level = pav(pos[kept] / size[kept], size[kept])
    levels = int(kept_level[-1]) + 1
    marks = np.zeros(2 * k + 1, dtype=np.int64)
    marks[kept] = 1
    # each group takes the level of the last nonempty group at or below it (or the first)
    last_kept = np.maximum(np.cumsum(marks) - 1, 0)
    group_level = kept_level[last_kept]
    # index 2k+1 is never produced for finite scores; pad so indexing is always in range
    group_level = np.append(group_level, group_level[-1])
    return LabelShiftReference(
        group_level=group_level.astype(np.int64),
        ascending=ranking.thresholds[::-1].copy(),
        pos=np.bincount(kept_level, weights=pos[kept], minlength=levels).astype(np.float64),
        neg=np.bincount(kept_level, weights=neg[kept], minlength=levels).astype(np.float64),
    )


def class_shares(pos: FloatArray, neg: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(a, b) = P(level | y = 1), P(level | y = 0) from reference counts (..., J), each count
    plus :data:`PSEUDOCOUNT`: a level the reference saw with one class only (the extreme
    levels of the isotonic fit) would otherwise make a window row there certain of its class,
    and a few such rows of the other class in a large window bias π̂ (by 30% at π = 0.01 and
    10^5 rows without it). NaN where the reference has no rows of a class."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(pos.sum(axis=-1, keepdims=True) > 0, pos + PSEUDOCOUNT, np.nan)
        b = np.where(neg.sum(axis=-1, keepdims=True) > 0, neg + PSEUDOCOUNT, np.nan)
        a = a / a.sum(axis=-1, keepdims=True)
        b = b / b.sum(axis=-1, keepdims=True)
    return a, b


def solve_prior(counts: FloatArray, pos: FloatArray, neg: FloatArray) -> FloatArray:
    """The EM fixed point π̂ (maximum likelihood) per set, by bisection of the score equation.

    ``counts`` (..., J) window rows per level; ``pos``, ``neg`` (..., J) reference positives and
    negatives per level (broadcasting with ``counts``). Returns (...,); NaN where the window is
    empty or the reference lacks a class. Levels with no reference rows carry no information
    and are left out.
    """
    a, b = class_shares(pos, neg)
    informative = (a + b) > 0
    m = np.where(informative, counts, 0.0)
    a = np.where(informative, a, 0.0)
    b = np.where(informative, b, 0.0)
    lead = np.broadcast_shapes(m.shape, a.shape)[:-1]
    lo = np.zeros(lead)
    hi = np.ones(lead)
    weighted_diff = m * (a - b)
    empty = m <= 0
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = weighted_diff / (mid[..., None] * a + (1.0 - mid[..., None]) * b)
        np.copyto(terms, 0.0, where=empty)
        slope = terms.sum(axis=-1)
        up = slope > 0
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
    estimate: FloatArray = 0.5 * (lo + hi)
    valid = (m.sum(axis=-1) > 0) & (pos.sum(axis=-1) > 0) & (neg.sum(axis=-1) > 0)
    return np.where(valid, estimate, np.nan)


def estimate_prior(
    reference: LabelShiftReference,
    scores: FloatArray,
    *,
    level: float = 0.95,
    replicates: int = REPLICATES,
    seed: int | None = None,
) -> PriorEstimate | None:
    """π̂ of a window's scores (n,) with its bootstrap interval (module docstring); None when
    the window is empty."""
    counts = np.bincount(reference.levels(scores), minlength=reference.pos.size)
    return prior_from_counts(
        reference, counts.astype(np.float64), level=level, replicates=replicates, seed=seed
    )


def prior_from_counts(
    reference: LabelShiftReference,
    counts: FloatArray,
    *,
    level: float = 0.95,
    replicates: int = REPLICATES,
    seed: int | None = None,
) -> PriorEstimate | None:
    """:func:`estimate_prior` from the window's rows per level ``counts`` (J,)."""
    n = int(counts.sum())
    if n == 0:
        return None
    ratio = float(solve_prior(counts, reference.pos, reference.neg))
    rng = np.random.default_rng(seed)
    shape = (replicates, counts.size)
    draws = solve_prior(
        rng.poisson(counts, shape).astype(np.float64),
        rng.poisson(reference.pos, shape).astype(np.float64),
        rng.poisson(reference.neg, shape).astype(np.float64),
    )
    draws = draws[np.isfinite(draws)]
    spread = float(np.std(draws, ddof=1)) if draws.size > 1 else float("nan")
    half = float(NormalDist().inv_cdf(0.5 + level / 2.0)) * spread
    lower, upper = max(ratio - half, 0.0), min(ratio + half, 1.0)
    return PriorEstimate(
        ratio=ratio, lower=float(min(lower, ratio)), upper=float(max(upper, ratio)), n=n
    )


def adjusted_probabilities(reference: LabelShiftReference, prior: float) -> FloatArray:
    """(J,) p'_j at prior π: the recalibrated probability of each level moved from π_ref to
    π (module docstring, step 2); π itself where that is undefined (a reference without a
    class, which :func:`label_shift_reference` never returns)."""
    a, b = class_shares(reference.pos, reference.neg)
    with np.errstate(divide="ignore", invalid="ignore"):
        adjusted: FloatArray = prior * a / (prior * a + (1.0 - prior) * b)
    return np.where(np.isfinite(adjusted), adjusted, prior)


def expected_metrics(
    scores: FloatArray,
    positive: FloatArray,
    *,
    threshold: float,
    pi0: Sequence[float],
) -> dict[str, Any]:
    """Metrics of the expected confusion counts: row i of ``scores`` (n,) counts
    ``positive[i]`` ∈ [0, 1] as a positive and 1 - ``positive[i]`` as a negative.

    Returns ``{"regular": {ESTIMATED_REGULAR}, "calibrated": {repr(π0): {ESTIMATED_CALIBRATED}}}``,
    NaN where undefined (no expected positives or negatives). Ties enter as one block.
    """
    order = np.argsort(scores, kind="stable")
    runs = distinct_runs(scores[order])
    assert runs is not None
    ascending, run_sizes = runs
    starts = np.concatenate(([0], np.cumsum(run_sizes)[:-1])).astype(np.intp)
    pos_runs = np.add.reduceat(positive[order], starts) if scores.size else np.zeros(0)
    return metrics_of_runs(ascending, run_sizes, pos_runs, threshold=threshold, pi0=pi0)


def metrics_of_runs(
    ascending: FloatArray,
    run_sizes: npt.NDArray[Any],
    pos_runs: FloatArray,
    *,
    threshold: float,
    pi0: Sequence[float],
) -> dict[str, Any]:
    """:func:`expected_metrics` from the distinct scores ``ascending`` (K,), the rows at each
    ``run_sizes`` (K,) and their expected positives ``pos_runs`` (K,)."""
    neg_runs = run_sizes - pos_runs
    n_pos, n_neg = float(pos_runs.sum()), float(neg_runs.sum())
    above = ascending >= threshold
    at = threshold_metrics(
        float(pos_runs[above].sum()), float(neg_runs[above].sum()), n_pos, n_neg, pi0=pi0
    )
    k = ascending.size
    curves = curve_metrics(
        ascending[::-1],
        pos_runs[::-1],
        neg_runs[::-1],
        np.zeros(k),
        np.float64(0.0),
        pi0=pi0,
    )
    regular = {**at.regular, **curves.regular}
    calibrated: dict[str, dict[str, float]] = {}
    for p in pi0:
        merged = {**at.calibrated[float(p)], **curves.calibrated[float(p)]}
        calibrated[repr(float(p))] = {name: float(merged[name]) for name in ESTIMATED_CALIBRATED}
    return {
        "regular": {name: float(regular[name]) for name in ESTIMATED_REGULAR},
        "calibrated": calibrated,
    }


def estimate_window(
    reference: LabelShiftReference | None,
    sorted_scores: FloatArray,
    *,
    threshold: float,
    pi0: Sequence[float],
    seed: int | None = None,
) -> dict[str, Any] | None:
    """The ``estimated`` object of a window record, or None: without a reference holding both
    classes, or without scored predictions in the window. ``sorted_scores`` (n,) are every
    scored prediction of the window, ascending (a window's classes are already sorted: merging
    them with ``np.sort(..., kind="stable")`` costs little).

    ``{"positive_class_ratio", "positive_class_ratio_interval": [lo, hi], "method", "n",
    "regular": {...}, "calibrated": {repr(π0): {...}}}``; metric values NaN where undefined.
    The metrics have no interval (see ``docs/metrics.md``).
    """
    if reference is None:
        return None
    # p' is a function of the score: everything per distinct score
    counts = np.diff(reference.level_bounds(sorted_scores)).astype(np.float64)
    estimate = prior_from_counts(reference, counts, seed=seed)
    if estimate is None or not np.isfinite(estimate.ratio):
        return None
    runs = distinct_runs(sorted_scores)
    assert runs is not None
    ascending, run_sizes = runs
    runs_per_level = np.diff(reference.level_bounds(ascending))
    adjusted = adjusted_probabilities(reference, estimate.ratio)
    pos_runs = np.repeat(adjusted, runs_per_level) * run_sizes
    metrics = metrics_of_runs(ascending, run_sizes, pos_runs, threshold=threshold, pi0=pi0)
    return {
        "positive_class_ratio": estimate.ratio,
        "positive_class_ratio_interval": [estimate.lower, estimate.upper],
        "method": METHOD,
        "n": estimate.n,
        **metrics,
    }


def bbse_prior(
    reference_scores: FloatArray,
    reference_labels: npt.NDArray[np.bool_],
    scores: FloatArray,
    *,
    threshold: float,
) -> float:
    """Black-box shift estimation (Lipton, Wang & Smola 2018) with the hard predictions
    s ≥ ``threshold``: π̂ = (q - FPR)/(TPR - FPR), q the window's predicted-positive rate and
    TPR, FPR the reference's; clipped to [0, 1]; NaN when TPR = FPR. Kept for comparison:
    it uses one bit per row where the EM estimate uses every level."""
    flagged = reference_scores >= threshold
    tpr = float(flagged[reference_labels].mean())
    fpr = float(flagged[~reference_labels].mean())
    if tpr == fpr:
        return float("nan")
    rate = float(np.mean(scores >= threshold))
    return float(np.clip((rate - fpr) / (tpr - fpr), 0.0, 1.0))
