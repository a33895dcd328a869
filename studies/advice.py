"""The study of threshold advice at rare priors (``docs/measurements/advice.md``, "Advice at rare
priors"): does the advised threshold give the target precision on the next window, under pure label
shift (each class's scores drawn as in the reference, only the class ratio moved)?

A *model* is a score family and one reference drawn from it (:data:`REFERENCES`: 20,000 rows
at π 0.1, or 100,000 rows at π 0.02; 2,000 positives either way). For each prior of
:data:`PRIORS` the model draws two windows of :data:`WINDOW_ROWS` rows, all labelled: the
advice is computed from the first (:func:`calmon.metrics.advice.window_advice`, its measured
ratio, as the service does) and judged on the second: the precision of the rows it flags,
within ±:data:`TOLERANCE` of :data:`TARGET` or not (a threshold that flags nothing misses).
``before`` is the rule calmon had (:func:`advise_before`): the lowest threshold whose
expected precision, from the reference's point estimates of TPR and FPR, is at least the
target, and advice whenever one exists.

Families (:data:`FAMILIES`): two *design* families, on which the rule was checked while it
was built, and two *held-out* ones, never used to choose the rule or its constants (they were
run once on an earlier form of the hold rule, the window's sampling alone; the rule was then
completed with the reference's and the ratio's errors from the unit tests' cases, not from
their figures):

- ``logistic`` (design): a logistic model's probability, sigmoid(2·x - 5), x ~ N(3.2·y, 1)
  (ROC AUC 0.988);
- ``tree`` (design): a tree's scores: the same posterior rounded to 2 decimals (101 values,
  heavy ties at the top);
- ``label noise`` (held-out): each class has a rare component scoring like the other class:
  positives N(3.5, 1) and 8% N(0, 1), negatives N(0, 1) and 1% N(2, 1);
- ``heavy tails`` (held-out): Student t with 3 degrees of freedom, positives shifted by 4
  (the negatives' tail reaches far into the positives');
- ``confident mistakes`` (held-out, added with the alert-rate and cost objectives and never
  used to choose their rule): positives half N(2, 0.5) and half N(4, 1.5), negatives logistic
  (scale 0.6) with 0.3% in a tight cluster N(3, 0.2) among the positives.

The same windows judge every objective of :data:`OBJECTIVES` (:func:`held`): a target
precision within ±:data:`TOLERANCE`; an alert budget r kept when the next window flags at most
r·(1 + :data:`calmon.metrics.advice.RELATIVE_TOLERANCE`) of its rows; a cost no worse than
promised when the next window's cost per prediction is at most the upper end of the expected
cost's 95% interval·(1 + that tolerance). For the alert-rate and cost objectives ``before``
is :func:`advise` alone (calmon's rule before their hold rule: advice whenever a threshold
meets the objective). Each given
advice's ``expected_intervals`` are also checked against the next window's realised values
(:attr:`Cell.covered`): they cover the reference's sampling, not the window's own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from calmon.arrays import FloatArray, Int8Array
from calmon.metrics.advice import RELATIVE_TOLERANCE, advise, expected_curves, window_advice
from calmon.metrics.prepared import prepare
from calmon.metrics.ranking import Ranking, rank

TARGET: Final = 0.8
TOLERANCE: Final = 0.05
WINDOW_ROWS: Final = 20_000
PRIORS: Final = (0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002)
REFERENCES: Final = ((20_000, 0.1), (100_000, 0.02))
OBJECTIVE: Final = {"target_precision": TARGET}
#: The objectives studied, by name; the first is :data:`OBJECTIVE`.
OBJECTIVES: Final[dict[str, dict[str, Any]]] = {
    "precision 0.8": OBJECTIVE,
    "alert rate 0.01": {"alert_rate": 0.01},
    "alert rate 0.002": {"alert_rate": 0.002},
    "costs 1:20": {"costs": {"false_positive": 1.0, "false_negative": 20.0}},
}
#: The sizes of the rare-prior study (:func:`run_sizes`): window rows, references.
SIZE_PRIORS: Final = (0.01, 0.005)
SIZE_OBJECTIVES: Final = ("precision 0.8", "costs 1:20")
SIZE_WINDOWS: Final = (20_000, 50_000, 100_000, 200_000)
SIZE_REFERENCES: Final = ((100_000, 0.02), (500_000, 0.02))


def _sigmoid(x: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 / (1.0 + np.exp(-x))
    return out


def _logistic(rng: np.random.Generator, y: Int8Array) -> FloatArray:
    return _sigmoid(2.0 * rng.normal(3.2 * y, 1.0) - 5.0)


def _tree(rng: np.random.Generator, y: Int8Array) -> FloatArray:
    out: FloatArray = np.round(_logistic(rng, y), 2)
    return out


def _label_noise(rng: np.random.Generator, y: Int8Array) -> FloatArray:
    u = rng.random(y.size)
    mean = np.where(y == 1, np.where(u < 0.08, 0.0, 3.5), np.where(u < 0.01, 2.0, 0.0))
    return _sigmoid(rng.normal(mean, 1.0) * 1.5 - 3.0)


def _heavy_tails(rng: np.random.Generator, y: Int8Array) -> FloatArray:
    out: FloatArray = rng.standard_t(3.0, size=y.size) + 4.0 * y
    return out


def _confident_mistakes(rng: np.random.Generator, y: Int8Array) -> FloatArray:
    u = rng.random(y.size)
    positives = np.where(u < 0.5, rng.normal(2.0, 0.5, y.size), rng.normal(4.0, 1.5, y.size))
    negatives = np.where(u < 0.003, rng.normal(3.0, 0.2, y.size), rng.logistic(0.0, 0.6, y.size))
    out: FloatArray = np.where(y == 1, positives, negatives)
    return out


Family = Callable[[np.random.Generator, Int8Array], FloatArray]
FAMILIES: Final[dict[str, tuple[Family, str]]] = {
    "logistic": (_logistic, "design"),
    "tree": (_tree, "design"),
    "label noise": (_label_noise, "held-out"),
    "heavy tails": (_heavy_tails, "held-out"),
    "confident mistakes": (_confident_mistakes, "held-out"),
}


def draw(
    rng: np.random.Generator, family: str, n: int, prior: float
) -> tuple[FloatArray, Int8Array]:
    labels = (rng.random(n) < prior).astype(np.int8)
    return FAMILIES[family][0](rng, labels), labels


def advise_before(reference: Ranking, prior: float) -> float | None:
    """The threshold calmon advised before the bounds: the lowest one whose expected
    precision from the reference's point estimates is at least :data:`TARGET`."""
    curves = expected_curves(reference, prior)
    found = np.flatnonzero(curves["precision"] >= TARGET)
    return None if found.size == 0 else float(curves["threshold"][found[-1]])


def realised(
    objective: dict[str, Any], threshold: float, nxt: FloatArray, y: Int8Array
) -> dict[str, float]:
    """What ``threshold`` gives on a window (its scores ``nxt``, labels ``y``): precision (NaN
    when it flags nothing), recall, alert rate and, with a cost objective, cost per
    prediction."""
    flagged = nxt >= threshold
    count = int(np.count_nonzero(flagged))
    tp = int(np.count_nonzero(flagged & (y == 1)))
    positives = int(np.count_nonzero(y))
    out = {
        "precision": tp / count if count else float("nan"),
        "recall": tp / positives if positives else float("nan"),
        "alert_rate": count / y.size,
        "flagged": float(count),
    }
    costs = objective.get("costs")
    if costs is not None:
        fp, fn = count - tp, positives - tp
        out["cost"] = (
            float(costs["false_positive"]) * fp + float(costs["false_negative"]) * fn
        ) / y.size
    return out


def held(objective: dict[str, Any], promised_cost: float, values: dict[str, float]) -> bool:
    """Whether a window's ``values`` (:func:`realised`) keep what the advice promised
    (``promised_cost``: the upper end of the expected cost's interval)."""
    if "target_precision" in objective:
        precision = values["precision"]
        return bool(values["flagged"]) and abs(precision - TARGET) <= TOLERANCE
    if "alert_rate" in objective:
        return values["alert_rate"] <= float(objective["alert_rate"]) * (1 + RELATIVE_TOLERANCE)
    return values["cost"] <= promised_cost * (1 + RELATIVE_TOLERANCE)


@dataclass
class Cell:
    """The windows of one (group, prior, rule): advice given, held on the next window, the
    next window's precision and flagged rows where given, the reasons where withheld, and
    (rule ``after``) how often each of ``expected_intervals`` held the next window's value."""

    windows: int = 0
    given: int = 0
    held: int = 0
    precisions: list[float] = field(default_factory=list)
    flagged: list[int] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    covered: Counter[str] = field(default_factory=Counter)
    needed: list[int] = field(default_factory=list)

    def add(
        self,
        objective: dict[str, Any],
        advice: dict[str, Any] | None,
        reason: str | None,
        nxt: FloatArray,
        y: Int8Array,
    ) -> None:
        """One window: ``advice`` is a record's (``threshold``, ``expected``,
        ``expected_intervals``) or None (withheld, for ``reason``)."""
        self.windows += 1
        if advice is None or advice["threshold"] is None:
            self.reasons[short_reason(reason)] += 1
            rows = rows_named(reason)
            if rows is not None:
                self.needed.append(rows)
            return
        self.given += 1
        values = realised(objective, float(advice["threshold"]), nxt, y)
        self.flagged.append(int(values["flagged"]))
        self.precisions.append(values["precision"])
        intervals = advice.get("expected_intervals")
        cost = (intervals or {}).get("cost")
        self.held += held(objective, float(cost[1]) if cost else math.nan, values)
        if intervals is not None:
            for name, bounds in intervals.items():
                if bounds is not None:
                    self.covered[name] += bounds[0] <= values[name] <= bounds[1]

    def merge(self, other: Cell) -> None:
        self.windows += other.windows
        self.given += other.given
        self.held += other.held
        self.precisions += other.precisions
        self.flagged += other.flagged
        self.reasons += other.reasons
        self.covered += other.covered
        self.needed += other.needed


def rows_named(reason: str | None) -> int | None:
    """The window size a withheld advice's reason names, if it names one."""
    marker = "With this reference, windows of about "
    if reason is None or marker not in reason:
        return None
    return int(reason.split(marker, 1)[1].split(" ", 1)[0])


def short_reason(reason: str | None) -> str:
    """A withheld advice's reason, in a word or two, for the table."""
    text = reason or "no threshold meets the objective"
    if "on a window of this size" in text:
        for words, short in (
            ("window's own", "too few flagged"),
            ("reference's sampling", "reference too uncertain"),
            ("class ratio's", "ratio too uncertain"),
        ):
            if words in text:
                return short
    if text.startswith("no threshold meets"):
        return "no threshold meets"
    if "predictions labelled" in text:
        return "too few labels"
    return text[:40]


Key = tuple[str, float, str]


def _record(advice: Any) -> dict[str, Any] | None:
    """:func:`advise`'s answer as a record's advice (``before`` of the other objectives)."""
    if advice is None:
        return None
    intervals = dict(advice.intervals)
    return {
        "threshold": advice.threshold,
        "expected": {"cost": advice.cost},
        "expected_intervals": intervals,
    }


def judge_pair(
    rng: np.random.Generator,
    family: str,
    reference: Ranking,
    prior: float,
    rows: int,
    objective: dict[str, Any],
    cells: dict[Key, Cell],
    key: tuple[str, float],
    *,
    before: bool = True,
) -> dict[str, Any]:
    """Draw a window pair of ``rows`` rows at ``prior``, advise from the first, judge on the
    second into ``cells`` at (``key``, rule); returns the ``after`` advice."""
    scores, labels = draw(rng, family, rows, prior)
    nxt, next_labels = draw(rng, family, rows, prior)
    n_pos = int(labels.sum())
    measured = n_pos / labels.size
    if before:
        if "target_precision" in objective:
            found = advise_before(reference, measured) if n_pos >= 30 else None
            former = None if found is None else {"threshold": found, "expected_intervals": None}
        else:
            former = _record(advise(reference, prior=measured, objective=objective))
            former = former if n_pos >= 30 else None
        cells.setdefault((*key, "before"), Cell()).add(
            objective, former, None if n_pos >= 30 else "predictions labelled", nxt, next_labels
        )
    advice: dict[str, Any] = window_advice(
        objective=objective,
        threshold=0.5,
        prepared=prepare(scores, labels, score_kind="score"),
        result={"n": labels.size, "n_pos": n_pos, "prior": measured},
        unlabelled=0,
        reference=reference,
        estimated=None,
    )
    cells.setdefault((*key, "after"), Cell()).add(
        objective, advice, advice["reason"], nxt, next_labels
    )
    return advice


def run_model(
    family: str,
    reference_size: tuple[int, float],
    seed: int,
    objective: dict[str, Any] = OBJECTIVE,
) -> dict[Key, Cell]:
    """One model: its reference, then a pair of windows at each prior, judged by both rules.
    Keys: (family's group, prior, "before" | "after")."""
    rng = np.random.default_rng(seed)
    group = FAMILIES[family][1]
    rows, reference_prior = reference_size
    reference = rank(*draw(rng, family, rows, reference_prior))
    cells: dict[Key, Cell] = {}
    for prior in PRIORS:
        judge_pair(rng, family, reference, prior, WINDOW_ROWS, objective, cells, (group, prior))
    return cells


def run(
    models: int,
    *,
    families: tuple[str, ...] = tuple(FAMILIES),
    seed: int = 0,
    objective: dict[str, Any] = OBJECTIVE,
) -> dict[Key, Cell]:
    """``models`` models per family and reference size, every cell merged (the same seeds,
    so the same references and windows, for every objective)."""
    total: dict[Key, Cell] = {}
    for f, family in enumerate(families):
        for r, size in enumerate(REFERENCES):
            for m in range(models):
                model_seed = seed * 1_000_003 + f * 10_007 + r * 1_009 + m
                for key, cell in run_model(family, size, model_seed, objective).items():
                    total.setdefault(key, Cell()).merge(cell)
    return total


SizeKey = tuple[str, float, int, int]


def run_sizes(
    models: int,
    *,
    families: tuple[str, ...] = tuple(FAMILIES),
    seed: int = 0,
    objective: dict[str, Any] = OBJECTIVE,
) -> dict[SizeKey, Cell]:
    """At the priors of :data:`SIZE_PRIORS`, windows of each size of :data:`SIZE_WINDOWS`
    against references of :data:`SIZE_REFERENCES` (``models`` per family and reference):
    which get advice, and does it hold. Keys: (group, prior, reference rows, window rows)."""
    total: dict[SizeKey, Cell] = {}
    for f, family in enumerate(families):
        group = FAMILIES[family][1]
        for r, (rows, reference_prior) in enumerate(SIZE_REFERENCES):
            for m in range(models):
                rng = np.random.default_rng(seed * 1_000_003 + f * 10_007 + r * 1_009 + m)
                reference = rank(*draw(rng, family, rows, reference_prior))
                for prior in SIZE_PRIORS:
                    for window in SIZE_WINDOWS:
                        cells: dict[Key, Cell] = {}
                        judge_pair(
                            rng,
                            family,
                            reference,
                            prior,
                            window,
                            objective,
                            cells,
                            (group, prior),
                            before=False,
                        )
                        cell = cells[(group, prior, "after")]
                        total.setdefault((group, prior, rows, window), Cell()).merge(cell)
    return total
