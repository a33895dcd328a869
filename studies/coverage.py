"""The coverage study of the interval methods: score families, population values, one regime.

A *family* gives the scores of each class as a mixture of Beta distributions on [0, 1],
optionally rounded to a grid (heavy ties). Population values (what an infinitely large set of
the family would show) come from the family's distributions, independently of the code under
test: by numerical integration for continuous scores, by an exact sum over the grid for
rounded ones. A *regime* is a family, a prior π and an expected number of positives per set;
each set has n = positives / π rows, each positive with probability π (Bernoulli, so n_pos varies
between sets). Used by ``test_interval_coverage.py`` and by ``bench/interval_coverage.py``,
which prints the table of ``docs/measurements/intervals.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import integrate, special, stats

from calmon.arrays import FloatArray
from calmon.metrics.intervals import Interval, bootstrap_intervals, mean_intervals, wilson_interval
from calmon.metrics.prepared import prepare
from calmon.metrics.split import (
    PART_INTERVAL_METRICS,
    ap_parts_published,
    shapley_parts,
    split_from_arrays,
)

THRESHOLD = 0.5
PI0 = 0.5
SUFFIX = f"@{PI0}"
PARTS = ("prior", "likelihood")
METRICS = (
    "prior",
    "precision",
    "recall",
    "fpr",
    "f1",
    "roc_auc",
    "average_precision",
    f"precision{SUFFIX}",
    f"f1{SUFFIX}",
    f"average_precision{SUFFIX}",
)
"""Every metric that publishes an interval at τ or on the curve (``prior`` is the window's
Wilson interval of the positive class ratio); calibrated ones at π0 = 0.5."""

Mixture = tuple[tuple[float, float, float], ...]
"""(weight, a, b) of each Beta(a, b) component; the weights sum to 1."""


@dataclass(frozen=True, slots=True)
class Family:
    """Scores of positives and negatives; ``decimals`` rounds them (None: continuous),
    ``levels`` snaps them to the nearest of a few values (a tree model's leaves, a coarse
    score); ``binormal`` = (µ₁, σ₁, µ₀, σ₀) draws them instead as expit of a normal latent
    score, N(µ₁, σ₁²) for positives and N(µ₀, σ₀²) for negatives (the mixtures unused)."""

    name: str
    positives: Mixture
    negatives: Mixture
    decimals: int | None = None
    levels: tuple[float, ...] | None = None
    binormal: tuple[float, float, float, float] | None = None

    def draw(
        self, rng: np.random.Generator, n: int, prior: float
    ) -> tuple[FloatArray, npt.NDArray[np.int8]]:
        labels = (rng.random(n) < prior).astype(np.int8)
        scores = np.empty(n)
        for label, mixture in ((1, self.positives), (0, self.negatives)):
            rows = np.flatnonzero(labels == label)
            if self.binormal is not None:
                mu, sd = self.binormal[2 - 2 * label : 4 - 2 * label]
                scores[rows] = special.expit(rng.normal(mu, sd, size=rows.size))
                continue
            weights = np.array([w for w, _, _ in mixture])
            component = rng.choice(len(mixture), size=rows.size, p=weights)
            a = np.array([c[1] for c in mixture])[component]
            b = np.array([c[2] for c in mixture])[component]
            scores[rows] = rng.beta(a, b)
        if self.decimals is not None:
            scores = np.round(scores, self.decimals)
        if self.levels is not None:
            levels = np.asarray(self.levels)
            scores = levels[np.searchsorted(_midpoints(levels), scores)]
        return scores, labels

    def cdf(self, label: int) -> Callable[[float], float]:
        """The distribution function of the unrounded scores of class ``label``."""
        if self.binormal is not None:
            mu, sd = self.binormal[2 - 2 * label : 4 - 2 * label]
            return lambda x: float(stats.norm.cdf((special.logit(x) - mu) / sd))
        return _cdf(self.positives if label else self.negatives)

    def pdf(self, label: int) -> Callable[[float], float]:
        """The density of the unrounded scores of class ``label``."""
        if self.binormal is not None:
            mu, sd = self.binormal[2 - 2 * label : 4 - 2 * label]

            def density(x: float) -> float:
                if not 0.0 < x < 1.0:
                    return 0.0
                return float(stats.norm.pdf((special.logit(x) - mu) / sd) / (sd * x * (1 - x)))

            return density
        return _pdf(self.positives if label else self.negatives)

    def grid(self) -> FloatArray | None:
        """The values the scores take when rounded or snapped, ascending (None: continuous)."""
        if self.levels is not None:
            return np.asarray(self.levels, dtype=np.float64)
        if self.decimals is not None:
            step = 10.0**-self.decimals
            return np.round(np.arange(0.0, 1.0 + step / 2, step), self.decimals)
        return None

    def masses(self, label: int) -> FloatArray:
        """The probability of each grid value for class ``label`` (rounded or snapped)."""
        grid = self.grid()
        assert grid is not None
        cdf = self.cdf(label)
        edges = np.r_[0.0, _midpoints(grid), 1.0]
        return np.diff([cdf(float(e)) if 0.0 < e < 1.0 else float(e) for e in edges])

    def expect(self, label: int, term: Callable[[FloatArray], FloatArray]) -> float:
        """E[term(s) | y = label] over the family's scores (as drawn: rounded or snapped)."""
        grid = self.grid()
        if grid is not None:
            return float(np.dot(self.masses(label), term(grid)))
        pdf = self.pdf(label)

        def integrand(s: float) -> float:
            return float(term(np.array([s]))[0]) * pdf(s)

        return float(integrate.quad(integrand, 0, 1, limit=200, epsabs=1e-11)[0])


def _midpoints(levels: FloatArray) -> FloatArray:
    out: FloatArray = (levels[1:] + levels[:-1]) / 2
    return out


def _cdf(mixture: Mixture) -> Callable[[float], float]:
    return lambda x: float(sum(w * stats.beta.cdf(x, a, b) for w, a, b in mixture))


def _pdf(mixture: Mixture) -> Callable[[float], float]:
    return lambda x: float(sum(w * stats.beta.pdf(x, a, b) for w, a, b in mixture))


def _at_threshold(tpr: float, fpr: float, prior: float, pi0: float = 0.5) -> dict[str, float]:
    def precision(p: float) -> float:
        return p * tpr / (p * tpr + (1 - p) * fpr)

    def f1(p: float) -> float:
        return 2 * p * tpr / (p + tpr)

    values = {"prior": prior, "recall": tpr, "fpr": fpr}
    values["precision"] = precision(prior)
    values["f1"] = f1(values["precision"])
    values[f"precision{SUFFIX}"] = precision(pi0)
    values[f"f1{SUFFIX}"] = f1(values[f"precision{SUFFIX}"])
    return values


def population_values(family: Family, prior: float, pi0: float = PI0) -> dict[str, float]:
    """The population value of every name in METRICS and MEAN_METRICS for ``family`` at
    ``prior`` (the names ending in SUFFIX calibrated at ``pi0``, by default PI0).

    Continuous scores, with densities f1, f0, survival functions S1, S0 and prior p (``prior``,
    or ``pi0`` for the calibrated values): roc_auc = ∫ F0 f1 ds; average_precision =
    ∫ P_p(s) f1(s) ds with P_p = p·S1/(p·S1 + (1 - p)·S0), the limit of the step rule;
    TPR = S1(τ), FPR = S0(τ). Rounded or snapped scores, with masses q1_k, q0_k at the grid
    values v_k: S1, S0 count the scores ≥ v_k (a tie enters whole), roc_auc =
    Σ q1_k·(F0(< v_k) + q0_k/2) (ties count ½) and average_precision = Σ q1_k·P_p(v_k). The
    means (MEAN_METRICS) are expectations of their per-row terms (:meth:`Family.expect`).
    """
    values = _mean_values(family, prior)
    grid = family.grid()
    if grid is None:
        f1_pdf, f0_cdf, f1_cdf = family.pdf(1), family.cdf(0), family.cdf(1)
        tpr, fpr = 1 - f1_cdf(THRESHOLD), 1 - f0_cdf(THRESHOLD)
        values |= _at_threshold(tpr, fpr, prior, pi0)

        def auc_integrand(s: float) -> float:
            return f0_cdf(s) * f1_pdf(s)

        values["roc_auc"] = float(integrate.quad(auc_integrand, 0, 1, limit=200)[0])
        for p, suffix in ((prior, ""), (pi0, SUFFIX)):

            def ap_integrand(s: float, p: float = p) -> float:
                s1, s0 = 1 - f1_cdf(s), 1 - f0_cdf(s)
                return p * s1 / (p * s1 + (1 - p) * s0) * f1_pdf(s) if s1 + s0 > 0 else 0.0

            ap = integrate.quad(ap_integrand, 0, 1, limit=200, epsabs=1e-11)[0]
            values[f"average_precision{suffix}"] = float(ap)
        return values
    q1, q0 = family.masses(1), family.masses(0)
    s1 = np.cumsum(q1[::-1])[::-1]  # P(score ≥ v_k)
    s0 = np.cumsum(q0[::-1])[::-1]
    at = int(np.searchsorted(grid, THRESHOLD - 1e-9))  # first grid value ≥ τ
    values |= _at_threshold(float(s1[at]), float(s0[at]), prior, pi0)
    below0 = 1.0 - s0
    values["roc_auc"] = float(np.sum(q1 * (below0 + q0 / 2)))
    for p, suffix in ((prior, ""), (pi0, SUFFIX)):
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = p * s1 / (p * s1 + (1 - p) * s0)
        values[f"average_precision{suffix}"] = float(np.sum(np.where(q1 > 0, q1 * precision, 0)))
    return values


def _mean_values(family: Family, prior: float) -> dict[str, float]:
    """The population values of MEAN_METRICS."""

    def clipped(v: FloatArray) -> FloatArray:
        out: FloatArray = np.clip(v, 1e-15, 1 - 1e-15)
        return out

    brier_pos = family.expect(1, lambda v: np.square(1.0 - v))
    brier_neg = family.expect(0, np.square)
    loss_pos = family.expect(1, lambda v: -np.log(clipped(v)))
    loss_neg = family.expect(0, lambda v: -np.log1p(-clipped(v)))
    brier = prior * brier_pos + (1 - prior) * brier_neg
    return {
        "ks_abc": family.expect(1, lambda v: v) - family.expect(0, lambda v: v),
        "brier": brier,
        "brier_skill": 1.0 - brier / (prior * (1 - prior)),
        "brier_pos": brier_pos,
        "brier_neg": brier_neg,
        "log_loss": prior * loss_pos + (1 - prior) * loss_neg,
    }


FAMILIES = (
    Family("beta", positives=((1.0, 4.0, 2.5),), negatives=((1.0, 2.0, 4.0),)),
    Family(
        "beta mixture",
        positives=((0.6, 8.0, 2.0), (0.4, 2.0, 3.0)),
        negatives=((0.8, 2.0, 6.0), (0.2, 5.0, 3.0)),
    ),
    Family("tied", positives=((1.0, 3.0, 2.0),), negatives=((1.0, 2.0, 3.5),), decimals=1),
)
"""Two continuous families that are not binormal (one bimodal for each class) and one whose
scores take 11 values; population ROC AUC about 0.84, 0.87 and 0.78."""

HELD_OUT = (
    Family(
        "tree",
        positives=((1.0, 3.0, 2.0),),
        negatives=((1.0, 1.5, 4.0),),
        levels=(0.02, 0.07, 0.15, 0.26, 0.38, 0.5, 0.63, 0.77, 0.9, 0.97),
    ),
    Family("binormal, unequal variance", (), (), binormal=(0.8, 1.8, -1.2, 0.8)),
    Family(
        "three-level",
        positives=((1.0, 3.0, 2.0),),
        negatives=((1.0, 2.0, 3.5),),
        levels=(0.1, 0.5, 0.9),
    ),
)
"""Families held out from the study's assertions and used to check the fixes of an independent
audit: a tree model's scores (ten leaf values, ties across the classes, τ = 0.5 a leaf), an
unequal-variance binormal on the logit scale (positives N(0.8, 1.8²), negatives
N(-1.2, 0.8²)), and a score with three levels (0.1, 0.5, 0.9)."""


NOISY = (
    Family(
        "label noise",
        positives=((0.9, 5.0, 1.5), (0.1, 1.5, 5.0)),
        negatives=((0.99, 1.5, 5.0), (0.01, 5.0, 1.5)),
    ),
    Family(
        "confident mistakes",
        positives=((0.96, 4.0, 2.0), (0.04, 1.0, 40.0)),
        negatives=((0.985, 2.0, 5.0), (0.015, 40.0, 1.0)),
    ),
    Family(
        "label noise, sharp",
        positives=((0.92, 12.0, 1.5), (0.08, 1.0, 15.0)),
        negatives=((0.985, 1.0, 15.0), (0.015, 12.0, 1.5)),
    ),
)
"""Families with a rare component in each class, used to design the intervals' unseen-row
bound (``docs/reference/intervals.md``, "What a sample cannot show"): *label noise*, a tenth of the
positives drawn from the negatives' Beta(1.5, 5) and 1% of the negatives from the positives'
Beta(5, 1.5) (population ROC AUC 0.93); *confident mistakes*, 4% of the positives at the
bottom (Beta(1, 40)) and 1.5% of the negatives at the top (Beta(40, 1)) of a Beta(4, 2) /
Beta(2, 5) model (0.88); *label noise, sharp*, 8% and 1.5% label noise on a sharp model, where
the rare rows carry most of the Brier scores of each class."""

NOISY_HELD_OUT = (
    Family(
        "label noise, strong model",
        positives=((0.93, 10.0, 1.2), (0.07, 1.2, 18.0)),
        negatives=((0.993, 1.2, 18.0), (0.007, 10.0, 1.2)),
    ),
    Family(
        "label noise, tree",
        positives=((0.88, 3.0, 1.5), (0.12, 1.5, 4.0)),
        negatives=((0.98, 1.5, 4.0), (0.02, 3.0, 1.5)),
        levels=(0.02, 0.07, 0.15, 0.26, 0.38, 0.5, 0.63, 0.77, 0.9, 0.97),
    ),
    Family(
        "rare missed positives",
        positives=((0.95, 6.0, 2.0), (0.05, 1.0, 25.0)),
        negatives=((1.0, 1.5, 6.0),),
    ),
    Family(
        "rare mid clusters",
        positives=((0.95, 7.0, 2.5), (0.05, 2.0, 9.0)),
        negatives=((0.97, 2.0, 7.0), (0.03, 3.0, 3.0)),
    ),
)
"""Families with rare components held out from the design of the unseen-row bound and only
evaluated on: a strong model with label noise (7% of positives and 0.5% of negatives drawn
from the other class, ROC AUC about 0.93), a tree model's ten leaf values with 12% and 2%
label noise, a model whose only rare component is 5% of positives scored near 0, and *rare
mid clusters* (added after the bound was designed, and not tuned on): 5% of the positives in a
low cluster Beta(2, 9) and 3% of the negatives in a cluster at the middle, Beta(3, 3), on a
Beta(7, 2.5) / Beta(2, 7) model."""


def set_intervals(
    scores: FloatArray,
    labels: npt.NDArray[np.int8],
    seed: int,
    pi0: float = PI0,
    score_kind: str = "score",
) -> dict[str, Interval]:
    """What a user gets for one set (default replicates), keyed like METRICS (calibrated at
    ``pi0``, by default PI0, under the names ending in SUFFIX), and with ``score_kind``
    "probability" the means (ALL_MEAN_METRICS) too."""
    prepared = prepare(scores, labels, score_kind=score_kind)
    out = bootstrap_intervals(
        prepared, threshold=THRESHOLD, pi0=[pi0], seed=seed, score_kind=score_kind
    )
    intervals: dict[str, Interval] = dict(out["regular"])
    for name, value in out["calibrated"][repr(pi0)].items():
        intervals[f"{name}{SUFFIX}"] = value
    intervals["prior"] = wilson_interval(int(labels.sum()), labels.size)
    return intervals


@dataclass(frozen=True, slots=True)
class Coverage:
    """Of ``sets`` sets: per metric, how many intervals covered the population value, how many
    were published (not None), and their mean width."""

    sets: int
    hits: dict[str, int]
    published: dict[str, int]
    width: dict[str, float]

    def rate(self, name: str) -> float:
        return self.hits[name] / self.published[name] if self.published[name] else float("nan")


class _Tally:
    """What :class:`Coverage` counts, gathered one interval at a time."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.hits = dict.fromkeys(keys, 0)
        self.published = dict.fromkeys(keys, 0)
        self.widths = dict.fromkeys(keys, 0.0)

    def add(self, key: str, interval: Interval, truth: float) -> None:
        """Count ``interval`` (None: not published) against the population value ``truth``."""
        if interval is None:
            return
        self.published[key] += 1
        self.widths[key] += interval[1] - interval[0]
        self.hits[key] += interval[0] <= truth <= interval[1]

    def coverage(self, sets: int) -> Coverage:
        width = {key: self.widths[key] / max(1, self.published[key]) for key in self.keys}
        return Coverage(sets=sets, hits=self.hits, published=self.published, width=width)


def coverage(
    family: Family,
    prior: float,
    positives: int,
    sets: int,
    *,
    seed: int | list[int],
    pi0: float = PI0,
    means: bool = False,
) -> Coverage:
    """Run ``sets`` seeded sets of ``family`` at ``prior`` with ``positives`` expected positives
    each (the calibrated metrics at ``pi0``, keyed with SUFFIX); with ``means`` the scores are
    read as probabilities and ALL_MEAN_METRICS are counted too."""
    truth = population_values(family, prior, pi0)
    n = round(positives / prior)
    rng = np.random.default_rng(seed)
    keys = (*METRICS, *ALL_MEAN_METRICS) if means else METRICS
    kind = "probability" if means else "score"
    tally = _Tally(keys)
    for i in range(sets):
        scores, labels = family.draw(rng, n, prior)
        intervals = set_intervals(scores, labels, seed=i, pi0=pi0, score_kind=kind)
        for name in keys:
            tally.add(name, intervals[name], truth[name])
    return tally.coverage(sets)


MEAN_METRICS = ("ks_abc", "brier", "brier_pos", "brier_neg", "log_loss")
"""The means with normal-approximation intervals (:func:`~calmon.metrics.intervals.mean_intervals`,
scores read as probabilities)."""
ALL_MEAN_METRICS = (*MEAN_METRICS, "brier_skill")
"""The means and ``brier_skill`` (delta method)."""

NOISY_PRIORS = (0.2, 0.01, 0.002)
NOISY_REGIMES: tuple[tuple[Family, float, int], ...] = tuple(
    (family, prior, positives)
    for family in (*NOISY, *NOISY_HELD_OUT)
    for prior in NOISY_PRIORS
    for positives in (20, 60, 200)
)
"""(family, π, expected positives) of the study of families with rare components: each of
NOISY (designed on) and NOISY_HELD_OUT (evaluated only) at π = 0.2, 0.01 and 0.002 with 20, 60
and 200 expected positives, every published metric (:func:`coverage` with ``means``)."""


def mean_coverage(
    family: Family, prior: float, positives: int, sets: int, *, seed: int | list[int]
) -> Coverage:
    """Like :func:`coverage` for ALL_MEAN_METRICS (no bootstrap, so cheap); the same seed
    draws the same sets as :func:`coverage`, so the means' cells match."""
    truth = population_values(family, prior)
    n = round(positives / prior)
    rng = np.random.default_rng(seed)
    tally = _Tally(ALL_MEAN_METRICS)
    for _ in range(sets):
        scores, labels = family.draw(rng, n, prior)
        prepared = prepare(scores, labels, score_kind="probability")
        out = mean_intervals(prepared.pos_sorted, prepared.neg_sorted, score_kind="probability")
        for name in ALL_MEAN_METRICS:
            tally.add(name, out[name], truth[name])
    return tally.coverage(sets)


MEAN_REGIMES: tuple[tuple[Family, int], ...] = tuple(
    (family, positives) for family in (*FAMILIES, *HELD_OUT) for positives in (20, 60)
)
"""(family, expected positives) of the means' study, at π = 0.2: the study families and the
held-out ones."""
MEAN_SETS = 2000
"""Sets per regime of the means' study (no bootstrap, so 2,000 take a few seconds)."""


REGIMES: tuple[tuple[Family, float, int], ...] = (
    *((family, 0.2, positives) for family in FAMILIES for positives in (20, 60, 200)),
    *((FAMILIES[0], 0.01, positives) for positives in (20, 60, 200)),
)
"""(family, π, expected positives) of the study: every family at π = 0.2 with 20, 60 and 200
positives, and the Beta family at π = 0.01 (where the regular AP publishes no interval,
MIN_AP_PRIOR)."""


DRIFTED = {
    "beta": Family("beta, drifted", positives=((1.0, 3.0, 2.5),), negatives=((1.0, 2.0, 4.0),)),
    "beta mixture": Family(
        "beta mixture, drifted",
        positives=((0.4, 8.0, 2.0), (0.6, 2.0, 3.0)),
        negatives=((0.8, 2.0, 6.0), (0.2, 5.0, 3.0)),
    ),
    "tied": Family(
        "tied, drifted", positives=((1.0, 2.5, 2.0),), negatives=((1.0, 2.0, 3.5),), decimals=1
    ),
}
"""The likelihood drift of each family: its positives score lower (the Beta mode moves down,
the mixture's weight moves to its low component), its negatives unchanged."""

SPLIT_WINDOW_PRIOR = 0.2
SPLIT_REF_PRIOR = 0.1
SPLIT_PARTS = tuple(f"{name} {part}" for name in PART_INTERVAL_METRICS for part in PARTS)
"""Keys of the split study's coverage: every part of every metric whose parts get intervals."""


def population_parts(
    window_family: Family, ref_family: Family, window_prior: float, ref_prior: float
) -> dict[str, float]:
    """The population prior and likelihood parts, keyed like SPLIT_PARTS: the split's formula
    (:func:`~calmon.metrics.split.shapley_parts`) on the population values of each family at both
    priors (a family calibrated at a prior is the same family at that prior)."""
    window = population_values(window_family, window_prior)
    window_at_ref = population_values(window_family, ref_prior)
    ref_at_window = population_values(ref_family, window_prior)
    ref = population_values(ref_family, ref_prior)
    parts: dict[str, float] = {}
    for name in PART_INTERVAL_METRICS:
        _, prior, likelihood = shapley_parts(
            window[name], window_at_ref[name], ref_at_window[name], ref[name]
        )
        parts[f"{name} prior"], parts[f"{name} likelihood"] = prior, likelihood
    return parts


def split_coverage(
    window_family: Family,
    ref_family: Family,
    positives: int,
    pairs: int,
    *,
    seed: list[int],
    priors: tuple[float, float] = (SPLIT_WINDOW_PRIOR, SPLIT_REF_PRIOR),
) -> Coverage:
    """Run ``pairs`` seeded (window, reference) pairs: the window of ``window_family`` at
    SPLIT_WINDOW_PRIOR with ``positives`` expected positives, the reference of ``ref_family`` at
    SPLIT_REF_PRIOR with as many expected positives (so twice the window's rows: a reference of
    two windows), or at ``priors`` (window, reference) with as many expected positives each;
    intervals as users get them (:func:`~calmon.metrics.split.split_from_arrays`, default
    replicates). Every metric outside PART_INTERVAL_METRICS must publish no interval,
    nor AP where either set has too few positives
    (:func:`~calmon.metrics.split.ap_parts_published`)."""
    window_prior, ref_prior = priors
    truth = population_parts(window_family, ref_family, window_prior, ref_prior)
    n_window = round(positives / window_prior)
    n_ref = round(positives / ref_prior)
    rng = np.random.default_rng(seed)
    tally = _Tally(SPLIT_PARTS)
    for i in range(pairs):
        scores, labels = window_family.draw(rng, n_window, window_prior)
        ref_scores, ref_labels = ref_family.draw(rng, n_ref, ref_prior)
        split = split_from_arrays(
            scores, labels, ref_scores, ref_labels, threshold=THRESHOLD, intervals=True, seed=i
        )
        ap_published = ap_parts_published(int(labels.sum()), int(ref_labels.sum()))
        for name, values in split.items():
            for part in PARTS:
                interval = values[f"{part}_interval"]
                key = f"{name} {part}"
                if key not in tally.published or (name == "average_precision" and not ap_published):
                    assert interval is None, key
                    continue
                tally.add(key, interval, truth[key])
    return tally.coverage(pairs)


SPLIT_REGIMES: tuple[tuple[Family, Family, int], ...] = tuple(
    (window, family, positives)
    for family in FAMILIES
    for window in (family, DRIFTED[family.name])
    for positives in (20, 60, 200)
)
"""(window family, reference family, expected positives per set) of the split study: for every
family a pure prior shift (the same family in both sets: likelihood parts 0) and a likelihood
drift (the window from the drifted family: both parts non-zero), each with 20, 60 and 200
expected positives in the window and in the reference."""
SPLIT_PAIRS = {20: 1500, 60: 1500, 200: 1000}
"""Pairs per regime of the split study by expected positives: 1,500 where a pair is cheap
(standard error of a coverage estimate √(0.05·0.95/1500) ≈ 0.56%, so [0.93, 0.97] is ±3.6 of
them), 1,000 at 200 positives (≈ 0.69%, ±2.9), so the study runs in about 2.5 minutes."""
