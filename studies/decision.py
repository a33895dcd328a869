"""The study of pooled decisions at few positives (``docs/reference/metrics.md``, "Decisions at few
positives"): false pages under pure prior shifts, detection delay of likelihood drifts, and
the coverage of the decision's intervals.

A *model* is a score family (rare positives, not binormal), a fixed reference of
``reference_hours`` hourly windows at π_ref (two days unless the regime says one), then
``WARMUP_HOURS`` windows like the reference and, from then on, windows after a change: the prior
times a factor (a pure prior shift) or the positives' scores drawn partly from the negatives'
distribution (a likelihood drift that lowers the calibrated AP at π_ref by ``DRIFT_DROP``). Each
hour's decision pools the windows back from it until they hold ``MIN_POSITIVES`` positives (the
default setting), exactly as the scheduler does, and is computed by
:func:`calmon.metrics.decision.decide_all`. The page is the decision's alert
(:func:`calmon.metrics.decision.page`); it needs no interval, so the hourly decisions skip the
bootstrap, and every ``COVERAGE_EVERY``-th hour's decision is computed in full (default
replicates, as users get it) for the coverage of its intervals. Used by
``test_decision_study.py`` (a small run) and by ``bench/decisions.py`` (the tables of
``docs/measurements/decisions.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
from scipy import stats

from calmon.arrays import FloatArray
from calmon.catalogue import DECISION_METRIC
from calmon.metrics.decision import decide_all
from calmon.metrics.evaluation import SetSums, evaluate_ranked, set_sums
from calmon.metrics.ranking import Ranking, rank_sorted
from calmon.metrics.split import PART_INTERVAL_METRICS, shapley_parts
from calmon.services.model_registry import DEFAULT_DECISION_POSITIVES
from calmon.verdict import PAGE_P, Verdict, page
from studies.coverage import Family, Mixture

REFERENCE_HOURS = 48
WARMUP_HOURS = 24
MIN_POSITIVES = DEFAULT_DECISION_POSITIVES
COVERAGE_EVERY = 6
MAX_SPAN_HOURS = 168
DRIFT_DROP = 0.2
THRESHOLD = 0.8

RARE_FAMILIES = (
    Family("rare beta", positives=((1.0, 3.0, 1.5),), negatives=((1.0, 1.0, 4.0),)),
    Family(
        "rare mixture",
        positives=((0.6, 10.0, 1.5), (0.4, 2.0, 3.0)),
        negatives=((0.97, 1.0, 8.0), (0.03, 3.0, 3.0)),
    ),
    Family("rare tied", positives=((1.0, 3.0, 1.2),), negatives=((1.0, 1.0, 4.0),), decimals=2),
)
"""Continuous unimodal, bimodal (each class a mixture) and 101-valued scores (ties); population
AP 0.25, 0.40, 0.35 at π = 0.002 and 0.44, 0.60, 0.54 at π = 0.01. The page's test was designed
on these."""
HELD_OUT_FAMILIES = (
    Family(
        "label noise",
        positives=((0.9, 5.0, 1.2), (0.1, 1.2, 7.0)),
        negatives=((0.99, 1.2, 7.0), (0.01, 5.0, 1.2)),
    ),
    Family(
        "confident mistakes",
        positives=((1.0, 4.0, 2.0),),
        negatives=((0.995, 1.0, 5.0), (0.005, 20.0, 1.0)),
    ),
    Family(
        "label noise, tied",
        positives=((0.92, 4.0, 1.0), (0.08, 1.0, 5.0)),
        negatives=((0.99, 1.0, 5.0), (0.01, 4.0, 1.0)),
        decimals=2,
    ),
    Family(
        "two kinds of positives",
        positives=((0.5, 8.0, 1.0), (0.5, 2.5, 2.0)),
        negatives=((0.9, 1.0, 6.0), (0.1, 1.5, 3.0)),
    ),
)
"""Families the page's tests were not designed on, each with a rare component in a class: 10%
of positives scoring like the negatives and 1% of negatives like the positives (label noise,
also on 101 values), a cluster of 0.5% confident negatives above most positives, and (added
with the location test, not used to choose it) half the positives confident and half spread,
with 10% of the negatives spread toward them (population AP 0.54 at π = 0.005)."""
#: how a likelihood drift moves the positives: a share of them scored like the negatives
#: (``mixture``), or every positive component's first Beta parameter moved toward 1, its scores
#: shrunk toward the negatives' (``shrink``)
DRIFT_KINDS = ("mixture", "shrink")
GRID_CELLS = 50_000


def _cdf(mixture: Mixture, x: FloatArray) -> FloatArray:
    out: FloatArray = sum(
        (w * stats.beta.cdf(x, a, b) for w, a, b in mixture), start=np.zeros_like(x)
    )
    return out


def _class_shares(family: Family) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(grid values, positives' masses, negatives' masses) over the cells of a grid: the
    rounding grid of tied scores (exact), else GRID_CELLS equal cells (valued at their upper
    edge; the limit of the step rule up to O(1/GRID_CELLS))."""
    if family.decimals is None:
        edges = np.linspace(0.0, 1.0, GRID_CELLS + 1)
        values = edges[1:]
    else:
        step = 10.0**-family.decimals
        values = np.round(np.arange(0.0, 1.0 + step / 2, step), family.decimals)
        edges = np.clip(np.r_[values - step / 2, 1.0 + step / 2], 0.0, 1.0)
    return values, np.diff(_cdf(family.positives, edges)), np.diff(_cdf(family.negatives, edges))


def population_value(family: Family, prior: float, metric: str) -> float:
    """The population value of ``metric`` (``average_precision``, or ``precision`` / ``f1`` at
    THRESHOLD) of ``family`` at ``prior``: AP = Σ_k q1_k·P(v_k) with P = π·S1/(π·S1 + (1 - π)·S0)
    and S the share of a class at or above v_k; precision and F1 from S1, S0 at THRESHOLD."""
    values, q1, q0 = _class_shares(family)
    s1, s0 = np.cumsum(q1[::-1])[::-1], np.cumsum(q0[::-1])[::-1]
    if metric == "average_precision":
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = prior * s1 / (prior * s1 + (1 - prior) * s0)
        return float(np.sum(np.where(q1 > 0, q1 * precision, 0.0)))
    at = int(np.searchsorted(values, THRESHOLD - 1e-12))
    tpr, fpr = float(s1[at]), float(s0[at])
    precision_at = prior * tpr / (prior * tpr + (1 - prior) * fpr)
    if metric == "precision":
        return precision_at
    return 2 * precision_at * tpr / (precision_at + tpr)


def population_ap(family: Family, prior: float) -> float:
    """The population average precision of ``family`` at ``prior``."""
    return population_value(family, prior, "average_precision")


def _mixed(positives: Mixture, negatives: Mixture, weight: float) -> Mixture:
    return tuple((w * (1 - weight), a, b) for w, a, b in positives) + tuple(
        (w * weight, a, b) for w, a, b in negatives
    )


@cache
def drifted(family: Family, prior: float, drop: float = DRIFT_DROP) -> Family:
    """``family`` with a share w of its positives scored like its negatives, w chosen by
    bisection so that the population AP at ``prior`` is (1 - ``drop``) of the family's."""
    target = (1 - drop) * population_ap(family, prior)
    lo, hi = 0.0, 1.0
    for _ in range(20):
        weight = (lo + hi) / 2
        candidate = Family(
            f"{family.name}, drifted",
            positives=_mixed(family.positives, family.negatives, weight),
            negatives=family.negatives,
            decimals=family.decimals,
        )
        if population_ap(candidate, prior) > target:
            lo = weight
        else:
            hi = weight
    return candidate


@cache
def shrunk(family: Family, prior: float, drop: float = DRIFT_DROP) -> Family:
    """``family`` with each positive component Beta(a, b) moved to Beta(a - c·(a - 1), b), c
    chosen by bisection so that the population AP at ``prior`` is (1 - ``drop``) of the
    family's (a component with a ≤ 1, already scoring like the negatives, stays)."""
    target = (1 - drop) * population_ap(family, prior)
    lo, hi = 0.0, 1.0
    for _ in range(20):
        share = (lo + hi) / 2
        candidate = Family(
            f"{family.name}, shrunk",
            positives=tuple((w, a - share * max(a - 1.0, 0.0), b) for w, a, b in family.positives),
            negatives=family.negatives,
            decimals=family.decimals,
        )
        if population_ap(candidate, prior) > target:
            lo = share
        else:
            hi = share
    return candidate


@cache
def population_parts(
    window: Family, reference: Family, window_prior: float, ref_prior: float, metric: str
) -> tuple[float, float]:
    """The population (prior, likelihood) parts of ``metric``'s change."""
    values = [
        population_value(family, prior, metric)
        for family, prior in (
            (window, window_prior),
            (window, ref_prior),
            (reference, window_prior),
            (reference, ref_prior),
        )
    ]
    _, prior, likelihood = shapley_parts(*values)
    return prior, likelihood


@dataclass(frozen=True, slots=True)
class Regime:
    """A family at π_ref with ``positives`` expected per window; after the warm-up the prior is
    multiplied by ``factor`` and (``drift``) the positives drift as ``kind`` says
    (DRIFT_KINDS)."""

    family: Family
    ref_prior: float
    positives: int
    factor: float = 1.0
    drift: bool = False
    reference_hours: int = REFERENCE_HOURS
    kind: str = "mixture"

    @property
    def drifted_family(self) -> Family:
        """The family of the windows after the change."""
        if not self.drift:
            return self.family
        if self.kind == "shrink":
            return shrunk(self.family, self.ref_prior)
        return drifted(self.family, self.ref_prior)

    @property
    def name(self) -> str:
        change = f"prior x{self.factor:.3g}" if self.factor != 1.0 else "no prior shift"
        if self.drift:
            change = f"AP -{DRIFT_DROP:.0%} likelihood drift ({self.kind})"
        days = self.reference_hours / 24
        return (
            f"{self.family.name}, π_ref = {self.ref_prior}, reference {days:g} d, "
            f"{self.positives} pos./h, {change}"
        )


@dataclass(slots=True)
class ModelRun:
    """Per decision after the change (hour 0 = the first changed window), by metric: the
    decision; the reference's value of each metric; pooled windows; and, by metric and part,
    how many published intervals covered the population part where the pooled set lies wholly
    after the change."""

    reference_values: dict[str, float]
    decisions: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    windows: list[int] = field(default_factory=list)
    covered: dict[str, int] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    #: per hour, the decision by DECISION_METRIC when computed with its intervals, else None
    verdict_decisions: list[dict[str, Any] | None] = field(default_factory=list)

    def first_page(
        self, metric: str = DECISION_METRIC, p: float = PAGE_P, *, test: str = "after"
    ) -> int | None:
        """Hours from the change to the end of the first window whose decision by ``metric``
        pages at the level ``p``, None without a page; ``test`` "before" reads the page of
        the Mann-Whitney and placement tests (the page before the location test replaced
        Mann-Whitney in it)."""
        for hour, decisions in enumerate(self.decisions):
            if self.pages(decisions[metric], metric, p, test=test):
                return hour + 1
        return None

    def pages(
        self, decision: dict[str, Any], metric: str, p: float = PAGE_P, *, test: str = "after"
    ) -> bool:
        """Whether ``decision`` (by ``metric``) pages at the level ``p`` by ``test``."""
        if test == "before":
            decision = _before(decision)
        return page(decision, reference_value=self.reference_values[metric], p=p)

    def says_worse(self, hours: int, *, test: str = "after") -> bool:
        """Whether a decision of the first ``hours`` reads "worse": ``model_got_worse`` or
        ``both``, which rest on the page; "before", where the page before held (the
        Mann-Whitney and placement tests)."""
        if test == "before":
            return any(
                self.pages(decisions[DECISION_METRIC], DECISION_METRIC, test="before")
                for decisions in self.decisions[:hours]
            )
        return any(
            decisions[DECISION_METRIC]["verdict"] in (Verdict.WORSE, Verdict.BOTH)
            for decisions in self.decisions[:hours]
        )


Pool = tuple[FloatArray, FloatArray]


def _before(decision: dict[str, Any]) -> dict[str, Any]:
    """``decision`` with its positives' shift read as before the location test: the
    Mann-Whitney and placement tests, the smaller p-value doubled."""
    shift = decision["positives_shift"]
    if shift is None:
        return decision
    z, placement = shift["mann_whitney_z"], shift["placement_z"]
    if placement is None:
        return {**decision, "positives_shift": {"z": z, "p_value": stats.norm.sf(z)}}
    z = max(z, placement)
    p_value = min(1.0, 2 * float(stats.norm.sf(z)))
    return {**decision, "positives_shift": {"z": z, "p_value": p_value}}


def _sorted_classes(family: Family, rng: np.random.Generator, n: int, prior: float) -> Pool:
    scores, labels = family.draw(rng, n, prior)
    return np.sort(scores[labels == 1]), np.sort(scores[labels == 0])


def _ranked(pools: list[Pool]) -> tuple[Ranking, SetSums]:
    pos = np.sort(np.concatenate([p for p, _ in pools]), kind="stable")
    neg = np.sort(np.concatenate([n for _, n in pools]), kind="stable")
    return rank_sorted(pos, neg), set_sums(pos, neg, threshold=THRESHOLD, score_kind="score")


def pool_start(windows: list[Pool], hour: int, *, min_positives: int, min_span: int = 0) -> int:
    """The first window pooled with the window ``hour``: as the service's decision setting
    pools, a window with fewer than ``min_positives`` positives back until the pool holds
    ``min_positives`` positives and spans at least ``min_span`` windows (0: the positives
    alone decide, as the service did before its ``min_span``), within MAX_SPAN_HOURS and the
    windows there are. A minimum span keeps the number of distinct pools a week holds from
    growing with the prior."""
    first, positives = hour, windows[hour][0].size
    if positives >= min_positives:
        return hour
    while first > 0 and hour - first + 1 < MAX_SPAN_HOURS:
        if positives >= min_positives and hour - first + 1 >= min_span:
            break
        first -= 1
        positives += windows[first][0].size
    return first


def run_model(
    regime: Regime,
    hours: int,
    *,
    seed: list[int],
    min_positives: int = MIN_POSITIVES,
    min_span: int = 0,
    coverage_every: int = COVERAGE_EVERY,
    verdict_hours: int = 0,
) -> ModelRun:
    """One model of ``regime`` over ``hours`` hourly windows after the change, its decisions
    pooling ``min_positives`` over at least ``min_span`` hours (:func:`pool_start`), every
    ``coverage_every``-th with its intervals, and every one of the first ``verdict_hours`` (for
    the verdicts read over them)."""
    rng = np.random.default_rng(seed)
    n = round(regime.positives / regime.ref_prior)
    ref_pos, ref_neg = _sorted_classes(
        regime.family, rng, n * regime.reference_hours, regime.ref_prior
    )
    reference, ref_sums = _ranked([(ref_pos, ref_neg)])
    ref_values = evaluate_ranked(
        reference, ref_sums, threshold=THRESHOLD, pi0=(), score_kind="score"
    )["regular"]
    prior = regime.ref_prior * regime.factor
    family = regime.drifted_family
    windows = [
        _sorted_classes(regime.family, rng, n, regime.ref_prior) for _ in range(WARMUP_HOURS)
    ]
    windows += [_sorted_classes(family, rng, n, prior) for _ in range(hours)]
    run = ModelRun(reference_values={m: ref_values[m] for m in PART_INTERVAL_METRICS})
    for hour in range(WARMUP_HOURS, WARMUP_HOURS + hours):
        first = pool_start(windows, hour, min_positives=min_positives, min_span=min_span)
        pooled, sums = _ranked(windows[first : hour + 1])
        full = (hour - WARMUP_HOURS) % coverage_every == coverage_every - 1
        decisions = decide_all(
            pooled,
            sums,
            reference,
            ref_sums,
            threshold=THRESHOLD,
            score_kind="score",
            seed=hour,
            intervals=full or hour - WARMUP_HOURS < verdict_hours,
            negatives=[n for _, n in windows[first : hour + 1]],
        )
        run.decisions.append(decisions)
        run.verdict_decisions.append(
            decisions[DECISION_METRIC] if full or hour - WARMUP_HOURS < verdict_hours else None
        )
        run.windows.append(hour - first + 1)
        if first < WARMUP_HOURS or not full:
            continue
        for metric, decision in decisions.items():
            truth = population_parts(family, regime.family, prior, regime.ref_prior, metric)
            for index, part in enumerate(("prior", "likelihood")):
                interval, key = decision[f"{part}_interval"], f"{metric} {part}"
                if interval is not None:
                    run.published[key] = run.published.get(key, 0) + 1
                    hit = interval[0] <= truth[index] <= interval[1]
                    run.covered[key] = run.covered.get(key, 0) + hit
    return run


@dataclass(frozen=True, slots=True)
class RegimeResult:
    """Over the models of a regime, by one metric."""

    models: int
    paged: int
    paged_within_24h: int
    median_first_page: float | None
    covered: dict[str, int]
    published: dict[str, int]
    median_windows: float
    #: models whose verdict read "worse" in the first hours (None: not measured)
    said_worse: int | None = None

    def coverage(self, part: str) -> float:
        return (
            self.covered[part] / self.published[part] if self.published.get(part) else float("nan")
        )


def run_regime(
    regime: Regime,
    models: int,
    hours: int,
    *,
    seed: int,
    min_positives: int = MIN_POSITIVES,
    min_span: int = 0,
    coverage_every: int = COVERAGE_EVERY,
    verdict_hours: int = 0,
) -> list[ModelRun]:
    """``models`` seeded models of ``regime`` over ``hours`` hours after the change, pooling as
    :func:`run_model` does."""
    return [
        run_model(
            regime,
            hours,
            seed=[seed, i],
            min_positives=min_positives,
            min_span=min_span,
            coverage_every=coverage_every,
            verdict_hours=verdict_hours,
        )
        for i in range(models)
    ]


def summarise(
    runs: list[ModelRun],
    *,
    metric: str = DECISION_METRIC,
    p: float = PAGE_P,
    test: str = "after",
    verdict_hours: int = 24,
) -> RegimeResult:
    """What :class:`RegimeResult` says of ``runs`` by ``metric`` with pages at level ``p`` by
    the page's ``test`` ("after", or "before": the Mann-Whitney test alone), and how many
    models read "worse" in the first ``verdict_hours`` (:meth:`ModelRun.says_worse`)."""
    firsts = [run.first_page(metric, p, test=test) for run in runs]
    said = [run.says_worse(verdict_hours, test=test) for run in runs]
    found = [f for f in firsts if f is not None]
    parts = ("prior", "likelihood")
    return RegimeResult(
        models=len(runs),
        paged=len(found),
        paged_within_24h=sum(f <= 24 for f in found),
        median_first_page=float(np.median(found)) if found else None,
        covered={p: sum(r.covered.get(f"{metric} {p}", 0) for r in runs) for p in parts},
        published={p: sum(r.published.get(f"{metric} {p}", 0) for r in runs) for p in parts},
        median_windows=float(np.median([w for run in runs for w in run.windows])),
        said_worse=None if None in said else sum(bool(x) for x in said),
    )
