"""The pooled decision (``app.metrics.decision``): verdicts from the intervals, a clear ratio
change decided without a metric interval, a likelihood drift found, the page's level."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from app.metrics.decision import (
    BOTH,
    PAGE_MATERIAL,
    PAGE_P,
    RATIO,
    STABLE,
    UNKNOWN,
    WORSE,
    decide,
    decide_all,
    decision_from_split,
    page,
    positives_shift,
    verdict_of,
)
from app.metrics.evaluation import SetSums, set_sums
from app.metrics.ranking import Ranking, rank_sorted
from app.metrics.split import split_from_arrays

RULES = Path(__file__).parents[3] / "deploy" / "prometheus" / "rules" / "calmon.yml"
LOW, HIGH = [0.01, 0.02], [0.04, 0.05]


@pytest.mark.parametrize(
    ("ratio", "reference", "likelihood", "verdict"),
    [
        (LOW, HIGH, [-0.2, -0.1], BOTH),
        (LOW, HIGH, [-0.1, 0.1], RATIO),
        (LOW, HIGH, None, RATIO),
        ([0.015, 0.045], HIGH, [-0.2, -0.1], WORSE),
        ([0.015, 0.045], HIGH, [-0.1, 0.1], STABLE),
        ([0.015, 0.045], HIGH, [0.05, 0.1], STABLE),
        ([0.015, 0.045], HIGH, None, UNKNOWN),
        (LOW, None, None, UNKNOWN),
        (None, HIGH, [-0.2, -0.1], WORSE),
    ],
)
def test_the_verdict_reads_the_ratio_intervals_and_the_likelihood_interval(
    ratio: list[float] | None,
    reference: list[float] | None,
    likelihood: list[float] | None,
    verdict: str,
) -> None:
    got = verdict_of(
        ratio_interval=ratio, reference_interval=reference, likelihood_interval=likelihood
    )
    assert got == verdict


def _set(rng: np.random.Generator, n: int, prior: float, a: float) -> tuple[Ranking, SetSums]:
    """Scores Beta(a, 1.5) for positives, Beta(1, 4) for negatives (not binormal)."""
    labels = rng.random(n) < prior
    scores = np.where(labels, rng.beta(a, 1.5, n), rng.beta(1.0, 4.0, n))
    pos, neg = np.sort(scores[labels]), np.sort(scores[~labels])
    return rank_sorted(pos, neg), set_sums(pos, neg, threshold=0.8, score_kind="score")


def test_a_clear_ratio_change_at_30_positives_is_decided_without_a_metric_interval() -> None:
    """5,000 predictions at a ratio 0.15 times the reference's: too few positives for AP's
    parts, but the Wilson intervals of the two ratios are disjoint."""
    rng = np.random.default_rng(1)
    reference = _set(rng, 24 * 5000, 0.04, 3.0)
    pooled = _set(rng, 5000, 0.006, 3.0)
    assert 20 <= pooled[0].n_pos < 100
    decision = decide(*pooled, *reference, threshold=0.8, score_kind="score", seed=1)
    assert decision["likelihood_interval"] is None
    assert decision["likelihood_part"] is not None
    assert decision["verdict"] == RATIO
    assert (
        decision["positive_class_ratio_interval"][1]
        < (decision["reference_positive_class_ratio_interval"][0])
    )


def test_the_pooled_split_is_the_split_of_the_pooled_rows() -> None:
    """The decision's parts and intervals are those of :func:`split_from_arrays` on the same
    sets and seed (the same bootstrap)."""
    rng = np.random.default_rng(2)
    labels = rng.random(30_000) < 0.005
    scores = np.round(
        np.where(labels, rng.beta(3.0, 1.5, labels.size), rng.beta(1, 4, labels.size)), 3
    )
    ref_labels = rng.random(60_000) < 0.005
    ref_scores = np.round(
        np.where(ref_labels, rng.beta(3.0, 1.5, ref_labels.size), rng.beta(1, 4, ref_labels.size)),
        3,
    )
    split = split_from_arrays(
        scores, labels, ref_scores, ref_labels, threshold=0.8, intervals=True, seed=7
    )
    sets = []
    for s, y in ((scores, labels), (ref_scores, ref_labels)):
        pos = np.sort(s[y]).astype(np.float64)
        neg = np.sort(s[~y]).astype(np.float64)
        sets.append((rank_sorted(pos, neg), set_sums(pos, neg, threshold=0.8, score_kind="score")))
    decisions = decide_all(*sets[0], *sets[1], threshold=0.8, score_kind="score", seed=7)
    for metric, decision in decisions.items():
        assert decision["metric"] == metric
        assert decision["prior_part"] == split[metric]["prior"]
        assert decision["likelihood_part"] == split[metric]["likelihood"]
        assert decision["prior_interval"] == split[metric]["prior_interval"]
        assert decision["likelihood_interval"] == split[metric]["likelihood_interval"]
    assert decisions["average_precision"]["likelihood_interval"] is not None


def test_a_likelihood_drift_over_pooled_windows_is_found() -> None:
    """The positives' scores fall (Beta(3, 1.5) to Beta(1.5, 1.5)) at the reference's ratio:
    the pooled 150 positives say the model got worse, and the drop pages."""
    rng = np.random.default_rng(3)
    reference = _set(rng, 96_000, 0.005, 3.0)
    pooled = _set(rng, 30_000, 0.005, 1.5)
    decision = decide(*pooled, *reference, threshold=0.8, score_kind="score", seed=3)
    assert decision["verdict"] == WORSE
    assert decision["likelihood_interval"][1] < 0
    assert page(decision, reference_value=0.3)
    stable_set = _set(np.random.default_rng(31), 30_000, 0.005, 3.0)
    stable = decide(*stable_set, *reference, threshold=0.8, score_kind="score", seed=3)
    assert stable["verdict"] == STABLE
    assert not page(stable, reference_value=0.3)


def test_without_a_reference_nothing_is_decided() -> None:
    decision = decision_from_split(n=500, n_pos=20, reference_n=0, reference_n_pos=0, parts=None)
    assert decision["verdict"] == UNKNOWN
    assert decision["reference_positive_class_ratio_interval"] is None
    assert decision["prior_part"] is None
    assert decision["positive_class_ratio"] == 0.04


def test_the_page_needs_a_significant_shift_and_a_material_part() -> None:
    shifted = {"likelihood_part": -0.08, "positives_shift": {"p_value": PAGE_P * 0.99}}
    assert page(shifted, reference_value=0.4)
    assert not page({**shifted, "positives_shift": {"p_value": PAGE_P * 1.01}}, reference_value=0.4)
    assert not page(shifted, reference_value=0.08 / PAGE_MATERIAL + 0.01)
    assert not page({**shifted, "positives_shift": None}, reference_value=0.4)
    assert not page({**shifted, "likelihood_part": None}, reference_value=0.4)
    assert not page(shifted, reference_value=None)
    assert stats.norm.sf(3.5) == pytest.approx(PAGE_P)


@pytest.mark.parametrize("decimals", [None, 2, 1])
def test_the_positives_shift_is_the_mann_whitney_test_of_the_positive_scores(
    decimals: int | None,
) -> None:
    """The same z and p-value as scipy's tie-corrected, continuity-corrected Mann-Whitney test
    of the two sets' positives, with and without heavy ties; the negatives do not enter."""
    rng = np.random.default_rng(5)
    sets = []
    for a, n_pos, n_neg in ((2.0, 60, 3000), (2.6, 400, 500)):
        pos, neg = rng.beta(a, 1.0, n_pos), rng.beta(1.0, 3.0, n_neg)
        if decimals is not None:
            pos, neg = np.round(pos, decimals), np.round(neg, decimals)
        sets.append((np.sort(pos), np.sort(neg)))
    (pos, neg), (ref_pos, ref_neg) = sets
    got = positives_shift(rank_sorted(pos, neg), rank_sorted(ref_pos, ref_neg))
    expected = stats.mannwhitneyu(pos, ref_pos, alternative="less", method="asymptotic")
    assert got is not None
    assert got["method"] == "mann_whitney"
    assert got["p_value"] == pytest.approx(expected.pvalue, rel=1e-9)
    assert got["z"] == pytest.approx(stats.norm.isf(expected.pvalue), rel=1e-6)
    other = positives_shift(rank_sorted(pos, ref_neg), rank_sorted(ref_pos, neg))
    assert other == got


def test_the_positives_shift_keeps_its_level_under_a_prior_shift() -> None:
    """Sets at a third of the reference's ratio and the same P(score | class) (a pure prior
    shift, 20 positives each, tied scores): p-values below 0.05 in about 5% of them."""
    rng = np.random.default_rng(6)

    def tied(n: int, prior: float) -> Ranking:
        labels = rng.random(n) < prior
        scores = np.round(np.where(labels, rng.beta(3.0, 1.5, n), rng.random(n)), 2)
        return rank_sorted(np.sort(scores[labels]), np.sort(scores[~labels]))

    reference = tied(100_000, 0.005)
    p_values = []
    for _ in range(400):
        shift = positives_shift(tied(12_000, 0.005 / 3), reference)
        if shift is not None:
            p_values.append(shift["p_value"])
    assert len(p_values) > 390
    assert 0.02 <= np.mean(np.array(p_values) < 0.05) <= 0.08


def test_no_positives_no_shift() -> None:
    rng = np.random.default_rng(7)
    reference = _set(rng, 10_000, 0.05, 3.0)[0]
    empty = rank_sorted(np.array([]), np.sort(rng.random(100)))
    assert positives_shift(empty, reference) is None
    assert positives_shift(reference, empty) is None


def test_the_alert_rule_uses_the_pages_level() -> None:
    rule = RULES.read_text(encoding="utf-8")
    block = rule[rule.index("alert: CalmonDecisionMetricDrop") :]
    block = block[: block.index("- alert:")]
    [level] = re.findall(r"calmon_decision_positives_shift_p_value\) < ([0-9.]+)\)", block)
    assert float(level) == pytest.approx(PAGE_P, rel=2e-3)
    assert (
        f"-{PAGE_MATERIAL} * max by (model, segment) (calmon_average_precision_reference)" in block
    )
