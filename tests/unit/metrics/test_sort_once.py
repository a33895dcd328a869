"""`evaluate` sorts each class of a set once, however many π0 values and metrics it computes.

Every curve metric, every π0 and the probability metrics are computed from the two sorted
class arrays of :func:`calmon.metrics.prepared.prepare` (``docs/reference/metrics.md``; the cost of
a set is its sort). A sort can hide in many places: ``np.sort``, ``ndarray.sort``, ``np.argsort``,
``np.unique``, ``np.percentile``, ``np.median``... All of NumPy's Python-level sorting
functions end in one of the array methods ``sort``, ``argsort``, ``partition`` or
``argpartition``, so a profile hook that sees those C calls, wherever they are made from,
counts every sort; ``np.lexsort`` is implemented in C and is wrapped instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from calmon.metrics import evaluate, split_from_arrays
from calmon.metrics.prepared import ScoreKind

SORTING_METHODS = frozenset({"sort", "argsort", "partition", "argpartition"})
PI0 = (0.5, 0.1, 0.01, 0.3, 0.002)


@contextmanager
def counting_sorts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Yield a list that collects (kind, size of the sorted array) of every NumPy sort made
    inside the block."""
    sorts: list[tuple[str, int]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_call":
            return
        name = getattr(arg, "__name__", None)
        owner = getattr(arg, "__self__", None)
        if name in SORTING_METHODS and isinstance(owner, np.ndarray):
            sorts.append((name, owner.size))

    lexsort = np.lexsort

    def counting_lexsort(keys: Any, *args: Any, **kwargs: Any) -> Any:
        sorts.append(("lexsort", int(np.shape(keys)[-1])))
        return lexsort(keys, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(np, "lexsort", counting_lexsort)
        previous = sys.getprofile()
        sys.setprofile(profile)
        try:
            yield sorts
        finally:
            sys.setprofile(previous)


def _binormal_set(
    n: int, prior: float, seed: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]]:
    """Probabilities of a binormal model, a fifth of them rounded to 2 decimals (ties)."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < prior).astype(np.int8)
    scores = 1.0 / (1.0 + np.exp(-(rng.normal(size=n) + 1.5 * labels - 1.0)))
    scores[: n // 5] = np.round(scores[: n // 5], 2)
    return scores, labels


SORTS: dict[str, Callable[[npt.NDArray[np.float64]], object]] = {
    "np.sort": np.sort,
    "ndarray.sort": lambda values: values.copy().sort(),
    "np.argsort": np.argsort,
    "np.unique": np.unique,
    "np.lexsort": lambda values: np.lexsort((values, values)),
    "np.partition": lambda values: np.partition(values, 3),
    "np.percentile": lambda values: np.percentile(values, 50),
    "np.median": np.median,
}


@pytest.mark.parametrize("how", list(SORTS))
def test_the_spy_sees_every_way_of_sorting(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    values = np.random.default_rng(0).random(37)
    with counting_sorts(monkeypatch) as sorts:
        SORTS[how](values)
    assert any(size == values.size for _, size in sorts), sorts


def test_the_spy_ignores_what_is_not_a_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.sort(np.random.default_rng(0).random(37))
    with counting_sorts(monkeypatch) as sorts:
        np.searchsorted(values, [0.2, 0.5])
        np.cumsum(values)
        float(values.sum())
    assert sorts == []


@pytest.mark.parametrize("score_kind", ["probability", "score"])
@pytest.mark.parametrize("pi0", [(), PI0[:1], PI0], ids=["no-pi0", "one-pi0", "five-pi0"])
def test_evaluate_sorts_each_class_once(
    monkeypatch: pytest.MonkeyPatch, pi0: tuple[float, ...], score_kind: ScoreKind
) -> None:
    scores, labels = _binormal_set(5000, 0.2, seed=1)
    n_pos = int(labels.sum())
    with counting_sorts(monkeypatch) as sorts:
        result = evaluate(scores, labels, pi0=pi0, score_kind=score_kind)
    # The result really holds the curve metrics, every π0 and the probability metrics.
    assert result["regular"]["average_precision"] is not None
    assert result["regular"]["pr_gain_auc"] is not None
    assert len(result["calibrated"]) == len(pi0)
    assert ("brier" in result["regular"]) == (score_kind == "probability")
    assert sorted(sorts) == [("sort", n_pos), ("sort", labels.size - n_pos)]


def test_split_sorts_each_class_of_each_set_once(monkeypatch: pytest.MonkeyPatch) -> None:
    window = _binormal_set(3000, 0.05, seed=2)
    reference = _binormal_set(4000, 0.2, seed=3)
    sizes = []
    for _, labels in (window, reference):
        n_pos = int(labels.sum())
        sizes += [n_pos, labels.size - n_pos]
    with counting_sorts(monkeypatch) as sorts:
        split = split_from_arrays(*window, *reference, threshold=0.5)
    assert split["average_precision"]["likelihood"] is not None
    assert sorted(sorts) == [("sort", size) for size in sorted(sizes)]
