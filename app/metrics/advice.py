"""Threshold advice at a window's class ratio, from the reference's class-conditional scores.

Assumption (label shift, as in :mod:`app.metrics.label_free`): the window's P(score | y) is
the reference's; only π moved. The reference's :class:`~app.metrics.ranking.Ranking` then
gives, at each of its distinct positive scores t_k (the only thresholds where the recall
moves), TPR(t_k) = TP_k / n_pos and FPR(t_k) = FP_k / n_neg, which do not depend on π, and
at any prior π:

    precision(t) = π·TPR / (π·TPR + (1 - π)·FPR)
    alert_rate(t) = π·TPR + (1 - π)·FPR          (the fraction of predictions flagged)
    cost(t) = c_fp·(1 - π)·FPR + c_fn·π·(1 - TPR)  (expected cost per prediction)

An objective picks one t_k (:func:`advise`). Where the assumption fails (a likelihood drift),
these expectations are wrong in a direction no prior can fix: :func:`class_shift_p_value`
tests it from a window's labelled scores (two-sample Kolmogorov-Smirnov per class against the
reference, at the reference's thresholds).

:func:`window_advice` gives the ``advice`` of a window record: the window's class ratio comes
from its labels when it has enough of them (``measured``), else from the label-free estimate,
only where that estimate's label-shift check holds (``estimated``); otherwise there is no
advice and the record says why (:func:`window_prior`, ``docs/acting.md``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from app.arrays import FloatArray
from app.metrics.prepared import PreparedSet
from app.metrics.ranking import Ranking

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


@dataclass(frozen=True, slots=True)
class Advice:
    """The threshold an objective picks at a prior, and what it is expected to give there
    (``cost`` per prediction, NaN without a cost objective)."""

    threshold: float
    precision: float
    recall: float
    alert_rate: float
    cost: float


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


def advise(ranking: Ranking, *, prior: float, objective: Mapping[str, Any]) -> Advice | None:
    """The advised threshold for ``objective`` at ``prior`` ∈ (0, 1), or None when no
    threshold meets it (or the reference lacks a class).

    - ``{"target_precision": p}``: the lowest threshold whose expected precision is ≥ p
      (the most recall at that precision);
    - ``{"costs": {"false_positive": c_fp, "false_negative": c_fn}}``: the threshold of least
      expected cost (the highest one on a tie);
    - ``{"alert_rate": r}``: the lowest threshold flagging at most a fraction r (a budget).
    """
    if ranking.n_pos == 0 or ranking.n_neg == 0:
        return None
    curves = expected_curves(ranking, prior)
    costs = objective.get("costs")
    cost = np.full(ranking.thresholds.size, np.nan)
    if costs is not None:
        cost = float(costs["false_positive"]) * (1.0 - prior) * curves["fpr"] + float(
            costs["false_negative"]
        ) * prior * (1.0 - curves["recall"])
    kind = objective_kind(objective)
    if kind == "costs":
        k = int(np.argmin(cost))
    else:
        meets = (
            curves["precision"] >= float(objective["target_precision"])
            if kind == "target_precision"
            else curves["alert_rate"] <= float(objective["alert_rate"])
        )
        found = np.flatnonzero(meets)
        if found.size == 0:
            return None
        k = int(found[-1])
    return Advice(
        threshold=float(curves["threshold"][k]),
        precision=float(curves["precision"][k]),
        recall=float(curves["recall"][k]),
        alert_rate=float(curves["alert_rate"][k]),
        cost=float(cost[k]),
    )


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


def window_prior(
    *, result: Mapping[str, Any], unlabelled: int, estimated: Mapping[str, Any] | None
) -> tuple[float | None, str | None, str | None]:
    """(prior, source, reason): the window's class ratio and where it comes from
    (``measured`` or ``estimated``), or (None, None, why there is none)."""
    n, n_pos = int(result["n"]), int(result["n_pos"])
    scored = n + unlabelled
    if scored > 0 and n >= MIN_LABELLED_SHARE * scored and min(n_pos, n - n_pos) >= MIN_CLASS_ROWS:
        return float(result["prior"]), "measured", None
    labels = (
        f"{n} of {scored} predictions labelled ({n_pos} positive); the measured ratio needs "
        f"{MIN_LABELLED_SHARE:.0%} labelled and {MIN_CLASS_ROWS} of each class"
    )
    if estimated is None:
        return None, None, f"{labels}, and there is no label-free estimate"
    check = estimated.get("label_shift")
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
    ``expected_intervals`` is always null (``docs/acting.md``)."""
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
        out["reason"] = "no threshold meets the objective at this class ratio"
        return out
    out["threshold"] = advice.threshold
    out["expected"] = {
        "precision": advice.precision,
        "recall": advice.recall,
        "alert_rate": advice.alert_rate,
        "cost": advice.cost,
    }
    return out
