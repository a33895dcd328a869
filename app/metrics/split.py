"""Separating prior drift from likelihood drift (``docs/metrics.md``).

For a prior-dependent metric M, a window t and a reference set with prior π_ref:

    total      = M_t - M_ref
    prior      = M_t - M_t^c(π_ref)      the part the change of class ratio alone explains
    likelihood = M_t^c(π_ref) - M_ref    the part due to P(score | y) changing

``prior`` and ``likelihood`` are computed as defined and ``total`` as their sum, so
prior + likelihood = total holds bit for bit (``total`` may differ from M_t - M_ref by a
rounding of the last bit).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from app.metrics.evaluation import check_options, evaluate_prepared, prepare

#: Metrics whose change is split (prior-dependent, ``docs/metrics.md``).
SPLIT_METRICS = ("precision", "f1", "average_precision", "best_f1", "pr_gain_auc")

Split = dict[str, dict[str, Any]]


def drift_split(window: dict[str, Any], reference: dict[str, Any]) -> Split:
    """The prior / likelihood / total split of every metric in :data:`SPLIT_METRICS`.

    ``window`` and ``reference`` are :func:`app.metrics.evaluate` results; ``window`` must
    have been evaluated with the reference prior among its π0 values (its ``calibrated`` has
    the key ``repr(float(reference["prior"]))``), else ValueError. Returns
    ``{metric: {"total", "prior", "likelihood"}}``, each a float or None where any of M_t,
    M_ref, M_t^c(π_ref) is undefined (so all None when the reference prior is undefined,
    0 or 1, since nothing can be calibrated at it). ``total`` is ``prior + likelihood``, so
    the parts add up exactly, as ``docs/metrics.md`` requires.
    """
    ref_prior = reference.get("prior")
    calibrated_at_ref: dict[str, Any] | None = None
    if ref_prior is not None and 0.0 < ref_prior < 1.0:
        key = repr(float(ref_prior))
        try:
            calibrated_at_ref = window["calibrated"][key]
        except KeyError:
            raise ValueError(
                f"window has no calibrated values at the reference prior {key}; "
                "evaluate it with pi0 including reference['prior']"
            ) from None
    split: Split = {}
    for name in SPLIT_METRICS:
        current = window["regular"].get(name)
        baseline = reference["regular"].get(name)
        recalibrated = None if calibrated_at_ref is None else calibrated_at_ref.get(name)
        if current is None or baseline is None or recalibrated is None:
            split[name] = {"total": None, "prior": None, "likelihood": None}
        else:
            prior = current - recalibrated
            likelihood = recalibrated - baseline
            split[name] = {"total": prior + likelihood, "prior": prior, "likelihood": likelihood}
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

    Scores are only ranked and thresholded here, so any finite scores are accepted. With
    ``intervals=True`` each metric also gets ``"likelihood_interval"``: [lo, hi] or None,
    from :func:`app.metrics.intervals.likelihood_intervals` (window and reference
    bootstrapped independently, seeded by ``seed``).
    """
    check_options(threshold=threshold, pi0=(), score_kind="score")
    window_set = prepare(window_scores, window_labels, score_kind="score")
    ref_set = prepare(ref_scores, ref_labels, score_kind="score")
    reference = evaluate_prepared(ref_set, threshold=threshold, pi0=(), score_kind="score")
    ref_prior = reference["prior"]
    at_ref = (ref_prior,) if ref_prior is not None and 0.0 < ref_prior < 1.0 else ()
    window = evaluate_prepared(window_set, threshold=threshold, pi0=at_ref, score_kind="score")
    split = drift_split(window, reference)
    if intervals:
        from app.metrics.intervals import likelihood_intervals

        bounds = likelihood_intervals(
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
            parts["likelihood_interval"] = bounds.get(name)
    return split
