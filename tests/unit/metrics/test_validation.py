"""Bad input raises ValueError naming the field and index; odd but valid sets do not raise."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from calmon.metrics import evaluate, split_from_arrays
from calmon.metrics.prepared import MIN_PI0

GOOD_S = [0.1, 0.4, 0.35, 0.8]
GOOD_Y = [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("scores", "labels", "kwargs", "message"),
    [
        ([0.1, 0.2, 0.3], [0, 1], {}, "scores has 3 values but labels has 2"),
        ([[0.1, 0.2]], [0, 1], {}, r"scores must be 1-D, got shape \(1, 2\)"),
        ([0.1, 0.2], [[0, 1]], {}, r"labels must be 1-D, got shape \(1, 2\)"),
        ([0.1, 0.2, 0.3, 0.4], [0, 1, 1, 2], {}, r"labels\[3\] is 2; labels must be 0 or 1"),
        ([0.1, 0.2], [-1, 1], {}, r"labels\[0\] is -1"),
        ([0.1, 0.2], [0.0, 0.5], {}, r"labels\[1\] is 0.5"),
        ([0.1, 0.2], [np.nan, 1.0], {}, r"labels\[0\] is nan"),
        ([0.1, 0.2], ["0", "1"], {}, r"labels\[0\] is '0'"),
        ([0.1] * 17 + [np.nan], [0] * 18, {}, r"scores\[17\] is nan; scores must be finite"),
        ([0.1, np.inf, 0.2], [1, 0, 1], {"score_kind": "score"}, r"scores\[1\] is inf"),
        ([-np.inf, 0.5], [1, 0], {"score_kind": "score"}, r"scores\[0\] is -inf"),
        ([0.1, 1.2, 0.3], [0, 1, 0], {}, r"scores\[1\] is 1.2; probability scores must be"),
        ([0.1, -0.01], [1, 1], {}, r"scores\[1\] is -0.01; probability scores must be"),
        (["a", "b"], [0, 1], {}, "scores must be numbers"),
        (GOOD_S, GOOD_Y, {"score_kind": "logit"}, "score_kind is 'logit'"),
        (GOOD_S, GOOD_Y, {"pi0": [0.5, 1.5]}, r"pi0\[1\] is 1.5; each pi0 must be in \(0, 1\)"),
        (GOOD_S, GOOD_Y, {"pi0": [0.0]}, r"pi0\[0\] is 0.0"),
        (GOOD_S, GOOD_Y, {"pi0": [float("nan")]}, r"pi0\[0\] is nan"),
        (GOOD_S, GOOD_Y, {"pi0": 0.5}, r"pi0 is 0.5; must be a list of numbers in \(0, 1\)"),
        (GOOD_S, GOOD_Y, {"pi0": "0.5"}, r"pi0 is '0.5'; must be a list of numbers"),
        (GOOD_S, GOOD_Y, {"pi0": ["0.5"]}, r"pi0\[0\] is '0.5'; each pi0 must be a number"),
        (GOOD_S, GOOD_Y, {"pi0": [True]}, r"pi0\[0\] is True; each pi0 must be a number"),
        (GOOD_S, GOOD_Y, {"pi0": [0.5, 5e-324]}, r"pi0\[1\] is 5e-324; .* not subnormal"),
        (GOOD_S, GOOD_Y, {"pi0": [1e-300]}, r"pi0\[0\] is 1e-300; .* at least 4.8e-271"),
        (GOOD_S, GOOD_Y, {"threshold": float("nan")}, "threshold is nan; must be a finite"),
        (GOOD_S, GOOD_Y, {"threshold": float("inf")}, "threshold is inf"),
        (GOOD_S, GOOD_Y, {"reliability_bins": 0}, "reliability_bins is 0"),
        (GOOD_S, GOOD_Y, {"reliability_strategy": "kmeans"}, "reliability_strategy is 'kmeans'"),
    ],
)
def test_bad_input(scores: Any, labels: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate(scores, labels, **kwargs)


def test_scores_outside_unit_interval_are_fine_for_score_models() -> None:
    got = evaluate([-3.0, 7.5, 2.0], [0, 1, 1], score_kind="score", threshold=1.0)
    assert got["regular"]["roc_auc"] == 1.0
    assert "brier" not in got["regular"]
    assert "reliability" not in got


def test_labels_may_be_bool_or_float() -> None:
    a = evaluate(GOOD_S, np.array(GOOD_Y, dtype=bool))
    b = evaluate(GOOD_S, np.array(GOOD_Y, dtype=np.float32))
    c = evaluate(GOOD_S, GOOD_Y)
    assert a == b == c


def test_empty_set() -> None:
    got = evaluate([], [], pi0=[0.1])
    assert (got["n"], got["n_pos"], got["n_neg"], got["prior"]) == (0, 0, 0, None)
    assert all(v is None for v in got["regular"].values())
    assert all(v is None for v in got["calibrated"]["0.1"].values())
    assert [b["count"] for b in got["reliability"]] == [0] * 10
    assert evaluate([], [], reliability_strategy="quantile")["reliability"] == []


COMPARING = (
    "precision",
    "f1",
    "roc_auc",
    "ks",
    "ks_abc",
    "average_precision",
    "best_f1",
    "best_f1_threshold",
    "pr_gain_auc",
    "brier_skill",
)
"""Metrics that compare the two classes: undefined (never a sure 0 or 1) with one class."""


def test_one_class_sets() -> None:
    negatives = evaluate([0.2, 0.7, 0.7], [0, 0, 0], pi0=[0.5])
    reg = negatives["regular"]
    for name in (*COMPARING, "recall", "brier_pos"):
        assert reg[name] is None, name
    assert reg["fpr"] == pytest.approx(2 / 3)
    assert reg["brier_neg"] == pytest.approx((0.04 + 0.49 + 0.49) / 3)
    assert reg["brier"] == reg["brier_neg"]
    assert all(v is None for v in negatives["calibrated"]["0.5"].values())

    positives = evaluate([0.2, 0.7, 0.9], [1, 1, 1], pi0=[0.5])
    reg = positives["regular"]
    for name in (*COMPARING, "fpr", "brier_neg"):
        assert reg[name] is None, name
    assert reg["recall"] == pytest.approx(2 / 3)
    assert reg["brier_pos"] == pytest.approx((0.64 + 0.09 + 0.01) / 3)
    assert all(v is None for v in positives["calibrated"]["0.5"].values())


@pytest.mark.parametrize("labels", [[0, 0, 0, 0], [1, 1, 1, 1]], ids=["negatives", "positives"])
def test_one_class_intervals_and_split(labels: list[int]) -> None:
    scores = [0.1, 0.4, 0.6, 0.9]
    got = evaluate(scores, labels, pi0=[0.5], intervals=True, seed=1)
    for name in COMPARING:
        if name in got["intervals"]["regular"]:
            assert got["intervals"]["regular"][name] is None, name
    assert all(v is None for v in got["intervals"]["calibrated"]["0.5"].values())
    split = split_from_arrays(scores, labels, GOOD_S, GOOD_Y, threshold=0.5)
    for parts in split.values():
        assert parts == {"total": None, "prior": None, "likelihood": None}
    both = split_from_arrays(GOOD_S, GOOD_Y, scores, labels, threshold=0.5, intervals=True)
    for parts in both.values():
        assert parts["total"] is None
        assert parts["prior_interval"] is None
        assert parts["likelihood_interval"] is None


def test_nothing_flagged_leaves_precision_undefined() -> None:
    got = evaluate([0.1, 0.2, 0.3], [0, 1, 1], threshold=0.9)
    assert got["regular"]["precision"] is None
    assert got["regular"]["f1"] is None
    assert got["regular"]["recall"] == 0.0
    assert got["regular"]["fpr"] == 0.0


def test_split_validates_both_sets() -> None:
    with pytest.raises(ValueError, match=r"labels\[1\] is 3"):
        split_from_arrays([0.1, 0.2], [0, 1], [0.1, 0.2], [0, 3], threshold=0.5)
    with pytest.raises(ValueError, match="threshold is nan"):
        split_from_arrays([0.1, 0.2], [0, 1], [0.1, 0.2], [0, 1], threshold=float("nan"))


def test_min_pi0_is_where_the_calibration_ratio_times_fp_stops_overflowing() -> None:
    """MIN_PI0 bounds r·FP < 2^126·(1 - π0)/π0 for any set of fewer than 2^63 rows."""
    assert math.isfinite(2.0**126 * (1 - MIN_PI0) / MIN_PI0)
    below = 4.7e-271
    assert not math.isfinite(2.0**126 * (1 - below) / below)
    with pytest.raises(ValueError, match="at least"):
        evaluate(GOOD_S, GOOD_Y, pi0=[below])


def test_smallest_accepted_pi0_gives_defined_consistent_metrics() -> None:
    """At MIN_PI0 on a set with π/(1 - π) = 3 the ratio is finite: precision and AP are both
    defined (near 0 and the recall of the top false-positive-free block), not 0 and None."""
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    labels = [1, 0, 1, 1, 0, 1, 1, 1]
    got = evaluate(scores, labels, pi0=[MIN_PI0, np.float64(0.5)])
    [calibrated] = [v for k, v in got["calibrated"].items() if float(k) == MIN_PI0]
    assert calibrated["precision"] is not None
    assert 0.0 <= calibrated["precision"] < 1e-200
    assert calibrated["average_precision"] == pytest.approx(1 / 6)
