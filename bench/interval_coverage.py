"""The coverage tables of ``docs/measurements/intervals.md`` (a script, not a test).

    .venv/bin/python -m bench.interval_coverage [--sets 1500]
    .venv/bin/python -m bench.interval_coverage --split [--sets 1500]
    .venv/bin/python -m bench.interval_coverage --means [--sets 2000]
    .venv/bin/python -m bench.interval_coverage --noisy [--means] [--sets 300] [--before]
        [--family NAME] [--prior P] [--positives N] [--seed S] [--loss-rows 1] [--ci]

Runs the regimes of the coverage study (``studies/coverage.py``, the same
seeds as ``test_interval_coverage.py``) and prints, per regime (a row), the share of sets whose
published 95% interval covers the population value, as a Markdown table (``—`` where the
metric publishes no interval in that regime), then the mean widths. With ``--split``, the
same for the prior and likelihood parts of the drift split (SPLIT_REGIMES, ``--sets`` pairs
per regime, by default SPLIT_PAIRS as in the test). With ``--means``, the same for the means'
intervals (MEAN_REGIMES, the study families and the held-out ones at π = 0.2). With
``--noisy``, every published metric on the families with rare components (NOISY_REGIMES;
with ``--means`` only the means, on the same sets);
``--before`` turns the unseen-row bound off (``UNSEEN_ROWS = 0``) to show what it changes;
``--loss-rows 1`` gives log loss's bound as it was before it added 1.5 rows per class;
``--family``, ``--prior`` and ``--positives`` keep only the regimes of that family, π and
expected positives (each regime keeps its seed); ``--seed`` replaces the first part of every
regime's seed (NOISY_SEED), for sets independent of the published ones. ``--ci`` adds, for
every cell, the sets that covered out of those that published and the Wilson 95% interval of
that share, which says whether a cell outside [0.93, 0.97] can be told from chance.
"""

from __future__ import annotations

import argparse
import time

from calmon.metrics import intervals
from calmon.metrics.intervals import wilson_interval
from studies.coverage import (
    ALL_MEAN_METRICS,
    MEAN_REGIMES,
    MEAN_SETS,
    METRICS,
    NOISY_REGIMES,
    REGIMES,
    SPLIT_PAIRS,
    SPLIT_PARTS,
    SPLIT_REF_PRIOR,
    SPLIT_REGIMES,
    SPLIT_WINDOW_PRIOR,
    Coverage,
    coverage,
    mean_coverage,
    population_parts,
    split_coverage,
)

NOISY_SEED = 20261128
"""First part of the seed of every regime of ``--noisy`` (the second: its index in
NOISY_REGIMES)."""


def _print_table(results: list[tuple[str, Coverage]], names: tuple[str, ...]) -> None:
    print("| regime | " + " | ".join(f"`{name}`" for name in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for regime, result in results:
        cells = [f"{result.rate(name):.3f}" if result.published[name] else "—" for name in names]
        print(f"| {regime} | " + " | ".join(cells) + " |")
    print("\nmean width:")
    for regime, result in results:
        cells = [f"{result.width[name]:.3f}" if result.published[name] else "—" for name in names]
        print(f"| {regime} | " + " | ".join(cells) + " |")


def _print_ci(results: list[tuple[str, Coverage]], names: tuple[str, ...]) -> None:
    """Per cell: covered/published and the Wilson 95% interval of the coverage."""
    print("\ncovered / published [Wilson 95% interval]:")
    for regime, result in results:
        cells = []
        for name in names:
            hits, published = result.hits[name], result.published[name]
            ci = wilson_interval(hits, published)
            cells.append("—" if ci is None else f"{hits}/{published} [{ci[0]:.3f}, {ci[1]:.3f}]")
        print(f"| {regime} | " + " | ".join(cells) + " |")


def _noisy(args: argparse.Namespace, started: float) -> int:
    """``--noisy``: every published metric on the families with rare components, the regimes
    kept by ``--family``, ``--prior`` and ``--positives``; with ``--means`` only the means
    (the same sets, no bootstrap, so much faster)."""
    sets = 300 if args.sets is None else args.sets
    results: list[tuple[str, Coverage]] = []
    for index, (family, prior, positives) in enumerate(NOISY_REGIMES):
        if (
            (args.family is not None and family.name != args.family)
            or (args.prior is not None and prior != args.prior)
            or (args.positives is not None and positives != args.positives)
        ):
            continue
        seed = [args.seed, index]
        if args.means:
            result = mean_coverage(family, prior, positives, sets, seed=seed)
        else:
            result = coverage(family, prior, positives, sets, seed=seed, means=True)
        results.append((f"{family.name}, π = {prior}, {positives} pos.", result))
        print(f"{results[-1][0]} done, {time.perf_counter() - started:.0f} s", flush=True)
    names = ALL_MEAN_METRICS if args.means else (*METRICS, *ALL_MEAN_METRICS)
    _print_table(results, names)
    if args.ci:
        _print_ci(results, names)
    print(f"\n{sets} sets per regime, {time.perf_counter() - started:.0f} s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=None)
    parser.add_argument("--split", action="store_true", help="the drift split's parts")
    parser.add_argument("--means", action="store_true", help="the means (Brier, ks_abc, ...)")
    parser.add_argument("--noisy", action="store_true", help="families with rare components")
    parser.add_argument("--before", action="store_true", help="without the unseen-row bound")
    parser.add_argument("--family", default=None, help="only this family (with --noisy)")
    parser.add_argument("--prior", type=float, default=None, help="only this π (with --noisy)")
    parser.add_argument(
        "--positives", type=int, default=None, help="only this many expected positives (--noisy)"
    )
    parser.add_argument(
        "--seed", type=int, default=NOISY_SEED, help="the noisy regimes' seeds (with --noisy)"
    )
    parser.add_argument("--ci", action="store_true", help="binomial intervals of each cell")
    parser.add_argument(
        "--loss-rows", type=float, default=None, help="log loss's unseen rows (UNSEEN_LOSS_ROWS)"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    results: list[tuple[str, Coverage]] = []
    if args.before:
        intervals.UNSEEN_ROWS = 0
    if args.loss_rows is not None:
        intervals.UNSEEN_LOSS_ROWS = args.loss_rows
    if args.noisy:
        return _noisy(args, started)
    if args.means:
        sets = MEAN_SETS if args.sets is None else args.sets
        for index, (family, positives) in enumerate(MEAN_REGIMES):
            result = mean_coverage(family, 0.2, positives, sets, seed=[20261127, index])
            results.append((f"{family.name}, π = 0.2, {positives} pos.", result))
        _print_table(results, ALL_MEAN_METRICS)
        if args.ci:
            _print_ci(results, ALL_MEAN_METRICS)
        print(f"\n{sets} sets per regime, {time.perf_counter() - started:.0f} s")
        return 0
    if args.split:
        for index, (window, reference, positives) in enumerate(SPLIT_REGIMES):
            pairs = SPLIT_PAIRS[positives] if args.sets is None else args.sets
            result = split_coverage(window, reference, positives, pairs, seed=[20261126, index])
            results.append((f"{window.name} vs {reference.name}, {positives} pos.", result))
        _print_table(results, SPLIT_PARTS)
        print("\npopulation parts:")
        for window, reference, _ in SPLIT_REGIMES[::3]:
            truth = population_parts(window, reference, SPLIT_WINDOW_PRIOR, SPLIT_REF_PRIOR)
            cells = [f"{truth[name]:+.3f}" for name in SPLIT_PARTS]
            print(f"| {window.name} vs {reference.name} | " + " | ".join(cells) + " |")
        print(f"\n{time.perf_counter() - started:.0f} s")
        return 0
    sets = 1500 if args.sets is None else args.sets
    for index, (family, prior, positives) in enumerate(REGIMES):
        result = coverage(family, prior, positives, sets, seed=[20261125, index])
        results.append((f"{family.name}, π = {prior}, {positives} pos.", result))
    _print_table(results, METRICS)
    print(f"\n{sets} sets per regime, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
