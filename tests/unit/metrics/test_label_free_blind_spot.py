"""What the label-free estimate cannot see, and how its record says so.

A share f of the positives scoring like the negatives makes the window exactly the reference's
class mixture at π(1 - f): at any π the label-shift check holds and π̂ lands on π(1 - f); a
share g of the negatives scoring like the positives, the mixture at π + g(1 - π). So neither a
fall nor a rise of the estimate is called a class-ratio change, and every estimate names the
blind spot (``docs/reference/metrics.md``, "What it cannot see")."""

from __future__ import annotations

import numpy as np
import pytest

from calmon.arrays import BoolArray, FloatArray
from calmon.catalogue import CANNOT_SEE
from calmon.metrics.label_free import (
    LabelShiftReference,
    estimate_window,
    label_shift_reference,
)
from calmon.metrics.ranking import rank
from calmon.verdict import SHIFT_FACTOR, Estimate


def _scores(rng: np.random.Generator, positive: BoolArray) -> FloatArray:
    z = np.where(positive, rng.normal(1.5, 1.0, positive.size), rng.normal(0.0, 1.0, positive.size))
    return np.round(1.0 / (1.0 + np.exp(-(z - 2.0))), 4)


def _reference(rng: np.random.Generator, prior: float) -> LabelShiftReference:
    labels = rng.random(100_000) < prior
    fitted = label_shift_reference(rank(_scores(rng, labels), labels))
    assert fitted is not None
    return fitted


def _window(rng: np.random.Generator, n: int, prior: float, fallen: float) -> FloatArray:
    """Scores of a window at ``prior`` where a share ``fallen`` of the positives score like
    the negatives (drawn from the negatives' distribution)."""
    labels = rng.random(n) < prior
    scoring_as_positive = labels & (rng.random(n) >= fallen)
    return np.sort(_scores(rng, scoring_as_positive))


@pytest.mark.parametrize("prior", [0.1, 0.4])
def test_positives_scoring_like_negatives_read_as_fewer_positives_at_any_prior(
    prior: float,
) -> None:
    rng = np.random.default_rng(33)
    reference = _reference(rng, 0.1)
    estimated = estimate_window(
        reference, _window(rng, 40_000, prior, 0.5), threshold=0.5, pi0=[0.1], seed=1
    )
    assert estimated is not None
    # the model got worse for half the positives, and no test on scores can see it
    assert estimated["label_shift"]["holds"] is True
    lower, upper = estimated["positive_class_ratio_interval"]
    assert lower <= prior / 2 <= upper
    assert estimated["cannot_see"] == CANNOT_SEE


def test_neither_a_fall_nor_a_rise_is_called_a_class_ratio_change() -> None:
    rng = np.random.default_rng(34)
    reference = _reference(rng, 0.1)
    fallen = estimate_window(
        reference, _window(rng, 40_000, 0.1, 0.5), threshold=0.5, pi0=[0.1], seed=1
    )
    assert fallen is not None
    assert fallen["positive_class_ratio_interval"][1] < reference.prior / SHIFT_FACTOR
    assert fallen["verdict"] == Estimate.FELL
    risen = estimate_window(
        reference, _window(rng, 40_000, 0.3, 0.0), threshold=0.5, pi0=[0.1], seed=1
    )
    assert risen is not None
    assert risen["positive_class_ratio_interval"][0] > reference.prior * SHIFT_FACTOR
    assert risen["verdict"] == Estimate.ROSE


def test_negatives_scoring_like_positives_read_as_more_positives() -> None:
    """The mirror of the blind spot: a share g of the negatives drawn from the positives'
    distribution is exactly the mixture at π + g(1 - π); the check holds and the rise reads as
    more positives or negatives scoring like positives, not as a class-ratio change."""
    rng = np.random.default_rng(35)
    reference = _reference(rng, 0.1)
    labels = rng.random(40_000) < 0.1
    scoring_as_positive = labels | (rng.random(40_000) < 0.1)
    risen = estimate_window(
        reference, np.sort(_scores(rng, scoring_as_positive)), threshold=0.5, pi0=[0.1], seed=1
    )
    assert risen is not None
    assert risen["label_shift"]["holds"] is True
    lower, upper = risen["positive_class_ratio_interval"]
    assert lower <= 0.1 + 0.1 * 0.9 <= upper
    assert risen["verdict"] == Estimate.ROSE
    assert risen["cannot_see"] == CANNOT_SEE
