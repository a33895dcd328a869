"""The synthetic stream: labelled probability scores whose distribution is known exactly.

Model of the data (a binormal classifier):

- a latent value z | y ~ N(µ_y, 1) with µ_0 = 0 and µ_1 = the phase's ``separation`` d, so
  ROC AUC = Φ(d / √2);
- the score is the stable period's posterior probability,
  s = sigmoid(d_s·z - d_s²/2 + logit(π_s)), where d_s, π_s are the stable phase's separation
  and prior. The map is fixed for the whole stream, so P(s | y) depends only on µ_y: the
  ``prior`` phase (π moves, d stays) is a pure prior shift, exactly, and the ``likelihood``
  phase (d shrinks, π stays) is a pure likelihood drift, exactly.

Sampling (per window of n predictions): the number of positives is Binomial(n, π); the latent
values of each class are a *stratified* sample of N(µ_y, 1) (one uniform draw inside each of
the m equal-probability slices of the class's distribution), so a window's class-conditional
score distributions lie within 1/m of the population in Kolmogorov distance and its metrics
within O(1/n_pos) of the population values of :mod:`calmon.simulation.population`. Rows are in
random order; timestamps are uniform inside the window, in microseconds, sorted.
Everything a window holds is a function of (seed, window index), so a window can be rebuilt,
and re-sent as a no-op, at any time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import NormalDist
from typing import Final

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray, IntArray
from calmon.timeline import EPOCH, window_length, window_start

_STANDARD_NORMAL: Final = NormalDist()


def separation_for_auc(auc: float) -> float:
    """The latent mean difference d with Φ(d / √2) = ``auc`` (in (0, 1))."""
    return math.sqrt(2.0) * _STANDARD_NORMAL.inv_cdf(auc)


@dataclass(frozen=True, slots=True)
class Phase:
    """One regime of the stream: its positive class ratio π and latent separation d = µ_1 - µ_0."""

    name: str
    prior: float
    separation: float


STABLE_PRIOR: Final = 0.05
SHIFTED_PRIOR: Final = 0.008
"""π of the prior-shift phase: 6.25x below the stable prior, which lowers the population AP from
0.461 to 0.176 (-62%) at the stable separation."""
STABLE_AUC: Final = 0.90
DRIFTED_AUC: Final = 0.80
"""ROC AUC of the likelihood-drift phase: population AP at π = 0.05 falls from 0.461 to 0.227."""

PHASES: Final[dict[str, Phase]] = {
    "stable": Phase("stable", STABLE_PRIOR, separation_for_auc(STABLE_AUC)),
    "prior": Phase("prior", SHIFTED_PRIOR, separation_for_auc(STABLE_AUC)),
    "likelihood": Phase("likelihood", STABLE_PRIOR, separation_for_auc(DRIFTED_AUC)),
}


def phases_for(prior: float) -> dict[str, Phase]:
    """The phases with the stable (and likelihood) prior ``prior`` in (0, 1) and the prior
    phase's moved by the same factor as :data:`PHASES`' (``calmon simulate --prior``: the
    rare-positive preset); ``phases_for(STABLE_PRIOR)`` is :data:`PHASES`."""
    if prior == STABLE_PRIOR:
        return dict(PHASES)
    return {
        "stable": Phase("stable", prior, PHASES["stable"].separation),
        "prior": Phase("prior", prior * SHIFTED_PRIOR / STABLE_PRIOR, PHASES["prior"].separation),
        "likelihood": Phase("likelihood", prior, PHASES["likelihood"].separation),
    }


REFERENCE_PHASE: Final = "stable"
DEFAULT_PHASES: Final = ("stable", "prior", "likelihood")


@dataclass(frozen=True, slots=True)
class ScoreMap:
    """The monotone map z -> s = sigmoid(slope·z + intercept) shared by every phase."""

    slope: float
    intercept: float

    @classmethod
    def posterior_of(cls, phase: Phase) -> ScoreMap:
        """The posterior P(y = 1 | z) of ``phase``: slope d, intercept -d²/2 + logit(π)."""
        d = phase.separation
        return cls(slope=d, intercept=-d * d / 2.0 + math.log(phase.prior / (1.0 - phase.prior)))

    def scores(self, latent: FloatArray) -> FloatArray:
        """s = 1 / (1 + exp(-(slope·z + intercept))), shape of ``latent``; in [0, 1]."""
        out: FloatArray = 1.0 / (1.0 + np.exp(-(self.slope * latent + self.intercept)))
        return out

    def latent_threshold(self, threshold: float) -> float:
        """The z at which the score equals ``threshold`` (s ≥ threshold iff z ≥ it); ±inf
        outside (0, 1)."""
        if threshold <= 0.0:
            return -math.inf
        if threshold >= 1.0:
            return math.inf
        return (math.log(threshold / (1.0 - threshold)) - self.intercept) / self.slope


SCORE_MAP: Final = ScoreMap.posterior_of(PHASES[REFERENCE_PHASE])


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """One window of the stream: position, phase, bounds [start, end) and prediction count."""

    index: int
    phase: Phase
    start: datetime
    end: datetime
    size: int


def plan_windows(
    *,
    phases: Sequence[Phase],
    window: str,
    windows_per_phase: int,
    per_window: int,
    now: datetime,
) -> list[WindowPlan]:
    """Consecutive windows, ``windows_per_phase`` per phase in the given order, oldest first.

    Windows are aligned as in :mod:`calmon.timeline` and the last one ends at the start of the
    window holding ``now`` (aware), so every planned window is closed at ``now``.
    """
    if windows_per_phase < 1 or per_window < 1:
        raise ValueError("windows_per_phase and per_window must be at least 1")
    length = window_length(window)
    count = windows_per_phase * len(phases)
    first = window_start(now, window) - count * length
    return [
        WindowPlan(
            index=i,
            phase=phases[i // windows_per_phase],
            start=first + i * length,
            end=first + (i + 1) * length,
            size=per_window,
        )
        for i in range(count)
    ]


def phase_bounds(plans: Sequence[WindowPlan], name: str) -> tuple[datetime, datetime] | None:
    """[start of the first, end of the last) window of phase ``name``, or None if absent."""
    chosen = [p for p in plans if p.phase.name == name]
    if not chosen:
        return None
    return chosen[0].start, chosen[-1].end


@dataclass(frozen=True, slots=True)
class WindowData:
    """The predictions of one window, in timestamp order.

    Attributes:
        plan: the window.
        ids: (n,) client ids, ``s{seed}-{window start, epoch seconds}-{position}``.
        timestamps: (n,) microseconds since the epoch, sorted, inside [start, end).
        scores: (n,) float64 probabilities.
        labels: (n,) int8, 0/1.
    """

    plan: WindowPlan
    ids: list[str]
    timestamps: IntArray
    scores: FloatArray
    labels: npt.NDArray[np.int8]

    @property
    def n_pos(self) -> int:
        """Positives in the window."""
        return int(np.count_nonzero(self.labels))


def stratified_normal(count: int, rng: np.random.Generator) -> FloatArray:
    """(count,) values of N(0, 1), one uniformly inside each slice of probability 1/count,
    ascending."""
    u = (np.arange(count) + rng.random(count)) / count
    u = np.clip(u, 1e-300, np.nextafter(1.0, 0.0))
    inv_cdf = _STANDARD_NORMAL.inv_cdf
    return np.fromiter((inv_cdf(p) for p in u.tolist()), dtype=np.float64, count=count)


def generate_window(plan: WindowPlan, *, seed: int, score_map: ScoreMap = SCORE_MAP) -> WindowData:
    """The predictions of ``plan``; a pure function of (``seed``, ``plan``)."""
    rng = np.random.default_rng([seed, plan.index])
    n = plan.size
    n_pos = int(rng.binomial(n, plan.phase.prior))
    latent = np.concatenate(
        [plan.phase.separation + stratified_normal(n_pos, rng), stratified_normal(n - n_pos, rng)]
    )
    labels = np.concatenate([np.ones(n_pos, np.int8), np.zeros(n - n_pos, np.int8)])
    order = rng.permutation(n)
    start_us = _epoch_microseconds(plan.start)
    span_us = _epoch_microseconds(plan.end) - start_us
    timestamps = np.sort(rng.integers(0, span_us, size=n, dtype=np.int64)) + start_us
    prefix = f"s{seed}-{start_us // 1_000_000}-"
    return WindowData(
        plan=plan,
        ids=[f"{prefix}{i}" for i in range(n)],
        timestamps=timestamps,
        scores=score_map.scores(latent[order]),
        labels=labels[order],
    )


def _epoch_microseconds(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)
