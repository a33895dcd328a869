"""The label-shift check and π̂'s interval under pure label shift and under its violations.

Held-out score families (none was used to build the estimator, which was tuned on binormal
scores): a gradient-boosted tree (scikit-learn's HistGradientBoosting, scores rounded to 3
decimals: ties), a logistic regression, both trained on a 20-feature problem at prior 0.1, and
a direct two-beta family (positives Beta(5, 2), negatives Beta(2, 5)). The reference holds
50,000 labelled rows at prior 0.1; each window is drawn at a prior in :data:`PRIORS` under one
:data:`SCENARIOS`:

- ``label_shift``: P(score | y) unchanged, the assumption holds;
- ``positives_fall``: a change inside the positive class that lowers its scores (one feature
  of the positives shifted by -1 SD; Beta(5, 2) -> Beta(4, 2.5));
- ``negatives_rise``: a change inside the negative class that raises its false-positive rate
  (one feature of the negatives shifted by +1 SD; Beta(2, 5) -> Beta(3, 4));
- ``feature_noise``: noise on every feature (SD 0.8; beta family: scores pulled halfway to
  0.5), a weaker model;
- ``logit_shift``: every score's logit raised by 1 (ranking and ROC AUC unchanged);
- ``power``: every score s replaced by s^0.5 (a monotone distortion).

The fitted families score :data:`POOL` rows per class and scenario once; windows and
references draw from these pools with replacement (the pools are the population).

Each family is studied with ``--references`` independent references (the check's false
rejections are correlated across windows that share one reference). Per cell (family,
scenario, prior, rows), over every reference's windows: the share of windows where the check
rejects, where π̂'s 95% interval holds the window's measured ratio, and where either happens.
The window's measured ratio (its labels' share of positives) is the truth. Used by
``bench/label_shift.py`` (the docs' table) and ``test_label_shift_study.py`` (a small run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray
from calmon.metrics.label_free import LabelShiftReference, assess_window, label_shift_reference
from calmon.metrics.ranking import rank

PRIORS: Final = (0.005, 0.02, 0.1, 0.4)
SCENARIOS: Final = (
    "label_shift",
    "positives_fall",
    "negatives_rise",
    "feature_noise",
    "logit_shift",
    "power",
)
FAMILIES: Final = ("tree", "logistic", "beta")
REFERENCE_ROWS: Final = 50_000
REFERENCE_PRIOR: Final = 0.1
FEATURES: Final = 20
#: scored rows per class and scenario of a fitted family, drawn from with replacement
POOL: Final = 200_000
#: the positives' mean: six informative features
SEPARATION: Final = np.r_[np.full(6, 0.55), np.zeros(FEATURES - 6)]

Labels = npt.NDArray[np.bool_]
Scorer = Callable[[np.random.Generator, int, float, str], tuple[FloatArray, Labels]]


def _features(
    rng: np.random.Generator, n: int, prior: float, scenario: str
) -> tuple[FloatArray, Labels]:
    y = rng.random(n) < prior
    x = rng.standard_normal((n, FEATURES))
    x[y] += SEPARATION
    if scenario == "positives_fall":
        x[y, 0] -= 1.0
    elif scenario == "negatives_rise":
        x[~y, 0] += 1.0
    elif scenario == "feature_noise":
        x += 0.8 * rng.standard_normal(x.shape)
    return x, y


def _distort(scores: FloatArray, scenario: str) -> FloatArray:
    if scenario == "logit_shift":
        clipped = np.clip(scores, 1e-9, 1.0 - 1e-9)
        out: FloatArray = 1.0 / (1.0 + np.exp(-(np.log(clipped / (1.0 - clipped)) + 1.0)))
        return out
    if scenario == "power":
        return np.sqrt(scores)
    return scores


def family(name: str, *, seed: int = 0) -> Scorer:
    """The scorer of a family: (rng, rows, prior, scenario) -> scores (n,), labels (n,)."""
    if name == "beta":

        def beta(
            rng: np.random.Generator, n: int, prior: float, scenario: str
        ) -> tuple[FloatArray, Labels]:
            y = rng.random(n) < prior
            pos_shape = (4.0, 2.5) if scenario == "positives_fall" else (5.0, 2.0)
            neg_shape = (3.0, 4.0) if scenario == "negatives_rise" else (2.0, 5.0)
            s = np.where(y, rng.beta(*pos_shape, n), rng.beta(*neg_shape, n))
            if scenario == "feature_noise":
                s = 0.5 * s + 0.25
            return _distort(s, scenario), y

        return beta
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(seed)
    x, y = _features(rng, 30_000, REFERENCE_PRIOR, "label_shift")
    model: Any = (
        HistGradientBoostingClassifier(max_iter=60, max_leaf_nodes=8, random_state=seed)
        if name == "tree"
        else LogisticRegression(max_iter=1000)
    )
    pools: dict[tuple[str, bool], FloatArray] = {}
    with threadpool_limits(1):
        model.fit(x, y)
        for scenario in SCENARIOS:
            for positive in (True, False):
                features, _ = _features(rng, POOL, 1.0 if positive else 0.0, scenario)
                scores = np.asarray(model.predict_proba(features)[:, 1], dtype=np.float64)
                if name == "tree":
                    scores = np.round(scores, 3)
                pools[scenario, positive] = _distort(scores, scenario)

    def pooled_scores(
        rng: np.random.Generator, n: int, prior: float, scenario: str
    ) -> tuple[FloatArray, Labels]:
        labels = rng.random(n) < prior
        n_pos = int(labels.sum())
        scores = np.empty(n)
        scores[labels] = rng.choice(pools[scenario, True], n_pos)
        scores[~labels] = rng.choice(pools[scenario, False], n - n_pos)
        return scores, labels

    return pooled_scores


@dataclass(frozen=True, slots=True)
class Cell:
    """One (family, scenario, prior, rows) cell: window counts."""

    family: str
    scenario: str
    prior: float
    rows: int
    windows: int
    rejected: int
    covered: int
    either: int
    ratio_mean: float

    @property
    def rejection_rate(self) -> float:
        return self.rejected / self.windows

    @property
    def safe_rate(self) -> float:
        """Share of windows flagged or with an interval holding the measured ratio."""
        return self.either / self.windows


def reference_of(scorer: Scorer, rng: np.random.Generator) -> LabelShiftReference:
    """A labelled reference of :data:`REFERENCE_ROWS` rows at :data:`REFERENCE_PRIOR`."""
    scores, labels = scorer(rng, REFERENCE_ROWS, REFERENCE_PRIOR, "label_shift")
    built = label_shift_reference(rank(scores, labels))
    assert built is not None
    return built


def run_cell(
    name: str,
    scorer: Scorer,
    reference: LabelShiftReference,
    *,
    scenario: str,
    prior: float,
    rows: int,
    windows: int,
    rng: np.random.Generator,
) -> Cell:
    """Draw ``windows`` windows of one cell and assess each as a window record would."""
    rejected = covered = either = 0
    ratios: list[float] = []
    for _ in range(windows):
        scores, labels = scorer(rng, rows, prior, scenario)
        found = assess_window(reference, np.sort(scores), seed=int(rng.integers(2**31)))
        assert found is not None
        estimate, check = found
        truth = float(labels.mean())
        flagged = check.holds is False
        holds_truth = estimate.lower <= truth <= estimate.upper
        rejected += flagged
        covered += holds_truth
        either += flagged or holds_truth
        ratios.append(estimate.ratio)
    return Cell(
        name, scenario, prior, rows, windows, rejected, covered, either, float(np.mean(ratios))
    )


def study(
    *,
    families: tuple[str, ...],
    rows: tuple[int, ...],
    windows: int,
    references: int,
    scenarios: tuple[str, ...] = SCENARIOS,
    priors: tuple[float, ...] = PRIORS,
    seed: int = 0,
) -> Iterator[Cell]:
    """Every cell of the study, family by family, each pooled over ``references``
    references with ``windows`` windows each."""
    for name in families:
        scorer = family(name, seed=seed)
        rng = np.random.default_rng(seed + 1)
        built = [reference_of(scorer, rng) for _ in range(references)]
        for size in rows:
            for scenario in scenarios:
                for prior in priors:
                    cells = [
                        run_cell(
                            name,
                            scorer,
                            reference,
                            scenario=scenario,
                            prior=prior,
                            rows=size,
                            windows=windows,
                            rng=rng,
                        )
                        for reference in built
                    ]
                    yield pooled(cells)


def pooled(cells: list[Cell]) -> Cell:
    """One cell from the same cell under several references."""
    first = cells[0]
    return Cell(
        first.family,
        first.scenario,
        first.prior,
        first.rows,
        sum(c.windows for c in cells),
        sum(c.rejected for c in cells),
        sum(c.covered for c in cells),
        sum(c.either for c in cells),
        float(np.mean([c.ratio_mean for c in cells])),
    )
