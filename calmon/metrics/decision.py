"""The decision over a pooled set of windows: one verdict from honest intervals at few
positives (``docs/reference/metrics.md``, "Decisions at few positives").

A window with 20 positives has no interval for the parts of its average precision change, so
alone it cannot say whether the model got worse. The decision pools the trailing windows back
until they hold enough positives (the service layer chooses them,
:mod:`calmon.services.windows.decisions`), splits the pooled set's change from the reference
exactly as a window's (:func:`calmon.metrics.split.drift_split` and its intervals), and reads
one verdict from it (:func:`calmon.verdict.decision_verdict`, the codes of
:class:`calmon.verdict.Verdict`):

- the class ratio moved when the pooled set's 95% Wilson interval of the positive class ratio
  and the reference's are disjoint (needs no metric interval, so it answers at 30 positives);
- the model got worse when the page's rule holds (below), the same evidence as the alert;
- the model may be worse (not yet significant) when only the likelihood part's 95% interval
  lies below 0: every hour's decision is another look at nearly the same windows, so that
  interval alone would say "worse" some hour of a day under a pure class-ratio change;
- stable when the likelihood interval exists and none says so; not enough data when it is
  absent and the ratio did not visibly move.

The page (:func:`calmon.verdict.page`, ``CalmonDecisionMetricDrop``) asks a sharper question
at a stricter level: did the positives' scores fall relative to the reference's positives
(:func:`positives_shift`)? Under a pure class-ratio change the scores of each class keep their
distribution, so its permutation tests keep their level at any ratio, with ties and at 20
positives, which the bootstrap interval of the AP part does not promise in its far tail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any, Final

import numpy as np

from calmon.arrays import FloatArray
from calmon.catalogue import DECISION_METRIC
from calmon.metrics.evaluation import SetSums, evaluate_ranked
from calmon.metrics.intervals import wilson_interval
from calmon.metrics.ranking import Ranking
from calmon.metrics.resampling import cut_with_fp
from calmon.metrics.split import PART_INTERVAL_METRICS, drift_split, split_intervals_ranked
from calmon.verdict import PAGE_P, decision_verdict, page

#: the method of :func:`positives_shift`
SHIFT_METHOD: Final = "location_and_placement"


def _mann_whitney_z(pooled: Ranking, reference: Ranking) -> float | None:
    """The one-sided Mann-Whitney z of the pooled positives against the reference's (> 0 when
    the pooled ones score lower; see :func:`positives_shift`), None when every positive score
    is tied."""
    n1, n2 = pooled.n_pos, reference.n_pos
    ascending, counts = reference.thresholds[::-1], reference.pos[::-1]
    below = np.concatenate(([0], np.cumsum(counts)))
    lower = below[np.searchsorted(ascending, pooled.thresholds, side="left")]
    upto = below[np.searchsorted(ascending, pooled.thresholds, side="right")]
    u = float(np.sum(pooled.pos * (lower + 0.5 * (upto - lower))))
    values = np.concatenate((pooled.thresholds, reference.thresholds))
    weights = np.concatenate((pooled.pos, reference.pos)).astype(np.float64)
    _, groups = np.unique(values, return_inverse=True)
    ties = np.bincount(groups, weights=weights)
    total = n1 + n2
    tie_term = float(np.sum(ties**3 - ties)) / (total * (total - 1))
    variance = n1 * n2 / 12.0 * (total + 1 - tie_term)
    if variance <= 0.0:
        return None
    return (n1 * n2 / 2.0 - u - 0.5) / float(np.sqrt(variance))


def _permutation_z(scores: FloatArray, c1: FloatArray, c2: FloatArray) -> float | None:
    """The skewness-corrected z of T = Σ c1·scores, a linear permutation statistic of the
    N = n1 + n2 positives (``c1``, ``c2``: the pooled and reference positives at each distinct
    score, ``scores`` a function of the score alone): E T = n1·s̄, Var T = n1·n2/(N - 1)·μ2 and
    third central moment n1·n2·(n2 - n1)/((N - 1)(N - 2))·μ3 (μ_k the k-th central moment of
    the scores over the N positives), exact; z is corrected for that skewness g by Hall's
    monotone transformation w = z - g/6·(z² - 1) + g²/108·z³. None when every positive has the
    same score."""
    n1, n2 = float(np.sum(c1)), float(np.sum(c2))
    total = n1 + n2
    counts = c1 + c2
    mean = float(np.sum(counts * scores)) / total
    d = scores - mean
    mu2 = float(np.sum(counts * d**2)) / total
    if float(np.ptp(scores[counts > 0])) == 0.0 or mu2 <= 0.0:
        return None
    mu3 = float(np.sum(counts * d**3)) / total
    variance = n1 * n2 / (total - 1) * mu2
    z = float(np.sum(c1 * d)) / math.sqrt(variance)
    if total <= 2:
        return z
    skew = n1 * n2 * (n2 - n1) / ((total - 1) * (total - 2)) * mu3 / variance**1.5
    return float(z - skew / 6.0 * (z * z - 1.0) + skew * skew / 108.0 * z**3)


def _counts(pooled: Ranking, reference: Ranking) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(the distinct positive scores of both sets, ascending; the pooled and the reference
    positives at each)."""
    values = np.union1d(pooled.thresholds, reference.thresholds)
    c1 = np.zeros(values.size)
    c1[np.searchsorted(values, pooled.thresholds)] = pooled.pos
    c2 = np.zeros(values.size)
    c2[np.searchsorted(values, reference.thresholds)] = reference.pos
    return values, c1, c2


def _placement_z(
    pooled: Ranking, reference: Ranking, negatives: Sequence[FloatArray]
) -> float | None:
    """The skewness-corrected z of the pooled positives' mean placement among ``negatives``
    against the reference positives' (> 0 when the pooled ones sit deeper among the
    negatives; see :func:`positives_shift`), None without negatives or when every positive
    has the same placement."""
    values, c1, c2 = _counts(pooled, reference)
    above, m = np.zeros(values.size), 0
    for part in negatives:
        lower = np.searchsorted(part, values, side="left")
        upto = np.searchsorted(part, values, side="right")
        above += part.size - 0.5 * (lower + upto)
        m += part.size
    if m == 0:
        return None
    return _permutation_z(above / m, c1, c2)


#: scores are clipped to [LOGIT_EDGE, 1 - LOGIT_EDGE] before their logit
LOGIT_EDGE: Final = 1e-6
#: grid nodes of the location test's density estimate
LOCATION_GRID: Final = 512
#: the location scores are clipped to these quantiles over the positives of both sets
LOCATION_CLIP: Final = (0.01, 0.99)


def location_scores(values: FloatArray, counts: FloatArray) -> FloatArray | None:
    """The location scores ψ(y) = -f'(y)/f(y) at the logits y of ``values`` (distinct scores,
    ascending), f the Gaussian kernel density of the logits of all positives (``counts`` at
    each value; Scott's bandwidth h = sd·N^(-1/5), binned on LOCATION_GRID nodes), clipped to
    the LOCATION_CLIP quantiles of ψ over the positives: the locally most powerful scores for
    a shift of the positives' logits (Hájek's adaptive scores; ψ(y) = (y - µ)/sd² for a normal
    f, the t-test). f is estimated from the positives of both sets together, so the scores do
    not depend on which set a positive belongs to and the permutation moments stay exact.
    None when the logits do not vary."""
    y = np.log(np.clip(values, LOGIT_EDGE, 1 - LOGIT_EDGE))
    y = y - np.log1p(-np.clip(values, LOGIT_EDGE, 1 - LOGIT_EDGE))
    total = float(np.sum(counts))
    mean = float(np.sum(counts * y)) / total
    sd = math.sqrt(float(np.sum(counts * (y - mean) ** 2)) / total)
    if sd <= 0.0 or float(np.ptp(y)) == 0.0:
        return None
    h = sd * total**-0.2
    grid = np.linspace(y[0] - 3 * h, y[-1] + 3 * h, LOCATION_GRID)
    step = grid[1] - grid[0]
    mass = np.bincount(
        np.rint((y - grid[0]) / step).astype(np.int64), weights=counts, minlength=grid.size
    )
    u = np.arange(1 - grid.size, grid.size) * step / h
    kernel = np.exp(-0.5 * u * u)
    density = np.convolve(mass, kernel)[grid.size - 1 : 2 * grid.size - 1]
    slope = np.convolve(mass, -u / h * kernel)[grid.size - 1 : 2 * grid.size - 1]
    psi = -slope / np.maximum(density, np.finfo(float).tiny)
    at = np.interp(y, grid, psi)
    order = np.argsort(at, kind="stable")
    cumulative = np.cumsum(counts[order]) / total
    lo = at[order][np.searchsorted(cumulative, LOCATION_CLIP[0])]
    hi = at[order][min(int(np.searchsorted(cumulative, LOCATION_CLIP[1])), at.size - 1)]
    clipped: FloatArray = np.clip(at, lo, hi)
    return clipped


def _location_z(pooled: Ranking, reference: Ranking) -> float | None:
    """The skewness-corrected z of the pooled positives' location scores against the reference
    positives' (> 0 when the pooled ones' logits sit lower; see :func:`positives_shift`), None
    when every positive has the same score."""
    values, c1, c2 = _counts(pooled, reference)
    scores = location_scores(values, c1 + c2)
    if scores is None:
        return None
    return _permutation_z(-scores, c1, c2)


def _upper_tail(z: float) -> float:
    return NormalDist().cdf(-z)


def positives_shift(
    pooled: Ranking, reference: Ranking, negatives: Sequence[FloatArray] = ()
) -> dict[str, Any] | None:
    """Whether the pooled set's positives score lower than the reference's: two tests of the
    two sets' positives against each other, the smaller p-value doubled (Bonferroni), and the
    Mann-Whitney test for the record.

    - **Location** (``location_z``): each positive's location score ψ (:func:`location_scores`:
      -f'/f of the density of the logits of both sets' positives, Hájek's adaptive scores), and
      T = Σ ψ over the pooled positives. It sees every positive's logit move down, weighted as
      a likelihood-ratio test of a shift of the logits weighs them (the flat parts of the
      density, a rare component of positives scoring like negatives, weigh little).
    - **Placement** (``placement_z``): each positive's placement among the negatives
      ``negatives`` (sorted parts; the pooled set's), a(x) = (#negatives > x + #tied/2)/m, the
      share of negatives scoring above it, and T = Σ a over the pooled positives. It sees
      positives moving in among the negatives (a share of them scoring like negatives), which
      weighs on AP at rare priors and barely moves the ranks among positives when the others
      are spread.
    - **Mann-Whitney** (``mann_whitney_z``, recorded, not in the p-value): U counts the pairs
      (pooled positive, reference positive) where the pooled one scores higher, a tie counting
      1/2; E[U] = n1·n2/2, Var U = n1·n2/12·(N + 1 - Σ(t³ - t)/(N(N - 1))) over the tie groups
      t of the N = n1 + n2 positives; z = (E[U] - U - 1/2)/sd (the page's first test before
      the location test replaced it).

    Both T are linear permutation statistics of the N positives (:func:`_permutation_z`: exact
    mean, variance and third moment, Hall's skewness correction). Under a pure change of the
    class ratio each class keeps its score distribution: the positives of both sets are
    exchangeable and independent of the negatives, so given the negatives and the N positive
    scores every assignment to the two sets is equally likely, and neither score depends on
    the assignment: the null moments are exact, with ties, at any ratio; only the normal tail
    is an approximation. ``z`` is the larger of the two z, ``p_value`` = min(1, 2·(1 - Φ(z)))
    (1 - Φ(z) without ``negatives``, the location test alone; the Mann-Whitney z stands in
    when the logits do not vary). A drift of the negatives alone is not its to see. None when
    either set has no positive or every positive score is tied.
    """
    if pooled.n_pos == 0 or reference.n_pos == 0:
        return None
    rank_z = _mann_whitney_z(pooled, reference)
    if rank_z is None:
        return None
    location_z = _location_z(pooled, reference)
    placement_z = _placement_z(pooled, reference, negatives) if negatives else None
    first = rank_z if location_z is None else location_z
    z = first if placement_z is None else max(first, placement_z)
    p_value = min(1.0, (1 if placement_z is None else 2) * _upper_tail(z))
    return {
        "method": SHIFT_METHOD,
        "z": z,
        "p_value": p_value,
        "mann_whitney_z": rank_z,
        "placement_z": placement_z,
        "location_z": location_z,
    }


def decision_from_split(
    *,
    n: int,
    n_pos: int,
    reference_n: int,
    reference_n_pos: int,
    parts: dict[str, Any] | None,
    shift: dict[str, Any] | None = None,
    reference_value: float | None = None,
    metric: str = DECISION_METRIC,
    level: float = 0.95,
    page_p: float = PAGE_P,
) -> dict[str, Any]:
    """The decision of a pooled set with ``n`` labelled predictions and ``n_pos`` positives
    against a reference of ``reference_n`` and ``reference_n_pos``, given the split of
    ``metric`` (``{"prior", "likelihood", "prior_interval", "likelihood_interval"}``, or None
    without a reference or a split; ``reference_n`` 0 without a labelled reference) and the
    :func:`positives_shift` test (None without one); ``reference_value`` is the reference's
    value of ``metric`` (None without one), which the page's materiality reads: the verdict
    says "worse" only where :func:`calmon.verdict.page` holds at the level ``page_p``
    (:data:`~calmon.verdict.OWN_PAGE_P` for a window that is its own decision). Without
    ``windows`` and ``start`` (the caller's)."""
    parts = parts or {}
    ratio_interval = wilson_interval(n_pos, n, level)
    reference_interval = wilson_interval(reference_n_pos, reference_n, level)
    likelihood_interval = parts.get("likelihood_interval")
    paged = page(
        {"likelihood_part": parts.get("likelihood"), "positives_shift": shift},
        reference_value=reference_value,
        p=page_p,
    )
    return {
        "n": n,
        "n_pos": n_pos,
        "verdict": decision_verdict(
            ratio_interval=ratio_interval,
            reference_interval=reference_interval,
            likelihood_interval=likelihood_interval,
            paged=paged,
        ).value,
        "metric": metric,
        "prior_part": parts.get("prior"),
        "prior_interval": parts.get("prior_interval"),
        "likelihood_part": parts.get("likelihood"),
        "likelihood_interval": likelihood_interval,
        "positive_class_ratio": n_pos / n if n else None,
        "positive_class_ratio_interval": ratio_interval,
        "reference_positive_class_ratio_interval": reference_interval,
        "positives_shift": shift,
    }


def pooled_split(
    pooled: Ranking,
    pooled_sums: SetSums,
    reference: Ranking,
    reference_sums: SetSums,
    *,
    threshold: float,
    score_kind: str,
    level: float = 0.95,
    seed: int | None = None,
    intervals: bool = True,
) -> dict[str, dict[str, Any]] | None:
    """The split of every prior-dependent metric's change from the reference to the pooled set
    (:func:`~calmon.metrics.split.drift_split`), with the intervals of both parts (None without
    ``intervals``: the parts alone, no bootstrap), from the two rankings and sums (neither
    set's rows); None when either set lacks a class (nothing can be calibrated)."""
    sizes = (pooled.n_pos, pooled.n_neg, reference.n_pos, reference.n_neg)
    if min(sizes) == 0:
        return None
    pooled_prior = pooled.n_pos / (pooled.n_pos + pooled.n_neg)
    ref_prior = reference.n_pos / (reference.n_pos + reference.n_neg)
    window = evaluate_ranked(
        pooled, pooled_sums, threshold=threshold, pi0=(ref_prior,), score_kind=score_kind
    )
    ref = evaluate_ranked(
        reference, reference_sums, threshold=threshold, pi0=(pooled_prior,), score_kind=score_kind
    )
    split = drift_split(window, ref)
    if not intervals:
        for parts in split.values():
            parts["prior_interval"] = parts["likelihood_interval"] = None
        return split
    bounds = split_intervals_ranked(
        pooled,
        cut_with_fp(pooled, threshold, pooled_sums.fp),
        reference,
        cut_with_fp(reference, threshold, reference_sums.fp),
        level=level,
        seed=seed,
    )
    for name, parts in split.items():
        parts["prior_interval"] = bounds[name]["prior"]
        parts["likelihood_interval"] = bounds[name]["likelihood"]
    return split


def decide_all(
    pooled: Ranking,
    pooled_sums: SetSums,
    reference: Ranking | None,
    reference_sums: SetSums | None,
    *,
    threshold: float,
    score_kind: str,
    level: float = 0.95,
    seed: int | None = None,
    intervals: bool = True,
    negatives: Sequence[FloatArray] = (),
) -> dict[str, dict[str, Any]]:
    """The decision of a pooled set against a reference (None: no reference) by each metric
    of PART_INTERVAL_METRICS (one bootstrap for all), each without ``windows`` and ``start``:
    counts, verdict, the parts of the metric's change and their intervals (None without
    ``intervals``, which skips the bootstrap), the class ratios' Wilson intervals and the
    positives' shift test (``negatives``: the pooled set's sorted negatives, in parts, where
    its placement test places the positives)."""
    split = shift = None
    ref_n = ref_pos = 0
    reference_values: dict[str, Any] = {}
    if reference is not None and reference_sums is not None:
        shift = positives_shift(pooled, reference, negatives)
        ref_n, ref_pos = reference.n_pos + reference.n_neg, reference.n_pos
        reference_values = evaluate_ranked(
            reference, reference_sums, threshold=threshold, pi0=(), score_kind=score_kind
        )["regular"]
        split = pooled_split(
            pooled,
            pooled_sums,
            reference,
            reference_sums,
            threshold=threshold,
            score_kind=score_kind,
            level=level,
            seed=seed,
            intervals=intervals,
        )
    return {
        metric: decision_from_split(
            n=pooled.n_pos + pooled.n_neg,
            n_pos=pooled.n_pos,
            reference_n=ref_n,
            reference_n_pos=ref_pos,
            parts=None if split is None else split[metric],
            shift=shift,
            reference_value=finite_or_none(reference_values.get(metric)),
            metric=metric,
            level=level,
        )
        for metric in PART_INTERVAL_METRICS
    }


def decide(
    pooled: Ranking,
    pooled_sums: SetSums,
    reference: Ranking | None,
    reference_sums: SetSums | None,
    *,
    threshold: float,
    score_kind: str,
    metric: str = DECISION_METRIC,
    level: float = 0.95,
    seed: int | None = None,
    negatives: Sequence[FloatArray] = (),
) -> dict[str, Any]:
    """The decision by ``metric`` (see :func:`decide_all`)."""
    return decide_all(
        pooled,
        pooled_sums,
        reference,
        reference_sums,
        threshold=threshold,
        score_kind=score_kind,
        level=level,
        seed=seed,
        negatives=negatives,
    )[metric]


def finite_or_none(value: Any) -> float | None:
    """A reference's value of the decision's metric as the page reads it: a float when it is
    a finite number, else None."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None
