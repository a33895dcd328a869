"""Population values of the stream's metrics: what an infinitely large window would show.

For a phase with prior π and latent separation d (z | y ~ N(µ_y, 1), µ_0 = 0, µ_1 = d; the
score is increasing in z, see :mod:`calmon.simulation.stream`), a latent threshold t has
TPR(t) = Q(t - d) and FPR(t) = Q(t), Q the standard normal upper tail, and:

- ``roc_auc`` = Φ(d / √2);
- ``average_precision`` at a prior p = ∫ P_p(t) dTPR(t) = ∫ P_p(t)·φ(t - d) dt with
  P_p(t) = p·TPR(t) / (p·TPR(t) + (1 - p)·FPR(t)): the limit of the step-rule AP of
  ``docs/reference/metrics.md`` as the window grows. Regular: p = π; calibrated: p = the reference
  prior;
- ``precision``, ``recall``, ``f1`` at the decision threshold τ (latent t_τ), regular and
  calibrated (precision at p = the reference prior; recall does not depend on p).

The integral is a trapezoid rule on a uniform grid over d ± 12: the integrand is smooth and
its weight φ(t - d) falls below 1e-31 at the ends, where the rule is accurate to ~1e-12.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from calmon.arrays import FloatArray
from calmon.metrics.split import shapley_parts
from calmon.simulation.stream import (
    PHASES,
    REFERENCE_PHASE,
    Phase,
    ScoreMap,
    WindowPlan,
    phase_bounds,
)
from calmon.timeline import iso

GRID_HALF_WIDTH: Final = 12.0
GRID_POINTS: Final = 4_801

_erfc = np.frompyfunc(math.erfc, 1, 1)


def upper_tail(x: FloatArray) -> FloatArray:
    """Q(x) = P(N(0, 1) > x), elementwise, accurate in both tails."""
    values = _erfc(np.asarray(x, dtype=np.float64) / math.sqrt(2.0))
    out: FloatArray = 0.5 * np.asarray(values, dtype=np.float64)
    return out


def roc_auc(separation: float) -> float:
    """Φ(d / √2): P(z_pos > z_neg) for independent draws of each class."""
    return 0.5 * math.erfc(-separation / 2.0)


def average_precision(separation: float, prior: float) -> float:
    """∫ P_p(t)·φ(t - d) dt with p = ``prior`` in (0, 1), d = ``separation``."""
    t = np.linspace(separation - GRID_HALF_WIDTH, separation + GRID_HALF_WIDTH, GRID_POINTS)
    tpr = upper_tail(t - separation)
    fpr = upper_tail(t)
    precision = prior * tpr / (prior * tpr + (1.0 - prior) * fpr)
    density = np.exp(-0.5 * (t - separation) ** 2) / math.sqrt(2.0 * math.pi)
    return float(np.trapezoid(precision * density, t))


def _precision(tpr: float, fpr: float, prior: float) -> float | None:
    flagged = prior * tpr + (1.0 - prior) * fpr
    return prior * tpr / flagged if flagged > 0.0 else None


def _f1(precision: float | None, recall: float) -> float | None:
    if precision is None:
        return None
    total = precision + recall
    return 2.0 * precision * recall / total if total > 0.0 else 0.0


def population_values(
    phase: Phase, *, latent_threshold: float, reference_prior: float
) -> dict[str, float | None]:
    """The main metrics of an infinite window of ``phase``.

    ``latent_threshold`` is t_τ (``ScoreMap.latent_threshold(τ)``, may be ±inf);
    ``reference_prior`` is the π0 of the calibrated values. Keys: ``prior``, ``roc_auc``,
    ``average_precision``, ``average_precision_calibrated``, ``precision``,
    ``precision_calibrated``, ``recall``, ``f1``, ``f1_calibrated``; None where undefined
    (nothing predicted positive).
    """
    d = phase.separation
    tpr = float(upper_tail(np.array([latent_threshold - d]))[0])
    fpr = float(upper_tail(np.array([latent_threshold]))[0])
    precision = _precision(tpr, fpr, phase.prior)
    precision_calibrated = _precision(tpr, fpr, reference_prior)
    return {
        "prior": phase.prior,
        "roc_auc": roc_auc(d),
        "average_precision": average_precision(d, phase.prior),
        "average_precision_calibrated": average_precision(d, reference_prior),
        "precision": precision,
        "precision_calibrated": precision_calibrated,
        "recall": tpr,
        "f1": _f1(precision, tpr),
        "f1_calibrated": _f1(precision_calibrated, tpr),
    }


def truth_document(
    *,
    plans: Sequence[WindowPlan],
    positives: Sequence[int],
    model: str,
    window: str,
    seed: int,
    threshold: float,
    score_map: ScoreMap,
    reference: Phase | None = None,
) -> dict[str, Any]:
    """What ``calmon simulate --truth`` writes: the scenario and, per window, its true values.

    ``positives[i]`` is the number of positives drawn for ``plans[i]``. The reference is the
    stable phase (population prior π_ref); per window: ``start``, ``end``, ``phase``, true
    ``prior``, ``n``, ``n_pos``, the :func:`population_values` under ``population`` (calibrated
    ones at π_ref), and the population split of ``average_precision`` as
    ``docs/reference/metrics.md`` defines it (:func:`calmon.metrics.split.shapley_parts` of the
    window's AP at its own prior and at π_ref and the reference's AP at the window's prior and at
    π_ref; ``total = prior + likelihood``). A pure prior shift (same separation) has a likelihood
    part of exactly 0, a pure likelihood drift (same prior) a prior part of exactly 0.
    ``reference``: the stable phase when it is not :data:`PHASES`' (``--prior``).
    """
    reference = PHASES[REFERENCE_PHASE] if reference is None else reference
    latent = score_map.latent_threshold(threshold)
    values: dict[str, dict[str, float | None]] = {}
    for plan in plans:
        if plan.phase.name not in values:
            values[plan.phase.name] = population_values(
                plan.phase, latent_threshold=latent, reference_prior=reference.prior
            )
    ref_values = population_values(
        reference, latent_threshold=latent, reference_prior=reference.prior
    )
    ref_ap = ref_values["average_precision"]
    assert ref_ap is not None
    rows = []
    for plan, n_pos in zip(plans, positives, strict=True):
        population = values[plan.phase.name]
        ap, ap_at_ref = population["average_precision"], population["average_precision_calibrated"]
        assert ap is not None
        assert ap_at_ref is not None
        ref_at_window = average_precision(reference.separation, plan.phase.prior)
        total, prior, likelihood = shapley_parts(ap, ap_at_ref, ref_at_window, ref_ap)
        rows.append(
            {
                "start": iso(plan.start),
                "end": iso(plan.end),
                "phase": plan.phase.name,
                "prior": plan.phase.prior,
                "n": plan.size,
                "n_pos": n_pos,
                "population": population,
                "average_precision_change": {
                    "total": total,
                    "prior": prior,
                    "likelihood": likelihood,
                },
            }
        )
    bounds = phase_bounds(plans, REFERENCE_PHASE)
    return {
        "model": model,
        "window": window,
        "seed": seed,
        "threshold": threshold,
        "score": {
            "latent": "z | y ~ N(mu_y, 1), mu_0 = 0, mu_1 = separation",
            "map": "sigmoid(slope * z + intercept)",
            "slope": score_map.slope,
            "intercept": score_map.intercept,
        },
        "phases": {
            plan.phase.name: {"prior": plan.phase.prior, "separation": plan.phase.separation}
            for plan in plans
        },
        "reference": {
            "start": iso(bounds[0]) if bounds else None,
            "end": iso(bounds[1]) if bounds else None,
            "population": ref_values,
        },
        "windows": rows,
    }
