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
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any, Final

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


def decision_from_split(
    *,
    n: int,
    n_pos: int,
    reference_n: int,
    reference_n_pos: int,
    parts: dict[str, Any] | None,
    metric: str = DECISION_METRIC,
    level: float = 0.95,
) -> dict[str, Any]:
    """The decision of a pooled set with ``n`` labelled predictions and ``n_pos`` positives
    against a reference of ``reference_n`` and ``reference_n_pos``, given the split of
    ``metric`` (``{"prior", "likelihood", "prior_interval", "likelihood_interval"}``, or None
    without a reference or a split; ``reference_n`` 0 without a labelled reference). Without
    ``windows`` and ``start`` (the caller's)."""
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
) -> dict[str, dict[str, Any]] | None:
    """The split of every prior-dependent metric's change from the reference to the pooled set
    (:func:`~app.metrics.split.drift_split`), with the intervals of both parts, from the two
    rankings and sums (neither set's rows); None when either set lacks a class (nothing can be
    calibrated)."""
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
) -> dict[str, dict[str, Any]]:
    """The decision of a pooled set against a reference (None: no reference) by each metric
    of PART_INTERVAL_METRICS (one bootstrap for all), each without ``windows`` and ``start``:
    counts, verdict, the parts of the metric's change and their intervals, and the class
    ratios' Wilson intervals."""
    split = None
    ref_n = ref_pos = 0
    if reference is not None and reference_sums is not None:
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
        )
    return {
        metric: decision_from_split(
            n=pooled.n_pos + pooled.n_neg,
            n_pos=pooled.n_pos,
            reference_n=ref_n,
            reference_n_pos=ref_pos,
            parts=None if split is None else split[metric],
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


#: the page's one-sided confidence that the likelihood part is below 0, as a normal quantile
#: (99.9%): chosen from the study of ``docs/metrics.md`` so that pure prior shifts page at most
#: 2.5% of models in a week of hourly decisions
PAGE_Z: Final = 3.09
#: the page's materiality: the likelihood part below this fraction of the reference value
PAGE_MATERIAL: Final = 0.05


def width_factor(z: float, level: float = 0.95) -> float:
    """k such that upper + k·(upper - lower) is the one-sided bound at the normal quantile
    ``z`` of a normal interval at ``level`` (center ± z_level·sd): (z / z_level - 1) / 2."""
    z_level = NormalDist().inv_cdf(0.5 + level / 2)
    return (z / z_level - 1.0) / 2.0


def page(decision: dict[str, Any], *, reference_value: float | None, z: float = PAGE_Z) -> bool:
    """Whether the decision pages (``CalmonDecisionMetricDrop``): the likelihood part of its
    metric's change is below 0 at one-sided confidence ``z`` and below -PAGE_MATERIAL times
    the reference's value of the metric."""
    interval = decision.get("likelihood_interval")
    likelihood = decision.get("likelihood_part")
    if interval is None or likelihood is None or reference_value is None:
        return False
    lower, upper = interval
    significant = upper + width_factor(z) * (upper - lower) < 0.0
    return bool(significant and likelihood < -PAGE_MATERIAL * reference_value)
