"""A slow, literal reading of docs/reference/metrics.md used as an independent oracle in tests.

It walks every distinct score from the highest down (negative-only scores included), builds
the full curve point by point in plain Python, and applies the formulas as written. Nothing is
shared with calmon.metrics.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt


def curve_points(
    scores: npt.NDArray[np.float64], labels: npt.NDArray[np.int64]
) -> list[tuple[float, int, int]]:
    """(threshold, TP, FP) at every distinct score, highest first; TP/FP count s >= threshold."""
    points = []
    for t in sorted(set(scores.tolist()), reverse=True):
        flagged = scores >= t
        points.append((t, int(labels[flagged].sum()), int((1 - labels[flagged]).sum())))
    return points


def prior_dependent(
    scores: npt.NDArray[np.float64],
    labels: npt.NDArray[np.int64],
    pi0: float | None,
) -> dict[str, float | None]:
    """AP, best F1 (+ threshold) and AUPRG, regular (pi0=None) or calibrated at pi0."""
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or (pi0 is not None and n_neg == 0):
        return dict.fromkeys(("average_precision", "best_f1", "best_f1_threshold", "pr_gain_auc"))
    pi = n_pos / (n_pos + n_neg)
    r = 1.0 if pi0 is None else pi * (1 - pi0) / (pi0 * (1 - pi))
    ap = 0.0
    best = -1.0
    best_t = float("nan")
    prev_recall = 0.0
    for t, tp, fp in curve_points(scores, labels):
        recall = tp / n_pos
        if tp + fp == 0:
            continue
        precision = tp / (tp + r * fp)
        ap += (recall - prev_recall) * precision
        prev_recall = recall
        if tp > 0:
            f1 = 2 * precision * recall / (precision + recall)
            if f1 > best + 1e-12:
                best, best_t = f1, t
    out: dict[str, float | None] = {
        "average_precision": ap,
        "best_f1": best,
        "best_f1_threshold": best_t,
        "pr_gain_auc": None,
    }
    if n_neg:
        out["pr_gain_auc"] = auprg(scores, labels, pi if pi0 is None else pi0)
    return out


def auprg(scores: npt.NDArray[np.float64], labels: npt.NDArray[np.int64], c: float) -> float:
    """AUPRG exactly as docs/reference/metrics.md words it, with recall-gain constant c."""
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    pi = n_pos / labels.size
    k = c / (1 - c)
    pts = [(0, 0)] + [(tp, fp) for _, tp, fp in curve_points(scores, labels)]

    def gains(tp: float, fp: float) -> tuple[float, float]:
        fn = n_pos - tp
        tn = n_neg - fp
        if tn + fn == 0:
            return 0.0, 1.0
        if tp == 0:
            return float("-inf"), float("-inf")
        return 1 - (pi / (1 - pi)) * fp / tp, 1 - k * fn / tp

    pg_rg = [gains(tp, fp) for tp, fp in pts]
    j = next(i for i, (_, rg) in enumerate(pg_rg) if rg >= 0)
    curve = []
    if pg_rg[j][1] > 0:
        (tp0, fp0), (tp1, fp1) = pts[j - 1], pts[j]
        tp_star = c * n_pos
        fp_star = fp0 + (tp_star - tp0) * (fp1 - fp0) / (tp1 - tp0)
        curve.append((1 - (pi / (1 - pi)) * fp_star / tp_star, 0.0))
    curve.extend(pg_rg[j:])
    return sum(
        (rg_b - rg_a) * (pg_a + pg_b) / 2
        for (pg_a, rg_a), (pg_b, rg_b) in itertools.pairwise(curve)
    )
