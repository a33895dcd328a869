"""The pooled decision (``calmon.metrics.decision``): verdicts from the intervals, a clear ratio
change decided without a metric interval, a likelihood drift found, the page's level."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from calmon.arrays import FloatArray
from calmon.metrics.decision import (
    SHIFT_METHOD,
    decide,
    decide_all,
    decision_from_split,
    location_scores,
    positives_shift,
)
from calmon.metrics.evaluation import SetSums, set_sums
from calmon.metrics.ranking import Ranking, rank_sorted
from calmon.metrics.split import split_from_arrays
from calmon.verdict import (
    OWN_PAGE_P,
    PAGE_MATERIAL,
    PAGE_P,
    Verdict,
    decision_verdict,
    page,
)

RULES = Path(__file__).parents[3] / "deploy" / "prometheus" / "rules" / "calmon.yml"
LOW, HIGH = [0.01, 0.02], [0.04, 0.05]


@pytest.mark.parametrize(
    ("ratio", "reference", "likelihood", "paged", "verdict"),
    [
        (LOW, HIGH, [-0.2, -0.1], True, Verdict.BOTH),
        (LOW, HIGH, [-0.2, -0.1], False, Verdict.RATIO_MAYBE_WORSE),
        (LOW, HIGH, [-0.1, 0.1], False, Verdict.RATIO),
        (LOW, HIGH, None, False, Verdict.RATIO),
        (LOW, HIGH, None, True, Verdict.BOTH),
        ([0.015, 0.045], HIGH, [-0.2, -0.1], True, Verdict.WORSE),
        ([0.015, 0.045], HIGH, [-0.2, -0.1], False, Verdict.MAYBE_WORSE),
        ([0.015, 0.045], HIGH, None, True, Verdict.WORSE),
        ([0.015, 0.045], HIGH, [-0.1, 0.1], False, Verdict.STABLE),
        ([0.015, 0.045], HIGH, [0.05, 0.1], False, Verdict.STABLE),
        ([0.015, 0.045], HIGH, None, False, Verdict.UNKNOWN),
        (LOW, None, None, False, Verdict.UNKNOWN),
        (None, HIGH, [-0.2, -0.1], True, Verdict.WORSE),
        (None, HIGH, [-0.2, -0.1], False, Verdict.MAYBE_WORSE),
    ],
)
def test_the_verdict_says_worse_only_where_the_page_holds(
    ratio: list[float] | None,
    reference: list[float] | None,
    likelihood: list[float] | None,
    paged: bool,
    verdict: str,
) -> None:
    """ "Worse" rests on the page's evidence; a likelihood interval below 0 without it reads
    "may be worse"."""
    got = decision_verdict(
        ratio_interval=ratio,
        reference_interval=reference,
        likelihood_interval=likelihood,
        paged=paged,
    )
    assert got == verdict


#: a split whose likelihood part's interval lies below 0 (a fall of 0.04 in AP)
_FALLING_PARTS: dict[str, object] = {
    "prior": 0.0,
    "likelihood": -0.04,
    "prior_interval": [-0.01, 0.01],
    "likelihood_interval": [-0.07, -0.01],
}


def _falling_verdict(
    shift: dict[str, object], reference_value: float, page_p: float = PAGE_P
) -> str:
    """The verdict of a pooled set with :data:`_FALLING_PARTS` and the shift test ``shift``."""
    decision = decision_from_split(
        n=40_000,
        n_pos=200,
        reference_n=80_000,
        reference_n_pos=400,
        parts=_FALLING_PARTS,
        shift=shift,
        reference_value=reference_value,
        page_p=page_p,
    )
    return str(decision["verdict"])


def test_a_decision_reads_worse_from_the_page_not_from_the_interval() -> None:
    """The same split and shift test: worse when the page's rule holds for the reference's
    value, "may be worse" when the part is not material for a larger reference value."""
    shift = {"method": SHIFT_METHOD, "z": 4.0, "p_value": PAGE_P / 4}
    assert _falling_verdict(shift, 0.5) == Verdict.WORSE
    assert _falling_verdict(shift, 0.9) == Verdict.MAYBE_WORSE
    assert _falling_verdict({**shift, "p_value": PAGE_P * 2}, 0.5) == Verdict.MAYBE_WORSE


def test_a_window_that_is_its_own_decision_needs_the_stricter_level() -> None:
    """A shift test between the two levels reads "worse" for a pool (z > 3.0) and only "may be
    worse" for a window that is its own decision (z > 3.5): each such window is a look of its
    own, hour after hour."""
    assert OWN_PAGE_P < PAGE_P / 2
    shift = {"method": SHIFT_METHOD, "z": 3.2, "p_value": PAGE_P / 2}
    assert _falling_verdict(shift, 0.5) == Verdict.WORSE
    assert _falling_verdict(shift, 0.5, page_p=OWN_PAGE_P) == Verdict.MAYBE_WORSE


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
    assert decision["verdict"] == Verdict.RATIO
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
    assert decision["verdict"] == Verdict.WORSE
    assert decision["likelihood_interval"][1] < 0
    assert page(decision, reference_value=0.3)
    stable_set = _set(np.random.default_rng(31), 30_000, 0.005, 3.0)
    stable = decide(*stable_set, *reference, threshold=0.8, score_kind="score", seed=3)
    assert stable["verdict"] == Verdict.STABLE
    assert not page(stable, reference_value=0.3)


def test_without_a_reference_nothing_is_decided() -> None:
    decision = decision_from_split(n=500, n_pos=20, reference_n=0, reference_n_pos=0, parts=None)
    assert decision["verdict"] == Verdict.UNKNOWN
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
    assert stats.norm.sf(3.0) == pytest.approx(PAGE_P)


@pytest.mark.parametrize("decimals", [None, 2, 1])
def test_the_positives_shift_records_the_mann_whitney_test_and_pages_on_the_other_two(
    decimals: int | None,
) -> None:
    """``mann_whitney_z`` is scipy's tie-corrected, continuity-corrected Mann-Whitney z of the
    two sets' positives, with and without heavy ties; without negatives the p-value is the
    location test's alone, with them the smaller of the location and placement p-values,
    doubled; the negatives do not enter the location test."""
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
    assert got["method"] == SHIFT_METHOD
    assert got["placement_z"] is None
    assert got["mann_whitney_z"] == pytest.approx(stats.norm.isf(expected.pvalue), rel=1e-6)
    assert got["location_z"] > 1.5
    assert got["z"] == got["location_z"]
    assert got["p_value"] == pytest.approx(stats.norm.sf(got["location_z"]), rel=1e-9)
    other = positives_shift(rank_sorted(pos, ref_neg), rank_sorted(ref_pos, neg))
    assert other == got
    # with negatives to place the positives among, the smaller of the two p-values, doubled
    both = positives_shift(rank_sorted(pos, neg), rank_sorted(ref_pos, ref_neg), (neg,))
    assert both is not None
    assert both["placement_z"] is not None
    assert both["mann_whitney_z"] == got["mann_whitney_z"]
    assert both["location_z"] == got["location_z"]
    tails = stats.norm.sf([both["location_z"], both["placement_z"]])
    assert both["p_value"] == pytest.approx(min(1.0, 2 * tails.min()), rel=1e-9)
    assert both["z"] == max(both["location_z"], both["placement_z"])


def test_the_location_scores_of_normal_logits_are_the_t_test_scores() -> None:
    """For positives whose logits are normal N(µ, σ²) the location scores -f'/f are
    (y - µ)/σ² (the likelihood-ratio scores of a shift), up to the kernel's smoothing and
    its noise, inside the clipped range."""
    rng = np.random.default_rng(21)
    mu, sigma = 1.5, 0.8
    values = np.sort(1.0 / (1.0 + np.exp(-rng.normal(mu, sigma, 20_000))))
    scores = location_scores(values, np.ones(values.size))
    assert scores is not None
    y = np.log(values / (1 - values))
    inside = (y > mu - 1.5 * sigma) & (y < mu + 1.5 * sigma)
    h = sigma * values.size**-0.2
    expected = (y - mu) / (sigma**2 + h**2)
    error = np.abs(scores[inside] - expected[inside])
    assert np.max(error) < 0.3
    assert np.mean(error) < 0.08
    assert np.corrcoef(scores, y)[0, 1] > 0.99
    assert location_scores(np.array([0.3]), np.array([5.0])) is None


def test_the_location_moments_are_those_of_every_split_of_the_positives() -> None:
    """The location test's mean, variance and skewness are exact permutation moments: its
    scores come from the positives of both sets together, so with 6 positives (3 pooled, 3 in
    the reference, ties included) every one of the 20 splits has the same scores, and the
    z of each is Hall's transformation of its standardized sum under those moments."""
    neg = np.array([0.1])
    values = np.array([0.2, 0.35, 0.6, 0.7, 0.95, 0.95])
    distinct, counts = np.unique(values, return_counts=True)
    scores = location_scores(distinct, counts.astype(np.float64))
    assert scores is not None
    each = -scores[np.searchsorted(distinct, values)]
    sums = np.array([each[list(c)].sum() for c in itertools.combinations(range(6), 3)])
    mean, sd = sums.mean(), sums.std()
    skew = np.mean((sums - mean) ** 3) / sd**3
    for chosen, total in zip(itertools.combinations(range(6), 3), sums, strict=True):
        rest = [i for i in range(6) if i not in chosen]
        pos, ref_pos = np.sort(values[list(chosen)]), np.sort(values[rest])
        got = positives_shift(rank_sorted(pos, neg), rank_sorted(ref_pos, neg))
        assert got is not None
        z = (total - mean) / sd
        expected = z - skew / 6 * (z * z - 1) + skew**2 / 108 * z**3
        assert got["location_z"] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_the_placement_moments_are_those_of_every_split_of_the_positives() -> None:
    """The placement test's mean, variance and skewness are exact permutation moments: with
    6 positives (3 pooled, 3 in the reference, ties included) every one of the 20 splits is
    enumerated, and the skewness-corrected z of each split is Hall's transformation of its
    standardized sum under those moments."""
    neg = np.sort(np.array([0.05, 0.1, 0.2, 0.2, 0.3, 0.5, 0.6, 0.6, 0.9]))
    values = np.array([0.2, 0.35, 0.6, 0.7, 0.95, 0.95])
    placement = np.array([(np.sum(neg > v) + 0.5 * np.sum(neg == v)) / neg.size for v in values])
    sums = []
    for chosen in itertools.combinations(range(6), 3):
        sums.append(placement[list(chosen)].sum())
    sums_array = np.array(sums)
    mean, sd = sums_array.mean(), sums_array.std()
    skew = np.mean((sums_array - mean) ** 3) / sd**3
    for chosen, total in zip(itertools.combinations(range(6), 3), sums, strict=True):
        rest = [i for i in range(6) if i not in chosen]
        pos, ref_pos = np.sort(values[list(chosen)]), np.sort(values[rest])
        got = positives_shift(rank_sorted(pos, neg), rank_sorted(ref_pos, neg), (neg,))
        assert got is not None
        z = (total - mean) / sd
        expected = z - skew / 6 * (z * z - 1) + skew**2 / 108 * z**3
        assert got["placement_z"] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_the_placement_test_finds_positives_that_moved_in_among_the_negatives() -> None:
    """A fifth of the positives scored like the negatives, the others' scores spread: the
    placement test sees it clearly where the Mann-Whitney test barely does."""
    rng = np.random.default_rng(11)
    neg = np.sort(rng.beta(1.0, 6.0, 200_000))
    ref_pos = np.sort(rng.beta(3.0, 1.2, 1000))
    moved = rng.random(400) < 0.2
    pos = np.sort(np.where(moved, rng.beta(1.0, 6.0, 400), rng.beta(3.0, 1.2, 400)))
    few = np.sort(neg[:1]).astype(np.float64)
    got = positives_shift(rank_sorted(pos, few), rank_sorted(ref_pos, few), (neg,))
    assert got is not None
    assert got["placement_z"] > 6.0
    assert got["placement_z"] > got["mann_whitney_z"] + 2.0
    assert got["p_value"] < PAGE_P


def test_the_positives_shift_keeps_its_level_under_a_prior_shift() -> None:
    """Sets at a third of the reference's ratio and the same P(score | class) (a pure prior
    shift, 20 positives each, tied scores): p-values below 0.05 in about 5% of them."""
    rng = np.random.default_rng(6)

    def tied(n: int, prior: float) -> tuple[Ranking, FloatArray]:
        labels = rng.random(n) < prior
        scores = np.round(np.where(labels, rng.beta(3.0, 1.5, n), rng.random(n)), 2)
        neg: FloatArray = np.sort(scores[~labels]).astype(np.float64)
        return rank_sorted(np.sort(scores[labels]), neg), neg

    reference, negatives = tied(100_000, 0.005)
    p_values, placement, location = [], [], []
    for _ in range(400):
        pooled, pooled_negatives = tied(12_000, 0.005 / 3)
        shift = positives_shift(pooled, reference, (pooled_negatives,))
        if shift is not None:
            p_values.append(shift["p_value"])
            placement.append(stats.norm.sf(shift["placement_z"]))
            location.append(stats.norm.sf(shift["location_z"]))
    assert len(p_values) > 390
    assert 0.01 <= np.mean(np.array(p_values) < 0.05) <= 0.08
    assert 0.02 <= np.mean(np.array(placement) < 0.05) <= 0.08
    assert 0.02 <= np.mean(np.array(location) < 0.05) <= 0.08
    assert negatives.size > 90_000


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
