"""The decision over a pooled set of windows: one verdict from honest intervals at few
positives (``docs/metrics.md``, "Decisions at few positives").

A window with 20 positives has no interval for the parts of its average precision change, so
alone it cannot say whether the model got worse. The decision pools the trailing windows back
until they hold enough positives (the service layer chooses them, :mod:`app.services.decisions`),
splits the pooled set's change from the reference exactly as a window's
(:func:`app.metrics.split.drift_split` and its intervals), and reads one verdict from it:

- the class ratio moved when the pooled set's 95% Wilson interval of the positive class ratio
  and the reference's are disjoint (needs no metric interval, so it answers at 30 positives);
- the model got worse when the likelihood part's 95% interval lies below 0;
- stable when both intervals exist and neither says so; not enough data when the likelihood
  interval is absent and the ratio did not visibly move.

The page (:func:`page`, ``CalmonDecisionMetricDrop``) asks a sharper question at a stricter level:
did the positives' scores fall relative to the reference's positives
(:func:`positives_shift`)? Under a pure class-ratio change the scores of each class keep their
distribution, so this rank test keeps its level at any ratio, with ties and at 20 positives,
which the bootstrap interval of the AP part does not promise in its far tail.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any, Final

import numpy as np

from app.metrics.evaluation import SetSums, evaluate_ranked
from app.metrics.intervals import Interval, wilson_interval
from app.metrics.ranking import Ranking
from app.metrics.resampling import cut_with_fp
from app.metrics.split import PART_INTERVAL_METRICS, drift_split, split_intervals_ranked

#: the metric whose change the decision splits (why: ``docs/metrics.md``)
DECISION_METRIC: Final = "average_precision"
#: the verdicts of a decision
WORSE: Final = "model_got_worse"
RATIO: Final = "class_ratio_moved"
BOTH: Final = "both"
STABLE: Final = "stable"
UNKNOWN: Final = "not_enough_data"
VERDICTS: Final = (WORSE, RATIO, BOTH, STABLE, UNKNOWN)


def _disjoint(a: Interval, b: Interval) -> bool:
    return a is not None and b is not None and (a[1] < b[0] or a[0] > b[1])


def verdict_of(
    *, ratio_interval: Interval, reference_interval: Interval, likelihood_interval: Interval
) -> str:
    """The verdict from the two class ratios' Wilson intervals and the likelihood part's
    interval (each [lo, hi] or None); see the module docstring."""
    moved = _disjoint(ratio_interval, reference_interval)
    if likelihood_interval is None:
        return RATIO if moved else UNKNOWN
    worse = likelihood_interval[1] < 0.0
    if moved:
        return BOTH if worse else RATIO
    return WORSE if worse else STABLE


def positives_shift(pooled: Ranking, reference: Ranking) -> dict[str, Any] | None:
    """Whether the pooled set's positives score lower than the reference's: the one-sided
    Mann-Whitney test of the two sets' positive scores, from their positive blocks.

    U counts the pairs (pooled positive, reference positive) where the pooled one scores
    higher, a tie counting 1/2; under no change of the positives' score distribution
    E[U] = n1·n2/2 and Var U = n1·n2/12·(N + 1 - Σ(t³ - t)/(N(N - 1))) over the tie groups t of
    the N = n1 + n2 positives. ``z`` = (E[U] - U - 1/2)/sd (continuity-corrected, > 0 when the
    pooled positives score lower), ``p_value`` its upper normal tail. A pure change of the
    class ratio leaves it valid (each class keeps its score distribution); a drift of the
    negatives alone is not its to see. None when either set has no positive or every
    positive score is tied.
    """
    n1, n2 = pooled.n_pos, reference.n_pos
    if n1 == 0 or n2 == 0:
        return None
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
    z = (n1 * n2 / 2.0 - u - 0.5) / float(np.sqrt(variance))
    return {"method": "mann_whitney", "z": z, "p_value": 1.0 - NormalDist().cdf(z)}


def decision_from_split(
    *,
    n: int,
    n_pos: int,
    reference_n: int,
    reference_n_pos: int,
    parts: dict[str, Any] | None,
    shift: dict[str, Any] | None = None,
    metric: str = DECISION_METRIC,
    level: float = 0.95,
) -> dict[str, Any]:
    """The decision of a pooled set with ``n`` labelled predictions and ``n_pos`` positives
    against a reference of ``reference_n`` and ``reference_n_pos``, given the split of
    ``metric`` (``{"prior", "likelihood", "prior_interval", "likelihood_interval"}``, or None
    without a reference or a split; ``reference_n`` 0 without a labelled reference) and the
    :func:`positives_shift` test (None without one). Without ``windows`` and ``start`` (the
    caller's)."""
    parts = parts or {}
    ratio_interval = wilson_interval(n_pos, n, level)
    reference_interval = wilson_interval(reference_n_pos, reference_n, level)
    likelihood_interval = parts.get("likelihood_interval")
    return {
        "n": n,
        "n_pos": n_pos,
        "verdict": verdict_of(
            ratio_interval=ratio_interval,
            reference_interval=reference_interval,
            likelihood_interval=likelihood_interval,
        ),
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
    (:func:`~app.metrics.split.drift_split`), with the intervals of both parts (None without
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
) -> dict[str, dict[str, Any]]:
    """The decision of a pooled set against a reference (None: no reference) by each metric
    of PART_INTERVAL_METRICS (one bootstrap for all), each without ``windows`` and ``start``:
    counts, verdict, the parts of the metric's change and their intervals (None without
    ``intervals``, which skips the bootstrap), the class ratios' Wilson intervals and the
    positives' shift test."""
    split = shift = None
    ref_n = ref_pos = 0
    if reference is not None and reference_sums is not None:
        shift = positives_shift(pooled, reference)
        ref_n, ref_pos = reference.n_pos + reference.n_neg, reference.n_pos
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
    )[metric]


#: the page's level: the positives' shift test (:func:`positives_shift`) below this p-value
#: (z > 3.5), chosen from the study of ``docs/metrics.md`` so that pure prior shifts page at
#: most 2.5% of models in a week of hourly decisions (each hour's decision re-reads most of
#: the last one's windows, and every one is compared with the same reference)
PAGE_P: Final = 1.0 - NormalDist().cdf(3.5)
#: the page's materiality: the likelihood part below this fraction of the reference value
PAGE_MATERIAL: Final = 0.05


def page(decision: dict[str, Any], *, reference_value: float | None, p: float = PAGE_P) -> bool:
    """Whether the decision pages (``CalmonDecisionMetricDrop``): its positives score lower
    than the reference's at the level ``p`` (:func:`positives_shift`), and the likelihood part
    of its metric's change is below -PAGE_MATERIAL times the reference's value of the metric
    (the fall matters to the metric, not only to the test)."""
    shift = decision.get("positives_shift")
    likelihood = decision.get("likelihood_part")
    if shift is None or likelihood is None or reference_value is None:
        return False
    return bool(shift["p_value"] < p and likelihood < -PAGE_MATERIAL * reference_value)
