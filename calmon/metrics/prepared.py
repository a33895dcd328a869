"""The prepared evaluation set, and the checks of the evaluation options.

:func:`prepare` validates scores and labels once and sorts each class once, giving a
:class:`PreparedSet` with its ranking (:mod:`calmon.metrics.ranking`); the metrics of
:mod:`calmon.metrics.evaluation`, the intervals of :mod:`calmon.metrics.intervals`, the threshold
cuts of :mod:`calmon.metrics.resampling`, the drift split of :mod:`calmon.metrics.split` and the
service's window computation start from it. :func:`check_options` and :func:`check_pi0`
validate the options of :func:`calmon.metrics.evaluate` (π0 wherever it is given: the API's
model configuration, the CLI). See ``docs/reference/metrics.md``.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calmon.arrays import BoolArray, FloatArray
from calmon.metrics.probability import ECE_BINS
from calmon.metrics.ranking import Ranking, rank_sorted

ScoreKind = Literal["probability", "score"]

SCORE_KINDS = ("probability", "score")
RELIABILITY_STRATEGIES = ("uniform", "quantile")

#: smallest π0 accepted: 2^126·(1 - π0)/π0 is finite from here on (see :func:`check_pi0`)
MIN_PI0 = 4.8e-271


@dataclass(frozen=True, slots=True)
class PreparedSet:
    """A validated evaluation set, sorted once.

    Attributes:
        scores: (n,) float64, finite (in [0, 1] for probability models).
        is_pos: (n,) bool, the labels.
        pos_sorted, neg_sorted: (n_pos,), (n_neg,) each class's scores ascending.
        ranking: the positive blocks built from them.
    """

    scores: FloatArray
    is_pos: BoolArray
    pos_sorted: FloatArray
    neg_sorted: FloatArray
    ranking: Ranking


def check_options(
    *,
    threshold: float,
    pi0: Sequence[float],
    score_kind: str,
    reliability_bins: int = ECE_BINS,
    reliability_strategy: str = "uniform",
) -> tuple[float, ...]:
    """Validate the options of :func:`evaluate`; return the π0 values as floats.

    Raises ValueError naming the option (e.g. "pi0[1] is 1.5; each pi0 must be in (0, 1)").
    """
    if score_kind not in SCORE_KINDS:
        raise ValueError(f"score_kind is {score_kind!r}; must be 'probability' or 'score'")
    if reliability_strategy not in RELIABILITY_STRATEGIES:
        raise ValueError(
            f"reliability_strategy is {reliability_strategy!r}; must be 'uniform' or 'quantile'"
        )
    if (
        isinstance(reliability_bins, bool)
        or not isinstance(reliability_bins, int | np.integer)
        or reliability_bins < 1
    ):
        raise ValueError(f"reliability_bins is {reliability_bins!r}; must be an integer ≥ 1")
    try:
        tau = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold is {threshold!r}; must be a finite number") from None
    if not math.isfinite(tau):
        raise ValueError(f"threshold is {tau!r}; must be a finite number")
    if isinstance(pi0, str | bytes) or not isinstance(pi0, Sequence | np.ndarray):
        raise ValueError(f"pi0 is {pi0!r}; must be a list of numbers in (0, 1), such as [0.5]")
    return tuple(check_pi0(value, where=f"pi0[{i}]") for i, value in enumerate(pi0))


def check_pi0(value: object, *, where: str = "pi0") -> float:
    """One reference prior π0 as a float, or ValueError saying what is wrong with ``where``.

    π0 must be a real number (not a string or a bool), a normal float in (0, 1), and such that
    the calibration ratio r = π(1 - π0)/(π0(1 - π)) stays finite even multiplied by a count
    of false positives, for any set: π/(1 - π) ≤ n - 1 and FP ≤ n with n < 2^63 rows, so
    r·FP < 2^126·(1 - π0)/π0, which must be finite. That refuses subnormals and π0 below
    :data:`MIN_PI0` (4.8e-271), where r·FP would overflow and the calibrated metrics would mix 0 and
    undefined values. Every entry point (:func:`evaluate`, the model configuration of the API,
    the CLI's ``--pi0``) validates π0 with this function.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{where} is {value!r}; each pi0 must be a number in (0, 1)")
    p = float(value)
    if not 0.0 < p < 1.0:
        raise ValueError(f"{where} is {p!r}; each pi0 must be in (0, 1)")
    if p < sys.float_info.min:
        raise ValueError(f"{where} is {p!r}; each pi0 must be a normal float, not subnormal")
    if p < MIN_PI0:
        raise ValueError(
            f"{where} is {p!r}; each pi0 must be at least {MIN_PI0!r}, or the calibration "
            "ratio overflows"
        )
    return p


def pi0_key(p: float) -> str:
    """The key of π0 ``p`` among calibrated values (and their intervals): ``repr(float(p))``,
    the shortest text that reads back as the same float."""
    return repr(float(p))


def prepare(scores: npt.ArrayLike, labels: npt.ArrayLike, *, score_kind: str) -> PreparedSet:
    """Validate ``scores`` and ``labels`` and sort each class once.

    Raises ValueError saying what and where: non-1-D arrays, length mismatch, a label other
    than 0/1 ("labels[3] is 2; labels must be 0 or 1"), a NaN or infinite score
    ("scores[17] is nan; scores must be finite"), a probability score outside [0, 1].
    """
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scores must be numbers: {exc}") from None
    y = np.asarray(labels)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {s.shape}")
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {y.shape}")
    if s.size != y.size:
        raise ValueError(f"scores has {s.size} values but labels has {y.size}")
    is_pos = _label_mask(y)
    pos_sorted = np.sort(s[is_pos])
    neg_sorted = s[~is_pos]
    neg_sorted.sort()
    ends = [arr[i] for arr in (pos_sorted, neg_sorted) if arr.size for i in (0, -1)]
    if ends:
        # NaN sorts last and ±inf sit at the ends, so the ends of each class decide.
        if not all(math.isfinite(v) for v in ends):
            bad = int(np.flatnonzero(~np.isfinite(s))[0])
            raise ValueError(f"scores[{bad}] is {s[bad].item()!r}; scores must be finite")
        if score_kind == "probability" and (min(ends) < 0.0 or max(ends) > 1.0):
            bad = int(np.flatnonzero((s < 0.0) | (s > 1.0))[0])
            raise ValueError(
                f"scores[{bad}] is {s[bad].item()!r}; probability scores must be in [0, 1]"
            )
    return PreparedSet(
        scores=s,
        is_pos=is_pos,
        pos_sorted=pos_sorted,
        neg_sorted=neg_sorted,
        ranking=rank_sorted(pos_sorted, neg_sorted),
    )


def _label_mask(y: npt.NDArray[Any]) -> BoolArray:
    if y.dtype == np.bool_:
        return y
    with np.errstate(invalid="ignore"):
        try:
            is_pos = np.asarray(y == 1, dtype=bool)
            is_neg_count = int(np.count_nonzero(y == 0))
        except (TypeError, ValueError):
            is_pos = np.zeros(y.shape, dtype=bool)
            is_neg_count = -1
    if is_neg_count + int(np.count_nonzero(is_pos)) != y.size:
        good = np.zeros(y.shape, dtype=bool)
        for value in (0, 1):
            with contextlib.suppress(TypeError, ValueError):
                good |= np.asarray(y == value, dtype=bool)
        bad = int(np.flatnonzero(~good)[0])
        raise ValueError(f"labels[{bad}] is {y[bad].item()!r}; labels must be 0 or 1")
    return is_pos
