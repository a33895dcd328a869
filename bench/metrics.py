"""Speed and memory of the metric engine (a script, not a test).

    .venv/bin/python bench/metrics.py [--sizes 1000000 10000000] [--repeats 3]

On random predictions with π = 0.01, without and with ties (scores rounded to 4 decimals),
prints, each the median of interleaved repeats (the machine may be shared, so every timing of
a ratio is taken in the same rounds):
- the full catalogue (regular, 3 values of π0, probability metrics, reliability) against
  ``np.sort`` of the same scores (target ≤ 3x);
- scikit-learn's set (``roc_auc_score``, ``average_precision_score``, ``brier_score_loss``,
  ``calibration_curve``, precision/recall/F1 at the threshold) against ours (target ≥ 10x);
- ``evaluate(intervals=True)`` against ``evaluate()`` on 10^6 rows (target ≤ 10x);
- the drift split with the intervals of both parts against the split alone, a window of 10^6
  rows (π = 0.005) against a reference of 10^6 rows (π = 0.01) (target ≤ 10x);
- the tracemalloc peak of ``evaluate`` on the largest size (target ≤ 1 GiB).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    average_precision_score,
    brier_score_loss,
    precision_recall_fscore_support,
    roc_auc_score,
)

from calmon.metrics import evaluate, split_from_arrays

PRIOR = 0.01
PI0 = (0.5, 0.1, 0.01)
THRESHOLD = 0.5
GIB = 1 << 30


def make_set(
    n: int, *, ties: bool, seed: int = 0, prior: float = PRIOR
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]]:
    """n predictions of a reasonable model: logistic of N(2.5·y - 3, 1), π = ``prior``."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < prior).astype(np.int8)
    scores = 1.0 / (1.0 + np.exp(-(rng.normal(size=n) + 2.5 * labels - 3.0)))
    if ties:
        scores = np.round(scores, 4)
    return scores, labels


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median wall time (s) of each function, run round-robin ``repeats`` times."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def ours(
    scores: npt.NDArray[np.float64], labels: npt.NDArray[np.int8], *, intervals: bool = False
) -> dict[str, Any]:
    return evaluate(scores, labels, threshold=THRESHOLD, pi0=PI0, intervals=intervals, seed=1)


def split(
    window: tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]],
    reference: tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]],
    *,
    intervals: bool = False,
) -> dict[str, Any]:
    return split_from_arrays(*window, *reference, threshold=THRESHOLD, intervals=intervals, seed=1)


def sklearn_set(scores: npt.NDArray[np.float64], labels: npt.NDArray[np.int8]) -> None:
    roc_auc_score(labels, scores)
    average_precision_score(labels, scores)
    brier_score_loss(labels, scores)
    calibration_curve(labels, scores, n_bins=10)
    precision_recall_fscore_support(labels, scores >= THRESHOLD, average="binary")


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def intervals_cost(title: str, run: Callable[..., Any], repeats: int) -> None:
    """Print the time of ``run(intervals=True)`` against ``run()``: at most 10 times."""
    t = interleaved({"point": run, "intervals": partial(run, intervals=True)}, repeats)
    ratio = t["intervals"] / t["point"]
    print(
        f"{title}: {t['intervals'] * 1e3:.1f} ms vs {t['point'] * 1e3:.1f} ms = {ratio:.2f}x "
        f"(≤ 10: {verdict(ratio <= 10)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**6, 10**7])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print(f"π = {PRIOR}, π0 = {PI0}, threshold {THRESHOLD}; median of {args.repeats} rounds")
    for n in args.sizes:
        for ties in (False, True):
            scores, labels = make_set(n, ties=ties)
            distinct = np.unique(scores).size
            ours(scores, labels)  # warm-up
            t = interleaved(
                {
                    "sort": partial(np.sort, scores),
                    "ours": partial(ours, scores, labels),
                    "sklearn": partial(sklearn_set, scores, labels),
                },
                args.repeats,
            )
            catalogue = t["ours"] / t["sort"]
            speedup = t["sklearn"] / t["ours"]
            print(
                f"n={n:>9,} ties={'yes' if ties else 'no ':3} ({distinct:>9,} distinct): "
                f"sort {t['sort'] * 1e3:7.1f} ms | evaluate {t['ours'] * 1e3:7.1f} ms "
                f"= {catalogue:4.2f}x sort (≤ 3: {verdict(catalogue <= 3)}) | "
                f"scikit-learn {t['sklearn'] * 1e3:8.1f} ms = {speedup:5.1f}x ours "
                f"(≥ 10: {verdict(speedup >= 10)})"
            )

    try:
        import calmon.metrics.intervals  # noqa: F401
    except ImportError:
        print("intervals: calmon.metrics.intervals is not available; skipped")
    else:
        for ties in (False, True):
            scores, labels = make_set(10**6, ties=ties)
            intervals_cost(
                f"intervals n=1,000,000 ties={'yes' if ties else 'no'}",
                partial(ours, scores, labels),
                args.repeats,
            )
        for ties in (False, True):
            window = make_set(10**6, ties=ties, seed=1, prior=PRIOR / 2)
            reference = make_set(10**6, ties=ties, seed=2)
            intervals_cost(
                f"split intervals n=1,000,000 vs 1,000,000 ties={'yes' if ties else 'no'}",
                partial(split, window, reference),
                args.repeats,
            )

    n = max(args.sizes)
    for ties in (False, True):
        scores, labels = make_set(n, ties=ties)
        tracemalloc.start()
        ours(scores, labels)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(
            f"peak memory of evaluate, n={n:,} ties={'yes' if ties else 'no'}: "
            f"{peak / 2**20:.0f} MiB beyond the inputs "
            f"({(scores.nbytes + labels.nbytes) / 2**20:.0f} MiB) (≤ 1 GiB: {verdict(peak <= GIB)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
