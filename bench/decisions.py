"""The study of pooled decisions at few positives (a script, not a test): the table of
``docs/metrics.md`` ("Decisions at few positives").

    .venv/bin/python -m bench.decisions [--models 40] [--save runs.pickle]

Runs the regimes of ``tests/unit/metrics/decision_study.py`` (pure prior shifts times 1/3 and 3
over a week of hourly windows; likelihood drifts lowering the calibrated AP by 20% over the
day after they start, against a reference of two days and, at 20 positives an hour, of one)
and prints, per regime and page level (the z of the positives' shift test), the share of
models paged, paged within 24 hours, the median hours to the first page, and the coverage of
the decision's intervals of both parts of the AP change.
``--load`` re-summarises a saved run at other page levels without computing it again;
``--kind drift --hours 48 --coverage-every 3`` measures the coverage on more decisions.
"""

from __future__ import annotations

import argparse
import pickle
import time
from statistics import NormalDist

from tests.unit.metrics.decision_study import (
    COVERAGE_EVERY,
    RARE_FAMILIES,
    ModelRun,
    Regime,
    run_regime,
    summarise,
)

WEEK = 168
DRIFT_HOURS = 24
LEVELS = (3.09, 3.29, 3.5, 3.72)


def regimes(kind: str = "all") -> list[tuple[Regime, int]]:
    """(regime, hours after the change) of the study: ``kind`` "shift" (the pure prior
    shifts), "drift" (the likelihood drifts) or "all"."""
    out: list[tuple[Regime, int]] = []
    if kind in ("all", "shift"):
        for family in RARE_FAMILIES:
            for factor in (1 / 3, 3.0):
                out.append((Regime(family, 0.005, 20, factor=factor), WEEK))
    if kind not in ("all", "drift"):
        return out
    for family in RARE_FAMILIES:
        for prior in (0.002, 0.01):
            for positives in (10, 20, 60):
                out.append((Regime(family, prior, positives, drift=True), DRIFT_HOURS))
            day = Regime(family, prior, 20, drift=True, reference_hours=24)
            out.append((day, DRIFT_HOURS))
    return out


def _print(results: list[tuple[Regime, list[ModelRun]]]) -> None:
    print(
        "| regime | z | paged | paged ≤ 24 h | median h to page | cov. prior "
        "| cov. likelihood | median windows |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for regime, runs in results:
        for z in LEVELS:
            r = summarise(runs, p=1.0 - NormalDist().cdf(z))
            median = "—" if r.median_first_page is None else f"{r.median_first_page:.0f}"
            print(
                f"| {regime.name} | {z} | {r.paged / r.models:.3f} | "
                f"{r.paged_within_24h / r.models:.3f} | {median} | "
                f"{r.coverage('prior'):.3f} | {r.coverage('likelihood'):.3f} | "
                f"{r.median_windows:.0f} |",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=40)
    parser.add_argument("--save", default=None, help="pickle the runs to this file")
    parser.add_argument("--load", default=None, help="summarise runs pickled by --save")
    parser.add_argument("--kind", choices=("all", "shift", "drift"), default="all")
    parser.add_argument(
        "--hours",
        type=int,
        default=None,
        help="hours after the change (default: a week for "
        "shifts, a day for drifts); a longer drift gives more decisions for the coverage",
    )
    parser.add_argument(
        "--coverage-every",
        type=int,
        default=COVERAGE_EVERY,
        help="compute every n-th hour's decision with its intervals",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    results: list[tuple[Regime, list[ModelRun]]]
    if args.load:
        with open(args.load, "rb") as handle:
            results = pickle.load(handle)
    else:
        results = []
        for index, (regime, hours) in enumerate(regimes(args.kind)):
            runs = run_regime(
                regime,
                args.models,
                args.hours or hours,
                seed=20261126 + index,
                coverage_every=args.coverage_every,
            )
            results.append((regime, runs))
            print(f"{regime.name}: {time.perf_counter() - started:.0f} s", flush=True)
            if args.save:
                with open(args.save, "wb") as handle:
                    pickle.dump(results, handle)
    _print(results)
    print(f"\n{args.models} models per regime, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
