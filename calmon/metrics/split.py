"""Separating prior drift from likelihood drift (``docs/reference/metrics.md``).

For a prior-dependent metric M, a window t with prior π_t and a reference set with prior
π_ref, write M^c(π) for M calibrated at the prior π. The change M_t - M_ref can be walked in
two orders: first the prior then the likelihood (through M_t^c(π_ref)), or first the
likelihood then the prior (through M_ref^c(π_t)). The split is the mean of the two orders
(the Shapley split of the two shifts):

    prior      = ½[(M_t - M_t^c(π_ref)) + (M_ref^c(π_t) - M_ref)]
    likelihood = ½[(M_t^c(π_ref) - M_ref) + (M_t - M_ref^c(π_t))]
    total      = prior + likelihood

So the interaction of the two shifts is shared equally, and swapping window and reference
negates both parts exactly, bit for bit: each part is ½(x + y) of two differences, the swap
turns them into -y and -x, and IEEE rounding of a sum and of a halving is symmetric under
negation and does not depend on the order of the two terms. ``total`` is computed as
prior + likelihood, so the parts add up bit for bit (``total`` may differ from
M_t - M_ref by a rounding of the last bit).

The 95% intervals of both parts (:func:`split_intervals`) come from a Poisson bootstrap of
the window and of the reference set, drawn independently (``docs/reference/intervals.md``): each
replicate pair computes both parts with the same formula, each set calibrated at the prior of
the other set's replicate, so the intervals carry the noise of both priors as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeGuard, TypeVar

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray, LabelArray
from calmon.catalogue import BY_NAME, SPLIT_METRICS
from calmon.metrics.curves import prior_dependent_at
from calmon.metrics.evaluation import evaluate_prepared
from calmon.metrics.intervals import REAL, Interval, replicate_interval
from calmon.metrics.prepared import check_options, pi0_key, prepare
from calmon.metrics.ranking import Ranking
from calmon.metrics.resampling import (
    CHUNK_CELLS,
    Replicates,
    ThresholdCut,
    cut_at,
    default_replicates,
    draw_replicates,
    observed,
)
from calmon.metrics.thresholded import threshold_metrics

#: The split metrics whose parts get intervals: the bootstrap intervals of the parts of best F1
#: (a maximum) and AUPRG miss nominal coverage (``docs/reference/intervals.md``), so theirs
#: are None.
PART_INTERVAL_METRICS = tuple(name for name in SPLIT_METRICS if BY_NAME[name].interval != "none")
MIN_AP_PART_POSITIVES = 100
"""AP's parts get intervals only when both sets have at least this many positives
(:func:`ap_parts_published`): with fewer, their bootstrap intervals undercover on non-binormal
scores (down to 0.926 at 20 and 0.922 at 60 positives per set), with 100-200 they cover
0.930-0.966 (``docs/reference/intervals.md``, "Parts of the drift split")."""
RARE_PRIOR = 0.05
"""Below this prior (of the window or the reference) the parts of precision and F1 also get
Student's t quantile at :func:`ap_part_df` degrees of freedom (:func:`part_df`): there
precision at τ is nearly proportional to the prior, P ≈ π·TPR/((1 - π)·FPR), so a part is a
product of noisy factors (the prior difference, a TPR resting on the few positives) whose
skew the normal quantile misses, mostly on one side (window π = 0.002, reference π = 0.01,
20 positives per set: the prior parts covered 0.904-0.954 on six score families with the
normal quantile, 0.928-0.964 with t; ``docs/reference/intervals.md``). At larger priors precision
saturates and the normal quantile covers (t there over-covers, up to 0.977)."""
#: The split metrics computed at the decision threshold (the others come from the curves).
_AT_THRESHOLD = tuple(name for name in SPLIT_METRICS if BY_NAME[name].formula == "thresholded")

Split = dict[str, dict[str, Any]]
PartIntervals = dict[str, dict[str, Interval]]
Number = TypeVar("Number", float, FloatArray)


def shapley_parts(
    current: Number, current_at_ref: Number, ref_at_current: Number, baseline: Number
) -> tuple[Number, Number, Number]:
    """(total, prior, likelihood) from M_t, M_t^c(π_ref), M_ref^c(π_t) and M_ref.

    Works on floats and, elementwise, on arrays of replicates. The one place the formula is
    written: the point split, its bootstrap replicates and the simulation's population truth
    all use it, so they agree bit for bit on equal inputs.
    """
    prior = 0.5 * ((current - current_at_ref) + (ref_at_current - baseline))
    likelihood = 0.5 * ((current_at_ref - baseline) + (current - ref_at_current))
    return prior + likelihood, prior, likelihood


def _valid_prior(prior: float | None) -> TypeGuard[float]:
    """Whether a set can be calibrated at ``prior`` (defined and in (0, 1))."""
    return prior is not None and 0.0 < prior < 1.0


def _calibrated_at(result: dict[str, Any], prior: float, role: str) -> dict[str, Any]:
    key = pi0_key(prior)
    try:
        values: dict[str, Any] = result["calibrated"][key]
    except KeyError:
        other = "reference" if role == "window" else "window"
        raise ValueError(
            f"{role} has no calibrated values at the {other} prior {key}; "
            f"evaluate it with pi0 including {other}['prior']"
        ) from None
    return values


def drift_split(window: dict[str, Any], reference: dict[str, Any]) -> Split:
    """The prior / likelihood / total split of every metric in :data:`SPLIT_METRICS`.

    ``window`` and ``reference`` are :func:`calmon.metrics.evaluate` results (or
    :func:`~calmon.metrics.evaluation.evaluate_ranked` ones), each evaluated with the other's
    prior among its π0 values: ``window["calibrated"]`` has the key
    ``pi0_key(reference["prior"])`` and ``reference["calibrated"]`` the key
    ``pi0_key(window["prior"])``, else ValueError. Neither is needed when either prior is
    undefined, 0 or 1. Returns ``{metric: {"total", "prior", "likelihood"}}`` (see the module
    docstring), each a float, or None for all three where any of M_t, M_ref, M_t^c(π_ref),
    M_ref^c(π_t) is undefined (so always None when either prior is undefined, 0 or 1: nothing
    can be calibrated at it).
    """
    window_prior, ref_prior = window.get("prior"), reference.get("prior")
    at_ref: dict[str, Any] | None = None
    ref_at_window: dict[str, Any] | None = None
    if _valid_prior(window_prior) and _valid_prior(ref_prior):
        at_ref = _calibrated_at(window, ref_prior, "window")
        ref_at_window = _calibrated_at(reference, window_prior, "reference")
    split: Split = {}
    for name in SPLIT_METRICS:
        values = (
            window["regular"].get(name),
            None if at_ref is None else at_ref.get(name),
            None if ref_at_window is None else ref_at_window.get(name),
            reference["regular"].get(name),
        )
        if any(value is None for value in values):
            split[name] = {"total": None, "prior": None, "likelihood": None}
        else:
            total, prior, likelihood = shapley_parts(*values)
            split[name] = {"total": total, "prior": prior, "likelihood": likelihood}
    return split


def split_from_arrays(
    window_scores: npt.ArrayLike,
    window_labels: npt.ArrayLike,
    ref_scores: npt.ArrayLike,
    ref_labels: npt.ArrayLike,
    *,
    threshold: float,
    intervals: bool = False,
    seed: int | None = None,
) -> Split:
    """:func:`drift_split` of a window and a reference set given as raw arrays.

    Scores are only ranked and thresholded here, so any finite scores are accepted. Both sets
    are evaluated the same way (each at the other's prior), so swapping them negates the parts
    exactly. With ``intervals=True`` each metric also gets ``"prior_interval"`` and
    ``"likelihood_interval"``: [lo, hi] or None, from :func:`split_intervals` (window and
    reference bootstrapped independently, seeded by ``seed``).
    """
    check_options(threshold=threshold, pi0=(), score_kind="score")
    window_set = prepare(window_scores, window_labels, score_kind="score")
    ref_set = prepare(ref_scores, ref_labels, score_kind="score")
    window_prior = _prior(window_set.ranking)
    ref_prior = _prior(ref_set.ranking)
    window_pi0: tuple[float, ...] = ()
    ref_pi0: tuple[float, ...] = ()
    if _valid_prior(window_prior) and _valid_prior(ref_prior):
        window_pi0, ref_pi0 = (ref_prior,), (window_prior,)
    window = evaluate_prepared(window_set, threshold=threshold, pi0=window_pi0, score_kind="score")
    reference = evaluate_prepared(ref_set, threshold=threshold, pi0=ref_pi0, score_kind="score")
    split = drift_split(window, reference)
    if intervals:
        bounds = split_intervals(
            window_set.scores,
            window_set.is_pos.view(np.int8),
            window_set.ranking,
            ref_set.scores,
            ref_set.is_pos.view(np.int8),
            ref_set.ranking,
            threshold=threshold,
            seed=seed,
        )
        for name, parts in split.items():
            parts["prior_interval"] = bounds[name]["prior"]
            parts["likelihood_interval"] = bounds[name]["likelihood"]
    return split


def _prior(ranking: Ranking) -> float | None:
    n = ranking.n_pos + ranking.n_neg
    return ranking.n_pos / n if n else None


def evaluate_at_prior(
    thresholds: FloatArray,
    reps: Replicates,
    pi0: FloatArray,
    names: Sequence[str] = SPLIT_METRICS,
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """Each replicate's metrics ``names`` (of :data:`SPLIT_METRICS`), regular and calibrated
    at its own π0 (``pi0`` shape (B,)): ``(regular, calibrated)``, each ``{metric: (B,)}``.

    The curve metrics come from :func:`~calmon.metrics.curves.prior_dependent_at` (one pass over
    the blocks for both). Precision and F1 at τ depend on the counts only through TPR, FPR and
    π0 (P_c = TP / (TP + r·FP)), so the calibrated ones are the regular ones of the replicate
    with its negative counts scaled by r = n_pos·(1 - π0) / (π0·n_neg), whose prior is then
    exactly π0. NaN where a class is missing, and calibrated values also where π0 ∉ (0, 1)
    (NaN included).
    """
    n_pos = reps.n_pos.astype(np.float64)
    n_neg = reps.n_neg.astype(np.float64)
    with np.errstate(invalid="ignore"):
        valid = (n_pos > 0) & (n_neg > 0) & (pi0 > 0) & (pi0 < 1)
    p = np.where(valid, pi0, 0.5)
    scale = np.where(valid, n_pos * (1 - p) / (p * np.where(valid, n_neg, 1.0)), 1.0)
    curve_names = [name for name in names if name not in _AT_THRESHOLD]
    curve_regular, curve_calibrated = (
        prior_dependent_at(
            thresholds,
            reps.pos,
            reps.neg_tied,
            reps.neg_above,
            reps.neg_below,
            pi0=pi0,
            names=curve_names,
        )
        if curve_names
        else ({}, {})
    )
    at_tau = threshold_metrics(reps.tp, reps.fp, n_pos, n_neg, pi0=[]).regular
    scaled = threshold_metrics(reps.tp, reps.fp * scale, n_pos, n_neg * scale, pi0=[]).regular
    regular: dict[str, FloatArray] = {}
    calibrated: dict[str, FloatArray] = {}
    for name in names:
        if name in _AT_THRESHOLD:
            regular[name] = np.asarray(at_tau[name], dtype=np.float64)
            calibrated[name] = np.where(valid, np.asarray(scaled[name], np.float64), np.nan)
        else:
            regular[name] = curve_regular[name]
            calibrated[name] = curve_calibrated[name]
    return regular, calibrated


def _replicate_prior(reps: Replicates) -> FloatArray:
    n_pos, n = reps.n_pos, reps.n_pos + reps.n_neg
    prior: FloatArray = np.divide(n_pos, n, out=np.full(n.shape, np.nan), where=n > 0)
    return prior


def _parts(
    window_ranking: Ranking,
    window: Replicates,
    ref_ranking: Ranking,
    ref: Replicates,
    names: Sequence[str],
) -> dict[str, tuple[FloatArray, FloatArray]]:
    """{metric: (prior, likelihood)} of paired replicates of the window and the reference for
    the metrics ``names``, each (B,): every set regular and calibrated at the prior of the
    other's replicate."""
    window_regular, window_at_ref = evaluate_at_prior(
        window_ranking.thresholds, window, _replicate_prior(ref), names
    )
    ref_regular, ref_at_window = evaluate_at_prior(
        ref_ranking.thresholds, ref, _replicate_prior(window), names
    )
    out: dict[str, tuple[FloatArray, FloatArray]] = {}
    for name in names:
        _, prior, likelihood = shapley_parts(
            window_regular[name], window_at_ref[name], ref_at_window[name], ref_regular[name]
        )
        out[name] = (prior, likelihood)
    return out


def split_intervals(
    window_scores: FloatArray,
    window_labels: LabelArray,
    window_ranking: Ranking,
    ref_scores: FloatArray,
    ref_labels: LabelArray,
    ref_ranking: Ranking,
    *,
    threshold: float,
    level: float = 0.95,
    replicates: int | None = None,
    seed: int | None = None,
) -> PartIntervals:
    """Intervals at ``level`` for the prior and likelihood parts of :data:`SPLIT_METRICS`.

    Returns ``{metric: {"prior": [lo, hi] | None, "likelihood": [lo, hi] | None}}``. The
    window and the reference set are bootstrapped independently (B Poisson replicates each,
    B by default :func:`~calmon.metrics.resampling.default_replicates` of the larger set); pair b
    computes both parts with :func:`shapley_parts`, the window calibrated at the prior of
    reference replicate b and the reference at the prior of window replicate b. Intervals from
    the B values of each part on the identity scale
    (:func:`~calmon.metrics.intervals.replicate_interval`), for average precision, and for
    precision and F1 when either prior is below RARE_PRIOR, with Student's t quantile at
    :func:`ap_part_df` degrees of freedom (:func:`part_df`); None for the metrics outside
    :data:`PART_INTERVAL_METRICS`, for AP when either set has fewer than
    MIN_AP_PART_POSITIVES positives, and None when the point part is
    undefined (either prior 0 or 1, a metric undefined) or fewer than 90% of the pairs define
    it. The same ``seed`` gives the same intervals.
    """
    return split_intervals_ranked(
        window_ranking,
        cut_at(window_scores, window_labels, window_ranking, threshold),
        ref_ranking,
        cut_at(ref_scores, ref_labels, ref_ranking, threshold),
        level=level,
        replicates=replicates,
        seed=seed,
    )


def split_intervals_ranked(
    window_ranking: Ranking,
    window_cut: ThresholdCut,
    ref_ranking: Ranking,
    ref_cut: ThresholdCut,
    *,
    level: float = 0.95,
    replicates: int | None = None,
    seed: int | None = None,
) -> PartIntervals:
    """:func:`split_intervals` from each set's ranking and threshold cut (see
    :func:`~calmon.metrics.resampling.cut_with_fp`), for a reference pooled without its rows.

    The two sets are drawn in lockstep chunks of equally many replicates, about CHUNK_CELLS
    (replicate, block) cells of the larger set each, so memory stays bounded."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if replicates is not None and replicates < 2:
        raise ValueError(f"replicates must be ≥ 2, got {replicates}")
    blocks = max(window_ranking.thresholds.size, ref_ranking.thresholds.size, 1)
    b = default_replicates(blocks) if replicates is None else replicates
    rng = np.random.default_rng(seed)

    published = [
        name
        for name in PART_INTERVAL_METRICS
        if BY_NAME[name].interval != "bootstrap"
        or ap_parts_published(window_ranking.n_pos, ref_ranking.n_pos)
    ]
    point = _parts(
        window_ranking,
        observed(window_ranking, window_cut),
        ref_ranking,
        observed(ref_ranking, ref_cut),
        published,
    )
    collected: dict[str, tuple[list[FloatArray], list[FloatArray]]] = {
        name: ([], []) for name in published
    }
    rows = max(1, CHUNK_CELLS // blocks)
    for start in range(0, b, rows):
        size = min(rows, b - start)
        window = draw_replicates(window_ranking, window_cut, size=size, rng=rng)
        ref = draw_replicates(ref_ranking, ref_cut, size=size, rng=rng)
        parts = _parts(window_ranking, window, ref_ranking, ref, published)
        for name, (priors, likelihoods) in collected.items():
            priors.append(parts[name][0])
            likelihoods.append(parts[name][1])

    out: PartIntervals = {name: {"prior": None, "likelihood": None} for name in SPLIT_METRICS}
    for name, (priors, likelihoods) in collected.items():
        point_prior, point_likelihood = (float(v[0]) for v in point[name])
        df = part_df(name, window_ranking, ref_ranking)
        out[name] = {
            "prior": _interval(priors, point_prior, level, df),
            "likelihood": _interval(likelihoods, point_likelihood, level, df),
        }
    return out


def ap_parts_published(window_n_pos: int, ref_n_pos: int) -> bool:
    """Whether AP's parts get intervals: both sets have ≥ MIN_AP_PART_POSITIVES positives."""
    return min(window_n_pos, ref_n_pos) >= MIN_AP_PART_POSITIVES


def part_df(name: str, window_ranking: Ranking, ref_ranking: Ranking) -> float | None:
    """Degrees of freedom of the t quantile of ``name``'s part intervals (None: the normal
    quantile): :func:`ap_part_df` for average precision, and for precision and F1 when either
    set's prior is below RARE_PRIOR."""
    df = ap_part_df(window_ranking.n_pos, ref_ranking.n_pos)
    if BY_NAME[name].interval == "bootstrap":
        return df
    priors = (_prior(window_ranking), _prior(ref_ranking))
    if any(prior is not None and prior < RARE_PRIOR for prior in priors):
        return df
    return None


def ap_part_df(window_n_pos: int, ref_n_pos: int) -> float:
    """Degrees of freedom of the t quantile of AP's part intervals: n_pos - 1 of the set with
    fewer positives.

    AP is a mean over the positives of the precision at each one's rank, so the spread of its
    parts rests on about as many terms as the smaller set has positives, and the bootstrap
    understates it a little (by 3-6% at 20 positives per set). From MIN_AP_PART_POSITIVES up
    this widens the interval by about 1% or less. Precision and F1 use it below RARE_PRIOR
    (:func:`part_df`).
    """
    return float(min(window_n_pos, ref_n_pos) - 1)


def _interval(parts: list[FloatArray], point: float, level: float, df: float | None) -> Interval:
    return replicate_interval(np.concatenate(parts), point, level=level, scale=REAL, df=df)
