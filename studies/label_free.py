"""The study of π̂ and the label-shift check at rare priors (``docs/measurements/label-free.md``,
"Rare priors"): π̂'s bias and coverage under pure label shift, and whether a window whose negatives'
scores rose is flagged or covered.

Families. Each draws a latent score per row, class by class, then maps it to a score:

- design (the methods were shaped on these): ``beta`` (logits of Beta(5, 2) positives and
  Beta(2, 5) negatives, continuous scores) and ``gumbel`` (positives' logits N(1, 1.2²),
  negatives' Gumbel(-1, 0.8): a heavy right tail of negatives; scores rounded to 2 decimals);
- held out (only evaluated): ``binormal`` (N(1.5, 1) against N(0, 1), through a logistic,
  4 decimals), ``noise`` (label noise with a rare component in each class: 9% of positives
  score like negatives, 1% of negatives like positives at N(2.5, 1); 4 decimals) and ``tree``
  (a gradient-boosted tree on a 20-feature problem, its probabilities rounded to 3 decimals:
  ties; the latent score is the features' projection on the positives' mean) and ``student``
  (heavy tails in both classes: logits 2 + t₃ against t₃, 4 decimals; added after the
  estimator's last change, to test it).

Scenarios: ``label_shift`` (P(score | y) unchanged) and ``negatives_rise`` (g, δ): a share g of
the negatives has its latent score raised by δ latent standard deviations toward the positives
(for the tree: the features of those negatives moved by δ/|μ| along the positives' mean μ),
a covariate shift reaching a minority of the negatives.

A cell is (family, reference rows, prior, scenario): ``references`` references of the given
size at :data:`REFERENCE_PRIOR`, each with ``windows`` windows of :data:`WINDOW_ROWS` rows.
Truth is each window's measured positive ratio. Used by ``bench/label_free_rare.py`` (the
docs' table) and ``test_label_free_rare_study.py`` (a small run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray
from calmon.metrics.label_free import LabelShiftReference, assess_window, label_shift_reference
from calmon.metrics.ranking import rank

DESIGN: Final = ("beta", "gumbel")
HELD_OUT: Final = ("binormal", "noise", "tree", "student")
REFERENCE_PRIOR: Final = 0.1
WINDOW_ROWS: Final = 20_000
#: (share of negatives, latent shift) of the negatives_rise scenarios
RISES: Final = ((0.01, 3.0), (0.02, 2.0), (0.05, 1.0))
FEATURES: Final = 20
SEPARATION: Final = np.r_[np.full(6, 0.55), np.zeros(FEATURES - 6)]
#: scored rows per class of the tree's pools (drawn from with replacement)
POOL: Final = 200_000

Labels = npt.NDArray[np.bool_]
Drawer = Callable[[np.random.Generator, int, float, float, float], tuple[FloatArray, Labels]]


def _logistic(z: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 / (1.0 + np.exp(-z))
    return out


def _latent(name: str, rng: np.random.Generator, n: int, positive: bool) -> FloatArray:
    if name == "beta":
        b = rng.beta(5.0, 2.0, n) if positive else rng.beta(2.0, 5.0, n)
        out: FloatArray = np.log(b / (1.0 - b))
        return out
    if name == "gumbel":
        return rng.normal(1.0, 1.2, n) if positive else rng.gumbel(-1.0, 0.8, n)
    if name == "binormal":
        return rng.normal(1.5 if positive else 0.0, 1.0, n)
    if name == "student":
        out = rng.standard_t(3.0, n) + (2.0 if positive else 0.0)
        return out
    rare = rng.random(n) < (0.09 if positive else 0.01)
    common, other = (2.5, 0.0) if positive else (0.0, 2.5)
    return np.where(rare, rng.normal(other, 1.0, n), rng.normal(common, 1.0, n))


def _score(name: str, z: FloatArray) -> FloatArray:
    if name == "beta":
        return _logistic(z)
    if name == "gumbel":
        return np.round(_logistic(z), 2)
    return np.round(_logistic(z - 2.0), 4)


@cache
def family(name: str) -> Drawer:
    """(rng, rows, prior, share g, shift δ) -> scores (n,), labels (n,) of a family."""
    if name == "tree":
        return _tree()

    def drawer(
        rng: np.random.Generator, n: int, prior: float, share: float, shift: float
    ) -> tuple[FloatArray, Labels]:
        y = rng.random(n) < prior
        n_pos = int(y.sum())
        latent_neg = _latent(name, rng, n - n_pos, False)
        latent_neg += shift * (rng.random(n - n_pos) < share)
        scores = np.empty(n)
        scores[y] = _score(name, _latent(name, rng, n_pos, True))
        scores[~y] = _score(name, latent_neg)
        return scores, y

    return drawer


def _tree() -> Drawer:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    y = rng.random(30_000) < REFERENCE_PRIOR
    x = rng.standard_normal((30_000, FEATURES)) + np.outer(y, SEPARATION)
    model: Any = HistGradientBoostingClassifier(max_iter=60, max_leaf_nodes=8, random_state=0)
    unit = SEPARATION / np.linalg.norm(SEPARATION)
    pools: dict[str, FloatArray] = {}
    with threadpool_limits(1):
        model.fit(x, y)
        for kind, mean in (("pos", SEPARATION), ("neg", 0.0 * SEPARATION)):
            features = rng.standard_normal((POOL, FEATURES)) + mean
            pools[kind] = np.round(model.predict_proba(features)[:, 1], 3)
        for _, shift in RISES:
            features = rng.standard_normal((POOL, FEATURES)) + shift * unit
            pools[f"rise{shift}"] = np.round(model.predict_proba(features)[:, 1], 3)

    def drawer(
        rng: np.random.Generator, n: int, prior: float, share: float, shift: float
    ) -> tuple[FloatArray, Labels]:
        y = rng.random(n) < prior
        n_pos = int(y.sum())
        scores = np.empty(n)
        scores[y] = rng.choice(pools["pos"], n_pos)
        negatives = rng.choice(pools["neg"], n - n_pos)
        if share > 0:
            risen = rng.random(n - n_pos) < share
            negatives[risen] = rng.choice(pools[f"rise{shift}"], int(risen.sum()))
        scores[~y] = negatives
        return scores, y

    return drawer


@dataclass(frozen=True, slots=True)
class Cell:
    """Window counts of one (family, reference rows, prior, scenario) cell."""

    family: str
    reference_rows: int
    prior: float
    scenario: str
    windows: int
    flagged: int
    covered: int
    safe: int
    unresolved: int
    estimated: float
    measured: float

    @property
    def bias(self) -> float:
        """Relative bias of π̂: Σ π̂ / Σ π - 1 over the windows, π each window's measured
        ratio (not the mean of π̂/π, which 1/π inflates by about 1/(positives) alone)."""
        return self.estimated / self.measured - 1.0


def reference_of(draw: Drawer, rng: np.random.Generator, rows: int) -> LabelShiftReference:
    """A labelled reference of ``rows`` rows at :data:`REFERENCE_PRIOR`."""
    scores, labels = draw(rng, rows, REFERENCE_PRIOR, 0.0, 0.0)
    built = label_shift_reference(rank(scores, labels))
    assert built is not None
    return built


def run_cell(
    name: str,
    *,
    reference_rows: int,
    prior: float,
    rise: tuple[float, float] | None,
    references: int,
    windows: int,
    seed: int,
) -> Cell:
    """Assess ``references`` times ``windows`` windows of one cell as a window record would."""
    draw = family(name)
    rng = np.random.default_rng(seed)
    share, shift = rise or (0.0, 0.0)
    flagged = covered = safe = unresolved = 0
    estimated = measured = 0.0
    count = 0
    for _ in range(references):
        reference = reference_of(draw, rng, reference_rows)
        for _ in range(windows):
            scores, labels = draw(rng, WINDOW_ROWS, prior, share, shift)
            truth = float(labels.mean())
            if truth == 0.0:
                continue
            found = assess_window(reference, np.sort(scores), seed=int(rng.integers(2**31)))
            assert found is not None
            estimate, check = found
            flag = check.holds is False
            holds = estimate.lower <= truth <= estimate.upper
            flagged += flag
            covered += holds
            safe += flag or holds
            unresolved += not estimate.resolved
            estimated += estimate.ratio
            measured += truth
            count += 1
    scenario = "label_shift" if rise is None else f"negatives_rise {share:g}/{shift:g}"
    return Cell(
        name,
        reference_rows,
        prior,
        scenario,
        count,
        flagged,
        covered,
        safe,
        unresolved,
        estimated,
        measured,
    )
