"""The study of threshold advice at rare priors (``docs/acting.md``, "Advice at rare priors"):
does the advised threshold give the target precision on the next window, under pure label
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
  (the negatives' tail reaches far into the positives').
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from calmon.arrays import FloatArray, Int8Array
from calmon.metrics.advice import expected_curves, window_advice
from calmon.metrics.prepared import prepare
from calmon.metrics.ranking import Ranking, rank

TARGET: Final = 0.8
TOLERANCE: Final = 0.05
WINDOW_ROWS: Final = 20_000
PRIORS: Final = (0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002)
REFERENCES: Final = ((20_000, 0.1), (100_000, 0.02))
OBJECTIVE: Final = {"target_precision": TARGET}


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


Family = Callable[[np.random.Generator, Int8Array], FloatArray]
FAMILIES: Final[dict[str, tuple[Family, str]]] = {
    "logistic": (_logistic, "design"),
    "tree": (_tree, "design"),
    "label noise": (_label_noise, "held-out"),
    "heavy tails": (_heavy_tails, "held-out"),
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


@dataclass
class Cell:
    """The windows of one (group, prior, rule): advice given, held on the next window, the
    next window's precision and flagged rows where given, the reasons where withheld."""

    windows: int = 0
    given: int = 0
    held: int = 0
    precisions: list[float] = field(default_factory=list)
    flagged: list[int] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(
        self, threshold: float | None, reason: str | None, nxt: FloatArray, y: Int8Array
    ) -> None:
        self.windows += 1
        if threshold is None:
            self.reasons[short_reason(reason)] += 1
            return
        self.given += 1
        flagged = nxt >= threshold
        count = int(np.count_nonzero(flagged))
        precision = float(y[flagged].mean()) if count else float("nan")
        self.flagged.append(count)
        self.precisions.append(precision)
        self.held += bool(count) and abs(precision - TARGET) <= TOLERANCE


def short_reason(reason: str | None) -> str:
    """A withheld advice's reason, in a word or two, for the table."""
    text = reason or "no threshold meets the objective"
    if text.startswith("the target would not hold"):
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


def run_model(family: str, reference_size: tuple[int, float], seed: int) -> dict[Key, Cell]:
    """One model: its reference, then a pair of windows at each prior, judged by both rules.
    Keys: (family's group, prior, "before" | "after")."""
    rng = np.random.default_rng(seed)
    group = FAMILIES[family][1]
    rows, reference_prior = reference_size
    reference = rank(*draw(rng, family, rows, reference_prior))
    cells: dict[Key, Cell] = {}
    for prior in PRIORS:
        scores, labels = draw(rng, family, WINDOW_ROWS, prior)
        nxt, next_labels = draw(rng, family, WINDOW_ROWS, prior)
        n_pos = int(labels.sum())
        before = advise_before(reference, n_pos / labels.size) if n_pos >= 30 else None
        cells.setdefault((group, prior, "before"), Cell()).add(
            before, None if n_pos >= 30 else "predictions labelled", nxt, next_labels
        )
        prepared = prepare(scores, labels, score_kind="score")
        advice: dict[str, Any] = window_advice(
            objective=OBJECTIVE,
            threshold=0.5,
            prepared=prepared,
            result={"n": labels.size, "n_pos": n_pos, "prior": n_pos / labels.size},
            unlabelled=0,
            reference=reference,
            estimated=None,
        )
        cells.setdefault((group, prior, "after"), Cell()).add(
            advice["threshold"], advice["reason"], nxt, next_labels
        )
    return cells


def run(
    models: int, *, families: tuple[str, ...] = tuple(FAMILIES), seed: int = 0
) -> dict[Key, Cell]:
    """``models`` models per family and reference size, every cell merged."""
    total: dict[Key, Cell] = {}
    for f, family in enumerate(families):
        for r, size in enumerate(REFERENCES):
            for m in range(models):
                cells = run_model(family, size, seed * 1_000_003 + f * 10_007 + r * 1_009 + m)
                for key, cell in cells.items():
                    merged = total.setdefault(key, Cell())
                    merged.windows += cell.windows
                    merged.given += cell.given
                    merged.held += cell.held
                    merged.precisions += cell.precisions
                    merged.flagged += cell.flagged
                    merged.reasons += cell.reasons
    return total
