"""The study of pooled decisions at few positives (a script, not a test): the tables of
``docs/measurements/decisions.md``.

    .venv/bin/python -m bench.decisions [--families design|held-out|all] [--kind shift|drift|all]
        [--models 40] [--shift-models 30] [--save runs.pickle]

Runs the regimes of ``studies/decision.py``: pure prior shifts times 1/3 and 3
over a week of hourly windows at π_ref = 0.005 and 20 positives an hour; likelihood drifts
lowering the calibrated AP by 20% over the day after they start (a share of the positives
scored like the negatives, or every positive shrunk toward the negatives), against a reference
of two days (about 960 positives), at 20 positives an hour (and, for the design families, at
10 and 60 and at π_ref 0.002 and 0.01 with ``--wide``). Families: ``design`` (those the page's
tests were designed on), ``held-out`` (label noise, confident mistakes, two kinds of
positives: not used to design them).

It prints, per regime, the page before (the Mann-Whitney and placement tests) and after (the
location and placement tests), each at z > 3.0 (the alert's level) unless ``--levels`` says
otherwise: the models paged, paged within 24 hours, the median hours to the first page; the
models whose verdict read "worse" in a decision of the first day (before: where the page
before held; after: ``model_got_worse`` / ``both``, which rest on the page); and the coverage
of the decision's intervals of both parts of the AP change where measured. ``--load`` re-summarises
a saved run at other page levels (``--levels``).
"""

from __future__ import annotations

import argparse
import pickle
import time
from statistics import NormalDist

from calmon.verdict import PAGE_Z
from studies.decision import (
    DRIFT_KINDS,
    HELD_OUT_FAMILIES,
    RARE_FAMILIES,
    ModelRun,
    Regime,
    run_regime,
    summarise,
)

WEEK = 168
DRIFT_HOURS = 24
VERDICT_HOURS = 24
NO_COVERAGE = 10_000


def regimes(
    kind: str = "all", families: str = "all", wide: bool = False
) -> list[tuple[Regime, int]]:
    """(regime, hours after the change) of the study: ``kind`` "shift" (the pure prior
    shifts), "drift" (the likelihood drifts) or "all"; ``families`` "design", "held-out" or
    "all"; ``wide`` adds the design families' drifts at 10 and 60 positives an hour, at
    π_ref 0.002 and 0.01 and against a one-day reference."""
    chosen = {"design": RARE_FAMILIES, "held-out": HELD_OUT_FAMILIES}
    group = RARE_FAMILIES + HELD_OUT_FAMILIES if families == "all" else chosen[families]
    out: list[tuple[Regime, int]] = []
    if kind in ("all", "shift"):
        for family in group:
            for factor in (1 / 3, 3.0):
                out.append((Regime(family, 0.005, 20, factor=factor), WEEK))
    if kind in ("all", "drift"):
        for family in group:
            for drift in DRIFT_KINDS:
                out.append((Regime(family, 0.005, 20, drift=True, kind=drift), DRIFT_HOURS))
        if wide:
            for family in (f for f in group if f in RARE_FAMILIES):
                for prior in (0.002, 0.01):
                    for positives in (10, 20, 60):
                        regime = Regime(family, prior, positives, drift=True)
                        out.append((regime, DRIFT_HOURS))
                    day = Regime(family, prior, 20, drift=True, reference_hours=24)
                    out.append((day, DRIFT_HOURS))
    return out


def _print(results: list[tuple[Regime, list[ModelRun]]], levels: tuple[float, ...]) -> None:
    print(
        "| regime | models | z | paged (before → after) | paged ≤ 24 h (before → after) "
        '| median h to page (before → after) | read "worse" in day 1 (before → after) '
        "| cov. prior | cov. likelihood | median windows |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for regime, runs in results:
        for z in levels:
            p = 1.0 - NormalDist().cdf(z)
            old, new = summarise(runs, p=p, test="before"), summarise(runs, p=p)

            def median(value: float | None) -> str:
                return "—" if value is None else f"{value:.0f}"

            print(
                f"| {regime.name} | {new.models} | {z} | {old.paged} → {new.paged} | "
                f"{old.paged_within_24h} → {new.paged_within_24h} | "
                f"{median(old.median_first_page)} → {median(new.median_first_page)} | "
                f"{'—' if old.said_worse is None else old.said_worse} → {new.said_worse} | "
                f"{new.coverage('prior'):.3f} | {new.coverage('likelihood'):.3f} | "
                f"{new.median_windows:.0f} |",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=40, help="models per drift regime")
    parser.add_argument("--shift-models", type=int, default=30, help="models per shift regime")
    parser.add_argument("--families", choices=("all", "design", "held-out"), default="all")
    parser.add_argument("--kind", choices=("all", "shift", "drift"), default="all")
    parser.add_argument("--wide", action="store_true", help="the design families' other drifts")
    parser.add_argument("--levels", default=f"{PAGE_Z}", help="page levels (z), comma-separated")
    parser.add_argument(
        "--hours",
        type=int,
        default=None,
        help="hours after the change (default: a week for shifts, a day for drifts)",
    )
    parser.add_argument(
        "--coverage-every",
        type=int,
        default=NO_COVERAGE,
        help="compute every n-th hour's decision with its intervals, for their coverage",
    )
    parser.add_argument(
        "--verdict-hours",
        type=int,
        default=0,
        help="compute the decisions of the first hours with their intervals, for the verdict "
        "before (the likelihood part's interval below 0); the verdict after rests on the page "
        "and needs none",
    )
    parser.add_argument(
        "--min-span",
        type=int,
        default=0,
        help="pool every decision over at least this many hours as well as the positives "
        "(default 0: the positives alone, as the service did before decision.min_span; the "
        "service's default is 20)",
    )
    parser.add_argument("--save", default=None, help="pickle the runs to this file")
    parser.add_argument("--load", default=None, help="summarise runs pickled by --save")
    args = parser.parse_args()
    levels = tuple(float(z) for z in args.levels.split(","))
    started = time.perf_counter()
    results: list[tuple[Regime, list[ModelRun]]]
    if args.load:
        with open(args.load, "rb") as handle:
            results = pickle.load(handle)
    else:
        results = []
        for index, (regime, hours) in enumerate(regimes(args.kind, args.families, args.wide)):
            shift = not regime.drift
            runs = run_regime(
                regime,
                args.shift_models if shift else args.models,
                args.hours or hours,
                seed=20261127 + index + (1000 if regime.family in HELD_OUT_FAMILIES else 0),
                min_span=args.min_span,
                coverage_every=args.coverage_every,
                verdict_hours=args.verdict_hours,
            )
            results.append((regime, runs))
            print(f"{regime.name}: {time.perf_counter() - started:.0f} s", flush=True)
            if args.save:
                with open(args.save, "wb") as handle:
                    pickle.dump(results, handle)
    _print(results, levels)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
