"""Label-free estimates of a window: its positive class ratio π̂ and its metrics at π̂.

Assumption (label shift): the window may have another positive ratio π than the reference,
but the distribution of scores within each class, P(score | y), is the reference's. Under
that assumption alone, unlabelled scores determine π; nothing here can see a change of
P(score | y) (a likelihood drift), which only labels reveal (``docs/reference/metrics.md``).

Method (Saerens, Latinne & Decaestecker 2002, on scores recalibrated on the reference):

1. The reference, given as its :class:`~calmon.metrics.ranking.Ranking`, is split into its
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
   in π. It is solved by bisection on [0, 1] (:data:`BISECTIONS` steps, to 2^-60): the
   fixed point exactly, without a tolerance; 0 or 1 when the equation keeps its sign.
4. Cross-fitting (:func:`level_fit`). Fitted and counted on the same reference rows, the
   levels favour the reference's sampling noise: a top level the reference happens to see
   with few negatives gets a small b_j, and a window's negatives there count as positives
   (π̂ up to 2.3 times the truth at π = 0.002 with 20,000 reference rows, a tree's tied
   scores, ``docs/reference/metrics.md``). So π̂ uses other
   levels than the recalibration: the reference's rows are split in two halves, levels are
   fitted on each half and counted on the other, and the equation is written as
   Σ_j d_j(π)·(m_j - n(π a_j + (1 - π) b_j)) = 0 over both sets of levels, where the weights
   d_j = (a'_j - b'_j)/(π a'_j + (1 - π) b'_j) come from the half the level was fitted on
   (with :data:`PSEUDOCOUNT`) and the expected counts from the other half (raw counts). It is
   the score equation when both are the same rows; split, it is linear in the shares it
   subtracts, so their noise no longer biases it (:func:`solve_shares`).
5. 95% interval: r ± 1.96·sd, sd the standard deviation of r over a Poisson bootstrap of
   the window (its rows per cell, the cells where both halves' levels are constant) and of
   each half of the reference, the levels kept fixed; clipped to [0, 1]. Any fixed grouping
   keeps P(level | y) unchanged under label shift, so the replicates estimate the same π. The
   normal form, not the percentile interval: π̂ is skewed at small π, and percentiles
   covered 0.82 at π = 0.01 and 10^5 rows, the normal interval 0.95 (``docs/reference/metrics.md``).
   r is the equation's root unclipped: π̂ = max(r, 0), and where the equation has no root in
   [0, 1] because it is negative at 0, r is the root of its tangent at 0 (``below`` in
   :func:`solve_shares`). At rare priors π̂'s spread reaches 0 (at 40 positives it is 1-3
   times π), and clipped replicates piled up at 0 shrank the sd and the interval's upper end
   (coverage 0.85 on the held-out tree at π = 0.005); the unclipped root keeps the spread.
   π̂ itself stays clipped, so it is biased upward wherever the interval reaches 0: no
   estimator that is never negative can be unbiased when its spread is that of π itself. The
   record says so (:attr:`PriorEstimate.resolved`).

6. Where the score equation has no interior root, π̂ is exactly 0 (or 1) and the bootstrap's
   replicates pile up there: the interval is then also bounded by the profile likelihood of
   π on the level counts (the reference's shares fixed), one-sided at the boundary, so it is
   never of zero width. Each end is the wider of the two.

The label-shift check (:func:`label_shift_check`) tests the assumption itself from the
window's unlabelled scores: under label shift the window's score distribution is the
reference's class mixture π·F_1 + (1 - π)·F_0. The reference's groups are merged into
:data:`CHECK_BINS_PER_CLASS` quantile bins of each class (a bin ends wherever either class's
cumulative share crosses a multiple of 1/Q, ties kept together); π is fitted on the bins by
maximum likelihood and two statistics compare the window's bin counts with the fitted
mixture's: a Cramér-von Mises distance between the cumulative counts, weighted by the
mixture's bin shares (it sees a change of the bulk), and Pearson's Σ (m - e)²/e, which weighs
each bin by its expected count and so sees the upper tail, where rare positives live
(negatives whose scores rose inflate π̃, and the top bins then disagree with it). Their null
law is a parametric bootstrap that redraws the reference's classes (multinomial over the
bins at their observed shares, class totals fixed) and the window from the fitted mixture,
refitting π each time: the reference's own sampling noise is part of the null. Each
statistic's p-value is (1 + #{T* ≥ T}) / (B + 1), and the check's p-value is that of the
smaller of the two, calibrated on the same replicates (the share of replicates whose smaller
p-value is at most the window's): B = :data:`CHECK_REPLICATES`; the assumption "holds" when
p ≥ :data:`calmon.verdict.CHECK_LEVEL`. What it cannot see (``calmon.catalogue.CANNOT_SEE``):
a change inside a class whose window is still (nearly) a mixture of the reference's classes
at another π. A share f of the positives scoring like the negatives makes the window exactly
the mixture at π(1 - f), at any π: no test on scores sees it, and a model that got worse
reads as fewer positives (hence the verdict ``fewer_positives_or_lower_scores``, not a
class-ratio change, for a fall); a share g of the negatives scoring like the positives makes
it the mixture at π + g(1 - π), read as more positives (``more_positives_or_higher_scores``
for a rise). Only labels tell them apart.

Estimated metrics at π̂ are those of the expected confusion counts: each window row counts
p' as a positive and 1 - p' as a negative at its own score, so at threshold τ
TP = Σ_{s ≥ τ} p', FP = Σ_{s ≥ τ} (1 - p'), n_pos = Σ p', and the curves have one block per
distinct window score with these fractional counts. As p' is constant on each level, ROC AUC
and AP are summed per level in closed form (:func:`metrics_of_levels`), not per score.
The π0-calibrated metrics reweight the same counts with r = π̂'(1 - π0)/(π0(1 - π̂')),
π̂' = Σ p'/n (= π̂ at an interior optimum). They hardly depend on π̂: when the window's level
counts fit the mixture,
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

from calmon.arrays import FloatArray, IntArray
from calmon.catalogue import CANNOT_SEE, ESTIMATED_CALIBRATED, ESTIMATED_REGULAR
from calmon.metrics.curves import auc_and_ap
from calmon.metrics.prepared import pi0_key
from calmon.metrics.ranking import Ranking, distinct_runs
from calmon.metrics.thresholded import calibration_ratio, threshold_metrics
from calmon.verdict import check_holds, estimate_of

#: The method named in window records.
METHOD = "saerens_em_isotonic"
#: Seed of the split of a reference into the halves of the cross-fit (:func:`level_fit`).
CROSS_FIT_SEED = 20_021
#: Bisection steps of the score equation (interval width 2^-60).
BISECTIONS = 60
#: Added to each class count of each level (see :func:`class_shares`).
PSEUDOCOUNT = 0.5
#: Bootstrap replicates of the interval of π̂.
REPLICATES = 400
#: From this mean on, a replicate's Poisson count is drawn from its normal approximation.
NORMAL_FROM = 1000.0
#: Bisection steps of each replicate (2^-24 = 6e-8: below any spread of the replicates).
REPLICATE_BISECTIONS = 24
#: Method of the label-shift check named in window records.
CHECK_METHOD = "cvm_pearson_mixture_bootstrap"
#: Quantile bins per class of the check (up to 2Q bins in all).
CHECK_BINS_PER_CLASS = 16
#: Bootstrap replicates of the check's null law.
CHECK_REPLICATES = 400
#: Fewest scored predictions a window needs for the check and for a verdict of its estimate.
MIN_ESTIMATE_ROWS = 200
#: π̂ at most this far from 0 (or 1) is that bound: bisection stops 2^-61 from it.
BOUNDARY = 2.0**-50
#: Estimated metrics, regular and calibrated at each π0.


@dataclass(frozen=True, slots=True)
class LabelShiftReference:
    """The reference recalibrated by isotonic regression, as J levels.

    Attributes:
        group_level: (2K + 2,) the level of each elementary group (see the module docstring),
            indexed by ``searchsorted(ascending, s, "left") + searchsorted(.., "right")``.
        ascending: (K,) the reference's distinct positive scores, ascending.
        pos, neg: (J,) reference positives and negatives of each level.
        group_bin: (2K + 2,) the check's bin of each elementary group, indexed as
            ``group_level``.
        bin_pos, bin_neg: (L,) reference positives and negatives of each of the check's bins.
        fit: π̂'s own (cross-fitted) levels, see :class:`LevelFit`.
    """

    group_level: IntArray
    ascending: FloatArray
    pos: FloatArray
    neg: FloatArray
    group_bin: IntArray
    bin_pos: FloatArray
    bin_neg: FloatArray
    fit: LevelFit

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

        O(J log n) instead of the O(n log K) of :meth:`levels`.
        """
        return group_bounds(self.group_level, self.ascending, sorted_values)

    def bin_bounds(self, sorted_values: FloatArray) -> IntArray:
        """(L + 1,) where each of the check's bins begins in an ascending array, then n."""
        return group_bounds(self.group_bin, self.ascending, sorted_values)

    def cell_bounds(self, sorted_values: FloatArray) -> IntArray:
        """(C + 1,) where each of π̂'s cells (:class:`LevelFit`) begins in an ascending array,
        then n."""
        return group_bounds(self.fit.group_cell, self.ascending, sorted_values)


@dataclass(frozen=True, slots=True)
class LevelFit:
    """The levels π̂ is estimated on: H sets of isotonic levels, each fitted on one part of the
    reference and counted on another (cross-fitting, H = 2: the levels of each half counted on
    the other half), and the cells where every set is constant.

    Attributes:
        group_cell: (2K + 2,) the cell of each elementary group, indexed as ``group_level``.
        cell_level: (H, C) the level of each cell in each set; nondecreasing along C, the
            levels of set h numbered after those of set h - 1 (J levels in all).
        pos, neg: (H, C) the reference rows each set is counted on, per cell.
        fit_pos, fit_neg: (H, C) the reference rows each set was fitted on, per cell.
    """

    group_cell: IntArray
    cell_level: IntArray
    pos: FloatArray
    neg: FloatArray
    fit_pos: FloatArray
    fit_neg: FloatArray

    def level_counts(self, cells: FloatArray) -> FloatArray:
        """(..., J) rows per level of every set from rows per cell ``cells`` (..., C)."""
        out: FloatArray = np.concatenate(
            [np.add.reduceat(cells, start, axis=-1) for start in self._starts()], axis=-1
        )
        return out

    def shares(
        self, pos: FloatArray, neg: FloatArray, *, pseudocount: float = PSEUDOCOUNT
    ) -> tuple[FloatArray, FloatArray]:
        """(a, b) (..., J): :func:`class_shares` of each set's levels from the rows each set is
        counted on, per cell ``pos``, ``neg`` (..., H, C)."""
        parts = [
            class_shares(
                np.add.reduceat(pos[..., h, :], start, axis=-1),
                np.add.reduceat(neg[..., h, :], start, axis=-1),
                pseudocount=pseudocount,
            )
            for h, start in enumerate(self._starts())
        ]
        return (
            np.concatenate([a for a, _ in parts], axis=-1),
            np.concatenate([b for _, b in parts], axis=-1),
        )

    def _starts(self) -> list[IntArray]:
        return [
            np.flatnonzero(np.concatenate(([True], np.diff(row) != 0))) for row in self.cell_level
        ]


def group_bounds(
    group_index: IntArray, ascending: FloatArray, sorted_values: FloatArray
) -> IntArray:
    """(I + 1,) where each index of a nondecreasing group → index map ``group_index``
    (2K + 2,) begins in ``sorted_values`` (n,, ascending), then n. An index starting at group
    2m + 1 (the rows at t_m = ``ascending[m]``) begins at the first value ≥ t_m, one starting
    at group 2m (the rows strictly between t_{m-1} and t_m) at the first value > t_{m-1}."""
    start_groups = np.flatnonzero(np.diff(group_index)) + 1
    odd = (start_groups % 2).astype(bool)
    bounds = np.empty(start_groups.size + 2, dtype=np.int64)
    bounds[0], bounds[-1] = 0, sorted_values.size
    inner = bounds[1:-1]
    inner[odd] = np.searchsorted(sorted_values, ascending[start_groups[odd] // 2], side="left")
    inner[~odd] = np.searchsorted(
        sorted_values, ascending[start_groups[~odd] // 2 - 1], side="right"
    )
    return bounds


@dataclass(frozen=True, slots=True)
class PriorEstimate:
    """π̂ of one window with its 95% interval and the rows used."""

    ratio: float
    lower: float
    upper: float
    n: int

    @property
    def resolved(self) -> bool:
        """Whether the interval stays clear of 0. When it reaches 0, π̂'s spread is of the
        order of π̂ itself and π̂ ≥ 0 truncates it: the value is then biased upward (no
        estimator that is never negative can be unbiased there) and reads as an order of
        magnitude, the interval being what holds (``docs/reference/metrics.md``, "Rare priors")."""
        return self.lower > 0.0


@dataclass(frozen=True, slots=True)
class LabelShiftCheck:
    """The label-shift check of one window: its p-value, and whether the assumption holds
    (p ≥ :data:`calmon.verdict.CHECK_LEVEL`); both None for windows under
    :data:`MIN_ESTIMATE_ROWS`."""

    p_value: float | None
    holds: bool | None

    def as_record(self) -> dict[str, Any]:
        """The ``label_shift`` object of a window record's ``estimated``."""
        return {"p_value": self.p_value, "holds": self.holds, "method": CHECK_METHOD}


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
    group_level = isotonic_levels(pos, neg)
    levels = int(group_level[-1]) + 1
    # index 2k+1 is never produced for finite scores; pad so indexing is always in range
    group_level = np.append(group_level, group_level[-1])
    group_bin = check_bins(pos, neg, CHECK_BINS_PER_CLASS)
    bins = int(group_bin[-1]) + 1
    return LabelShiftReference(
        group_level=group_level.astype(np.int64),
        ascending=ranking.thresholds[::-1].copy(),
        pos=np.bincount(group_level[:-1], weights=pos, minlength=levels).astype(np.float64),
        neg=np.bincount(group_level[:-1], weights=neg, minlength=levels).astype(np.float64),
        group_bin=np.append(group_bin, group_bin[-1]),
        bin_pos=np.bincount(group_bin, weights=pos, minlength=bins).astype(np.float64),
        bin_neg=np.bincount(group_bin, weights=neg, minlength=bins).astype(np.float64),
        fit=level_fit(pos, neg, group_level[:-1]),
    )


def isotonic_levels(pos: FloatArray, neg: FloatArray) -> IntArray:
    """(G,) the isotonic level (0, 1, …) of each of G ordered groups with ``pos`` and ``neg``
    rows (G,): pool-adjacent-violators on the groups with rows; a group without rows takes the
    level of the last group with rows below it (the lowest level when it is first)."""
    size = pos + neg
    kept = np.flatnonzero(size > 0)
    kept_level = pav(pos[kept] / size[kept], size[kept])
    marks = np.zeros(pos.size, dtype=np.int64)
    marks[kept] = 1
    last_kept = np.maximum(np.cumsum(marks) - 1, 0)
    out: IntArray = kept_level[last_kept].astype(np.int64)
    return out


def level_fit(pos: FloatArray, neg: FloatArray, group_level: IntArray) -> LevelFit:
    """π̂'s levels for a reference's G ordered groups with ``pos`` and ``neg`` rows (G,), cross-
    fitted: each group's rows are split at random into two halves (binomially, seeded with
    :data:`CROSS_FIT_SEED`, so a reference always gives the same halves), isotonic levels are
    fitted on each half and counted on the other. When a half lacks a class (a reference with a
    single row of a class), the reference's own levels ``group_level`` (G,), counted on itself.
    """
    rng = np.random.default_rng(CROSS_FIT_SEED)
    half_pos = rng.binomial(pos.astype(np.int64), 0.5).astype(np.float64)
    half_neg = rng.binomial(neg.astype(np.int64), 0.5).astype(np.float64)
    halves_pos = np.stack([half_pos, pos - half_pos])
    halves_neg = np.stack([half_neg, neg - half_neg])
    if np.any(halves_pos.sum(axis=1) == 0) or np.any(halves_neg.sum(axis=1) == 0):
        fitted, fitted_pos, fitted_neg = group_level[None, :], pos[None, :], neg[None, :]
        counted_pos, counted_neg = fitted_pos, fitted_neg
    else:
        fitted = np.stack([isotonic_levels(halves_pos[h], halves_neg[h]) for h in (0, 1)])
        fitted_pos, fitted_neg = halves_pos, halves_neg
        counted_pos, counted_neg = halves_pos[::-1], halves_neg[::-1]
    changes = np.any(np.diff(fitted, axis=1) != 0, axis=0)
    group_cell = np.concatenate(([0], np.cumsum(changes))).astype(np.int64)
    starts = np.flatnonzero(np.concatenate(([True], changes)))
    cells = starts.size
    cell_level = fitted[:, starts]
    for h in range(1, cell_level.shape[0]):
        cell_level[h] += cell_level[h - 1, -1] + 1
    return LevelFit(
        group_cell=np.append(group_cell, group_cell[-1]),
        cell_level=cell_level,
        pos=np.stack([np.bincount(group_cell, weights=c, minlength=cells) for c in counted_pos]),
        neg=np.stack([np.bincount(group_cell, weights=c, minlength=cells) for c in counted_neg]),
        fit_pos=np.stack([np.bincount(group_cell, weights=c, minlength=cells) for c in fitted_pos]),
        fit_neg=np.stack([np.bincount(group_cell, weights=c, minlength=cells) for c in fitted_neg]),
    )


def check_bins(pos: FloatArray, neg: FloatArray, per_class: int) -> IntArray:
    """(G,) the check's bin of each of G ordered groups with ``pos`` and ``neg`` rows (G,),
    both classes present: a new bin starts wherever the share of either class below the group
    crosses a multiple of 1/``per_class``. A group without rows joins the next group's bin (the
    previous one's when last), so every bin holds reference rows; bin indices are 0, 1, …"""
    below_pos = (np.cumsum(pos) - pos) / pos.sum()
    below_neg = (np.cumsum(neg) - neg) / neg.sum()
    tag = np.floor(per_class * below_pos + 1e-9) + np.floor(per_class * below_neg + 1e-9)
    filled = np.flatnonzero(pos + neg > 0)
    nearest = np.minimum(np.searchsorted(filled, np.arange(tag.size)), filled.size - 1)
    _, bins = np.unique(tag[filled[nearest]], return_inverse=True)
    out: IntArray = bins.astype(np.int64)
    return out


def class_shares(
    pos: FloatArray, neg: FloatArray, *, pseudocount: float = PSEUDOCOUNT
) -> tuple[FloatArray, FloatArray]:
    """(a, b) = P(level | y = 1), P(level | y = 0) from reference counts (..., J), each count
    plus :data:`PSEUDOCOUNT`: a level the reference saw with one class only (the extreme
    levels of the isotonic fit) would otherwise make a window row there certain of its class,
    and a few such rows of the other class in a large window bias π̂ (by 30% at π = 0.01 and
    10^5 rows without it). NaN where the reference has no rows of a class."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(pos.sum(axis=-1, keepdims=True) > 0, pos + pseudocount, np.nan)
        b = np.where(neg.sum(axis=-1, keepdims=True) > 0, neg + pseudocount, np.nan)
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
    return solve_shares(counts, *class_shares(pos, neg))


def solve_shares(
    counts: FloatArray,
    a: FloatArray,
    b: FloatArray,
    weights: tuple[FloatArray, FloatArray] | None = None,
    *,
    steps: int = BISECTIONS,
    below: bool = False,
) -> FloatArray:
    """:func:`solve_prior` from the class shares of each level ``a``, ``b`` (..., J) (NaN where
    the reference lacks a class, then the result is NaN too), by ``steps`` bisection steps.

    With ``weights`` = (a', b'), shares of the same levels from other reference rows, the root
    of Σ_j d_j(π)·(m_j - n(π a_j + (1 - π) b_j)) with d_j = (a'_j - b'_j)/(π a'_j + (1 - π) b'_j):
    the score equation (which it is when a' = a, b' = b, as Σ_j (a_j - b_j) = 0) with the
    weights taken from rows independent of the expected counts, so that the equation is linear,
    hence unbiased, in the shares it subtracts (:func:`level_fit`). The weights' shares must be
    positive (:data:`PSEUDOCOUNT`).

    ``below``: where the equation is already negative at π = 0 and bisection finds no root
    above 0 (cross-fitted, the equation need not be monotone), the root of its tangent at 0
    instead of 0, a negative number: Σ_j d_j(0)·(m_j - n b_j) over
    Σ_j d_j(0)·n(a_j - b_j) (where that slope is positive; else 0). Not a ratio, but the
    estimating equation's own solution unclipped, nearly unbiased and nearly normal where π̂'s
    spread reaches 0; :func:`prior_from_counts` centres the interval on it."""
    valid = (counts.sum(axis=-1) > 0) & np.all(np.isfinite(a), axis=-1)
    valid &= np.all(np.isfinite(b), axis=-1)
    wa, wb = (a, b) if weights is None else weights
    lead = np.broadcast_shapes(counts.shape, a.shape, wa.shape)[:-1]
    # each of the H sets of levels counts every window row once; a sums to H over them
    with np.errstate(invalid="ignore"):
        n = counts.sum(axis=-1, keepdims=True) / a.sum(axis=-1, keepdims=True)
    weight_gap = wa - wb
    surplus = counts - n * b
    expected_gap = n * (a - b)
    lo = np.zeros(lead)
    hi = np.ones(lead)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        at = mid[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = weight_gap / (wb + at * weight_gap) * (surplus - at * expected_gap)
        slope = np.nansum(terms, axis=-1)
        up = slope > 0
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
    estimate: FloatArray = 0.5 * (lo + hi)
    estimate = np.where(
        estimate < BOUNDARY, 0.0, np.where(estimate > 1.0 - BOUNDARY, 1.0, estimate)
    )
    if below:
        with np.errstate(divide="ignore", invalid="ignore"):
            at_zero = weight_gap / wb
            level = np.nansum(at_zero * surplus, axis=-1)
            slope = np.nansum(at_zero * expected_gap, axis=-1)
            tangent = level / slope
        # only where bisection found no root above 0: the same π̂ = max(root, 0) as without
        estimate = np.where((lo == 0.0) & (level < 0.0) & (slope > 0.0), tangent, estimate)
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
    return prior_from_counts(
        reference,
        np.diff(reference.cell_bounds(np.sort(scores))).astype(np.float64),
        level=level,
        replicates=replicates,
        seed=seed,
    )


def prior_from_counts(
    reference: LabelShiftReference,
    counts: FloatArray,
    *,
    level: float = 0.95,
    replicates: int = REPLICATES,
    seed: int | None = None,
) -> PriorEstimate | None:
    """:func:`estimate_prior` from the window's rows per cell of π̂'s levels ``counts`` (C,)
    (:class:`LevelFit`)."""
    n = int(counts.sum())
    if n == 0:
        return None
    fit = reference.fit
    mirrored = fit.cell_level.shape[0] == 2
    unbiased = 0.0 if mirrored else PSEUDOCOUNT
    a, b = fit.shares(fit.pos, fit.neg, pseudocount=unbiased)
    weights = fit.shares(fit.fit_pos, fit.fit_neg)
    root = float(solve_shares(fit.level_counts(counts), a, b, weights, below=True))
    ratio = max(root, 0.0)
    rng = np.random.default_rng(seed)
    drawn = poisson(rng, counts, replicates)
    drawn_pos = poisson(rng, fit.pos, replicates)
    drawn_neg = poisson(rng, fit.neg, replicates)
    # the halves are each other's weights: one draw of each half serves both roles
    draws = solve_shares(
        fit.level_counts(drawn),
        *fit.shares(drawn_pos, drawn_neg, pseudocount=unbiased),
        fit.shares(drawn_pos[:, ::-1], drawn_neg[:, ::-1]) if mirrored else None,
        steps=REPLICATE_BISECTIONS,
        below=True,
    )
    draws = draws[np.isfinite(draws)]
    spread = float(np.std(draws, ddof=1)) if draws.size > 1 else float("nan")
    half = float(NormalDist().inv_cdf(0.5 + level / 2.0)) * spread
    lower, upper = max(root - half, 0.0), min(root + half, 1.0)
    if not np.isfinite(ratio):
        return PriorEstimate(ratio=ratio, lower=lower, upper=upper, n=n)
    profile_lower, profile_upper = profile_bounds(
        fit.level_counts(counts) / fit.cell_level.shape[0],
        *fit.shares(fit.pos, fit.neg),
        ratio,
        level=level,
    )
    return PriorEstimate(
        ratio=ratio,
        lower=float(min(lower, profile_lower, ratio)),
        upper=float(max(upper, profile_upper, ratio)),
        n=n,
    )


def poisson(rng: np.random.Generator, mean: FloatArray, replicates: int) -> FloatArray:
    """(replicates, *mean.shape) Poisson draws of means ``mean``; from :data:`NORMAL_FROM` on,
    the normal approximation rounded (its skewness 1/√mean is then under 3%), several times
    faster for the large counts of a big reference's negatives."""
    shape = (replicates, *mean.shape)
    large = mean >= NORMAL_FROM
    small: FloatArray = rng.poisson(np.where(large, 0.0, mean), shape).astype(np.float64)
    if not large.any():
        return small
    normal = np.rint(mean + np.sqrt(mean) * rng.standard_normal(shape))
    out: FloatArray = np.where(large, np.maximum(normal, 0.0), small)
    return out


def profile_bounds(
    counts: FloatArray, a: FloatArray, b: FloatArray, ratio: float, *, level: float
) -> tuple[float, float]:
    """The profile-likelihood interval of π at ``level`` on the level ``counts`` (J,), the
    reference's class shares ``a``, ``b`` (J,) held fixed: the π whose log-likelihood
    Σ_j m_j log(π a_j + (1 - π) b_j) is within χ²_1(level)/2 of its maximum at ``ratio``;
    one-sided (χ²_1(2·level - 1)) when ``ratio`` is 0 or 1, where the bound is the only end.
    By bisection on each side (the log-likelihood is concave). With H cross-fitted sets of
    levels each window row is counted H times: ``counts`` are then divided by H."""
    informative = (a + b) > 0
    m, a, b = counts[informative], a[informative], b[informative]

    def loglik(prior: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore"):
            mixed = np.log(prior[:, None] * a + (1.0 - prior[:, None]) * b)
        out: FloatArray = np.where(m > 0, m * mixed, 0.0).sum(axis=1)
        return out

    boundary = ratio <= 0.0 or ratio >= 1.0
    z = NormalDist().inv_cdf(level if boundary else 0.5 + level / 2.0)
    floor = float(loglik(np.array([ratio]))[0]) - z * z / 2.0
    lo = np.array([0.0, ratio])
    hi = np.array([ratio, 1.0])
    # bisect each side for the crossing of ``floor``: below ratio rising, above it falling
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        inside = loglik(mid) >= floor
        lo = np.where(inside ^ np.array([True, False]), mid, lo)
        hi = np.where(inside ^ np.array([True, False]), hi, mid)
    lower = 0.0 if float(loglik(np.array([0.0]))[0]) >= floor else float(hi[0])
    upper = 1.0 if float(loglik(np.array([1.0]))[0]) >= floor else float(lo[1])
    return lower, upper


def label_shift_check(
    reference: LabelShiftReference,
    bin_counts: FloatArray,
    *,
    replicates: int = CHECK_REPLICATES,
    seed: int | None = None,
) -> LabelShiftCheck:
    """The label-shift check of a window from its rows per check bin ``bin_counts`` (L,)
    (module docstring). Cost: O(B·L·60) for B replicates, independent of the window's size."""
    n = int(bin_counts.sum())
    if n < MIN_ESTIMATE_ROWS:
        return LabelShiftCheck(p_value=None, holds=None)
    pos, neg = reference.bin_pos, reference.bin_neg
    prior = solve_prior(bin_counts, pos, neg)
    observed = check_statistics(bin_counts, prior, pos, neg)
    rng = np.random.default_rng(seed)
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    pos_share, neg_share = pos / n_pos, neg / n_neg
    mixed = float(prior) * pos_share + (1.0 - float(prior)) * neg_share
    drawn_pos = rng.multinomial(n_pos, pos_share, size=replicates).astype(np.float64)
    drawn_neg = rng.multinomial(n_neg, neg_share, size=replicates).astype(np.float64)
    drawn = rng.multinomial(n, mixed / mixed.sum(), size=replicates).astype(np.float64)
    null = check_statistics(drawn, solve_prior(drawn, drawn_pos, drawn_neg), drawn_pos, drawn_neg)
    # each statistic's p-value, then the smaller one's own null law from the same replicates
    observed_p = (1 + np.count_nonzero(null >= observed, axis=0)) / (replicates + 1)
    null_p = (1 + np.count_nonzero(null[None, :, :] >= null[:, None, :], axis=1)) / (replicates + 1)
    smallest = null_p.min(axis=1)
    p_value = float((1 + np.count_nonzero(smallest <= observed_p.min())) / (replicates + 1))
    return LabelShiftCheck(p_value=p_value, holds=check_holds(p_value))


def check_statistics(
    counts: FloatArray, prior: FloatArray, pos: FloatArray, neg: FloatArray
) -> FloatArray:
    """(..., 2) the check's statistics of window ``counts`` (..., L) against the reference
    mixture at ``prior`` (...,): the Cramér-von Mises distance (:func:`mixture_distance`),
    which weighs each bin by its share and so sees a change of the bulk, and Pearson's
    Σ_l (m_l - e_l)²/e_l, which weighs a bin's gap by its expected count e_l and so sees a
    misfit in the upper tail, where rare positives live: negatives whose scores rose inflate
    π̃, and the top bins then hold fewer rows than π̃ predicts."""
    a, b = class_shares(pos, neg)
    n = counts.sum(axis=-1, keepdims=True)
    expected = n * (prior[..., None] * a + (1.0 - prior[..., None]) * b)
    pearson = ((counts - expected) ** 2 / expected).sum(axis=-1)
    out: FloatArray = np.stack([mixture_distance(counts, prior, pos, neg), pearson], axis=-1)
    return out


def mixture_distance(
    counts: FloatArray, prior: FloatArray, pos: FloatArray, neg: FloatArray
) -> FloatArray:
    """Cramér-von Mises distance of window ``counts`` (..., L) from the reference mixture at
    ``prior`` (...,): Σ_l w_l (M_l - E_l)² / n, M and E the observed and expected cumulative
    counts and w_l the mixture's share of bin l; reference counts ``pos``, ``neg`` (..., L)."""
    a, b = class_shares(pos, neg)
    n = counts.sum(axis=-1, keepdims=True)
    share = prior[..., None] * a + (1.0 - prior[..., None]) * b
    gap = np.cumsum(counts, axis=-1) - n * np.cumsum(share, axis=-1)
    out: FloatArray = (share * gap * gap).sum(axis=-1) / n[..., 0]
    return out


def estimate_verdict(
    estimate: PriorEstimate, check: LabelShiftCheck, reference_prior: float
) -> str:
    """What the label-free estimate says of a window, as its record stores it
    (:func:`calmon.verdict.estimate_of`, ``docs/reference/metrics.md``): not enough data under
    :data:`MIN_ESTIMATE_ROWS` rows; the scores changed where the label-shift check rejects (in
    a way a class-ratio change does not explain); where it holds, a rise when π̂'s interval
    lies wholly above the reference's ratio times :data:`calmon.verdict.SHIFT_FACTOR`, a fall
    when it lies wholly below the ratio divided by it; else no change. Neither direction is
    called a class-ratio change (:class:`calmon.verdict.Estimate`)."""
    return estimate_of(
        check=check.holds, interval=(estimate.lower, estimate.upper), reference=reference_prior
    ).value


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
    above = int(np.searchsorted(ascending, threshold, side="left"))
    at = threshold_metrics(
        float(pos_runs[above:].sum()), float(neg_runs[above:].sum()), n_pos, n_neg, pi0=pi0
    )
    curves = auc_and_ap(ascending[::-1], pos_runs[::-1], neg_runs[::-1], pi0=pi0)
    regular = {**at.regular, **curves.regular}
    calibrated: dict[str, dict[str, float]] = {}
    for p in pi0:
        merged = {**at.calibrated[float(p)], **curves.calibrated[float(p)]}
        calibrated[pi0_key(p)] = {name: float(merged[name]) for name in ESTIMATED_CALIBRATED}
    return {
        "regular": {name: float(regular[name]) for name in ESTIMATED_REGULAR},
        "calibrated": calibrated,
    }


#: Bernoulli numbers B_2, B_4, …, B_12 of the digamma function's asymptotic series.
_BERNOULLI = (1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 5.0 / 66.0, -691.0 / 2730.0)
#: From this argument on the series (6 terms) is exact to well below 1e-16 relative.
_SERIES_FROM = 16.0
#: From this argument on the series' terms after the first are below 1e-17 of the sum.
_SERIES_BEYOND = 1.0e4
#: Tied runs up to this size are corrected term by term (:func:`tie_correction`).
_SHORT_RUN = 8


def harmonic_gap(start: FloatArray, count: FloatArray) -> FloatArray:
    """Σ_{t=0}^{m-1} 1/(x + t) = ψ(x + m) - ψ(x) for x = ``start`` > 0 and integers
    m = ``count`` ≥ 0 (same shape), in O(1) per element: the sum of the label-free average
    precision over a level's distinct scores (:func:`metrics_of_levels`).

    Arguments below :data:`_SERIES_FROM` are raised to it by their first terms, summed
    outright; the asymptotic series is then differenced term by term (log1p and
    m/(y(y + m)) for the first two), so the result keeps its relative precision however
    small m/x."""
    x = np.asarray(start, dtype=np.float64)
    m = np.asarray(count, dtype=np.float64)
    shift = np.where((m > 0) & (x < _SERIES_FROM), np.ceil(_SERIES_FROM - x), 0.0)
    low = np.flatnonzero(shift)
    head = np.zeros(low.size)
    x_low, m_low, shift_low = x.flat[low], m.flat[low], shift.flat[low]
    for t in range(int(shift_low.max(initial=0.0))):
        # 1/(x + t) - 1/(x + m + t): the terms the shift moves out of both ends
        head += np.where(t < shift_low, m_low / ((x_low + t) * (x_low + m_low + t)), 0.0)
    y = x + shift
    end = y + m
    out: FloatArray = np.log1p(m / y) + 0.5 * m / (y * end)
    out -= _BERNOULLI[0] / 2.0 * (1.0 / (end * end) - 1.0 / (y * y))
    near = np.flatnonzero(y < _SERIES_BEYOND)
    inv_y2, inv_e2 = 1.0 / (y.flat[near] ** 2), 1.0 / (end.flat[near] ** 2)
    pow_y, pow_e = inv_y2 * inv_y2, inv_e2 * inv_e2
    tail = np.zeros(near.size)
    for k, bernoulli in enumerate(_BERNOULLI[1:], start=2):
        tail -= bernoulli / (2 * k) * (pow_e - pow_y)
        pow_y, pow_e = pow_y * inv_y2, pow_e * inv_e2
    out.flat[near] += tail
    out.flat[low] += head
    return out


def tie_correction(start: FloatArray, count: FloatArray) -> FloatArray:
    """c/(x + c - 1) - Σ_{t=0}^{c-1} 1/(x + t) for x = ``start`` > 0 and run sizes
    c = ``count`` ≥ 1: what a tied run of c rows changes in the average precision's sum
    (:func:`metrics_of_levels`), its c terms replaced by one. Runs up to :data:`_SHORT_RUN`
    rows (nearly all) as -Σ_{t=0}^{c-2} (c - 1 - t)/((x + t)(x + c - 1)), without
    cancellation; longer ones by :func:`harmonic_gap`."""
    out = np.zeros_like(start)
    short = count <= _SHORT_RUN
    x, c = start[short], count[short]
    last = x + c - 1.0
    part = -1.0 / (x * last)  # t = 0, (c - 1)/(x (x + c - 1)) with the c - 1 applied below
    part *= c - 1.0
    for t in range(1, int(c.max(initial=0.0)) - 1):
        more = np.flatnonzero(c - 2.0 >= t)
        part[more] -= (c[more] - 1.0 - t) / ((x[more] + t) * last[more])
    out[short] = part
    long_runs = ~short
    x, c = start[long_runs], count[long_runs]
    out[long_runs] = c / (x + c - 1.0) - harmonic_gap(x, c)
    return out


def metrics_of_levels(
    sorted_scores: FloatArray,
    bounds: IntArray,
    adjusted: FloatArray,
    *,
    threshold: float,
    pi0: Sequence[float],
) -> dict[str, Any]:
    """:func:`metrics_of_runs` of a window's scores (n,, ascending) whose rows of level j,
    ``sorted_scores[bounds[j]:bounds[j + 1]]`` (:meth:`LabelShiftReference.level_bounds`), all
    count ``adjusted[j]`` (J,) as a positive: the same values up to rounding, in O(J + T) for
    T tied runs instead of O(K) for K distinct scores. (Closer to the exact sums than the
    per-score formula, whose cumulative sums over K blocks drift by a few 1e-12 relative at
    K = 10^6.)

    Within a level every distinct score holds the same share p of positives. ROC AUC: the
    ordered pairs within a level win and lose alike, so a level counts as one tied block,
    p(1 - p)N²/2 losses over its N rows. Average precision: with TP0, FP0 above the level,
    A = TP0 + r·FP0 and B = p + r(1 - p), a distinct score holding c_i rows with C_i rows of
    the level at or above it adds p·c_i·(TP0 + p·C_i)/(A + B·C_i), and the level's sum is
    p·[p·N/B + r((1 - p)TP0 - p·FP0)/B · S], S = Σ_i c_i/(A + B·C_i). S over rows one by one is
    a harmonic gap (:func:`harmonic_gap`); each tied run replaces its rows' terms by its own
    single one."""
    rows = np.diff(bounds).astype(np.float64)
    pos = adjusted * rows
    neg = rows - pos
    n_pos, n_neg = float(pos.sum()), float(neg.sum())
    above = int(np.searchsorted(sorted_scores, threshold, side="left"))
    cut = np.clip(bounds[1:] - np.maximum(bounds[:-1], above), 0, None).astype(np.float64)
    at = threshold_metrics(
        float((adjusted * cut).sum()), float((cut - adjusted * cut).sum()), n_pos, n_neg, pi0=pi0
    )
    # counts above each level, levels taken from the highest down
    tp0 = np.append(np.cumsum(pos[::-1])[::-1][1:], 0.0)
    fp0 = np.append(np.cumsum(neg[::-1])[::-1][1:], 0.0)
    tied = np.flatnonzero(sorted_scores[1:] == sorted_scores[:-1])
    first = np.diff(tied, prepend=-2) != 1
    run_start = tied[first]
    run_end = np.concatenate((tied[np.flatnonzero(first)[1:] - 1], tied[-1:])) + 1
    run_level = np.searchsorted(bounds, run_start, side="right") - 1
    run_rows = (run_end - run_start + 1).astype(np.float64)
    run_before = (bounds[run_level + 1] - run_end - 1).astype(np.float64)
    both = n_pos > 0 and n_neg > 0
    nan = float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        losses = float((pos * fp0).sum() + 0.5 * (pos * neg).sum())
        roc_auc = (n_pos * n_neg - losses) / (n_pos * n_neg) if both else nan

        def average_precision(ratio: float) -> float:
            if not both:
                return nan
            slope = adjusted + ratio * (1.0 - adjusted)
            offset = (tp0 + ratio * fp0) / slope
            gap = harmonic_gap(offset + 1.0, rows)
            a_run = offset[run_level]
            gap += np.bincount(
                run_level,
                weights=tie_correction(a_run + run_before + 1.0, run_rows),
                minlength=rows.size,
            )
            lift = ratio * ((1.0 - adjusted) * tp0 - adjusted * fp0) / slope
            level_sum = adjusted * (adjusted * rows + lift * gap) / slope
            return float(np.where(rows > 0, level_sum, 0.0).sum() / n_pos)

        prior = n_pos / (n_pos + n_neg) if n_pos + n_neg > 0 else nan
        regular: dict[str, float | FloatArray] = {
            **at.regular,
            "roc_auc": roc_auc,
            "average_precision": average_precision(1.0),
        }
        calibrated: dict[str, dict[str, float]] = {}
        for p in pi0:
            ratio = float(calibration_ratio(np.full((), prior), float(p)))
            merged: dict[str, float | FloatArray] = {
                **at.calibrated[float(p)],
                "average_precision": average_precision(ratio),
            }
            calibrated[pi0_key(p)] = {name: float(merged[name]) for name in ESTIMATED_CALIBRATED}
    return {
        "regular": {name: float(regular[name]) for name in ESTIMATED_REGULAR},
        "calibrated": calibrated,
    }


def assess_window(
    reference: LabelShiftReference, sorted_scores: FloatArray, *, seed: int | None = None
) -> tuple[PriorEstimate, LabelShiftCheck] | None:
    """π̂ of a window's scores (n,, ascending) with its interval, and the label-shift check
    of the same scores; None for an empty window."""
    counts = np.diff(reference.cell_bounds(sorted_scores)).astype(np.float64)
    estimate = prior_from_counts(reference, counts, seed=seed)
    if estimate is None or not np.isfinite(estimate.ratio):
        return None
    check = label_shift_check(
        reference,
        np.diff(reference.bin_bounds(sorted_scores)).astype(np.float64),
        seed=None if seed is None else seed + 1,
    )
    return estimate, check


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
    "regular": {...}, "calibrated": {repr(π0): {...}}, "label_shift": {"p_value", "holds",
    "method"}, "verdict", "cannot_see", "positive_class_ratio_resolved"}``
    (:func:`label_shift_check`, :func:`estimate_verdict`, ``calmon.catalogue.CANNOT_SEE``,
    :attr:`PriorEstimate.resolved`); metric values NaN where undefined. The metrics have no
    interval (see ``docs/reference/metrics.md``).
    """
    if reference is None:
        return None
    found = assess_window(reference, sorted_scores, seed=seed)
    if found is None:
        return None
    estimate, check = found
    # p' is a function of the level: everything per level, and per tied run for AP
    metrics = metrics_of_levels(
        sorted_scores,
        reference.level_bounds(sorted_scores),
        adjusted_probabilities(reference, estimate.ratio),
        threshold=threshold,
        pi0=pi0,
    )
    return {
        "positive_class_ratio": estimate.ratio,
        "positive_class_ratio_interval": [estimate.lower, estimate.upper],
        "method": METHOD,
        "n": estimate.n,
        **metrics,
        "label_shift": check.as_record(),
        "verdict": estimate_verdict(estimate, check, reference.prior),
        "cannot_see": CANNOT_SEE,
        "positive_class_ratio_resolved": estimate.resolved,
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
