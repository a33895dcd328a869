"""The study of threshold advice at rare priors (a script, not a test): the tables of
``docs/measurements/advice.md`` ("Advice at rare priors").

    .venv/bin/python -m bench.advice [--models 25] [--seed 0] [--objectives all] [--sizes 10]

Runs ``studies/advice.py``: per score family, ``--models`` references of each
size, each with a pair of 20,000-row windows at every prior (pure label shift), for each
objective studied (target precision 0.8, alert budgets 0.01 and 0.002, costs 1:20), and
prints, per group of families (design, held-out), prior and rule (``before``: for the target
precision the reference's point estimates, advice whenever a threshold meets them, for the
other objectives calmon's rule without the window's hold rule; ``after``: calmon's rule), the
windows, those with advice, the share of those that keep the promise on the next window, the
median rows flagged and precision there, how often each expected interval held the next
window's value, and why advice was withheld. Then, with ``--sizes`` models per family and
reference, the rare-prior table (target precision and costs): which window and reference
sizes get advice at π 0.01 and 0.005, and whether it holds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from studies.advice import (
    FAMILIES,
    OBJECTIVES,
    PRIORS,
    REFERENCES,
    SIZE_OBJECTIVES,
    SIZE_PRIORS,
    SIZE_REFERENCES,
    SIZE_WINDOWS,
    Cell,
    run,
    run_sizes,
)


def _share(cell: Cell) -> str:
    return f"{cell.held}/{cell.given}" + (f" ({cell.held / cell.given:.0%})" if cell.given else "")


def _covered(cell: Cell) -> str:
    if not cell.covered and not cell.given:
        return "-"
    return ", ".join(f"{name} {count}/{cell.given}" for name, count in sorted(cell.covered.items()))


def _reasons(cell: Cell) -> str:
    return ", ".join(f"{r} {c}" for r, c in cell.reasons.most_common()) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=25, help="references per family and size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--objectives", default="all", help="comma-separated names of OBJECTIVES, or all"
    )
    parser.add_argument(
        "--sizes", type=int, default=10, help="models per family and reference (0: skip)"
    )
    args = parser.parse_args()
    names = list(OBJECTIVES) if args.objectives == "all" else args.objectives.split(",")
    started = time.perf_counter()
    for name in names:
        objective = OBJECTIVES[name]
        cells = run(args.models, seed=args.seed, objective=objective)
        for group in ("design", "held-out"):
            members = ", ".join(f for f, (_, g) in FAMILIES.items() if g == group)
            models = args.models * len(REFERENCES) * sum(g == group for _, g in FAMILIES.values())
            print(f"\n{name}, {group} families ({members}): {models} models, a window pair a prior")
            print(
                "\n| prior | rule | windows | advice given | kept on the next window "
                "| flagged rows, median | next precision, median | expected interval held "
                "the next value | withheld: reasons |"
            )
            print("|---|---|---|---|---|---|---|---|---|")
            for prior in PRIORS:
                for rule in ("before", "after"):
                    cell = cells[(group, prior, rule)]
                    flagged = f"{np.median(cell.flagged):.0f}" if cell.flagged else "-"
                    precision = f"{np.nanmedian(cell.precisions):.3f}" if cell.given else "-"
                    print(
                        f"| {prior:g} | {rule} | {cell.windows} | {cell.given} | {_share(cell)} "
                        f"| {flagged} | {precision} | {_covered(cell) if rule == 'after' else '-'} "
                        f"| {_reasons(cell)} |"
                    )
        print(f"\n{time.perf_counter() - started:.0f} s")
        if args.sizes <= 0 or name not in SIZE_OBJECTIVES:
            continue
        sizes = run_sizes(args.sizes, seed=args.seed, objective=objective)
        print(
            f"\n{name} at rare priors by size: {args.sizes} models per family and reference "
            f"(references at π {SIZE_REFERENCES[0][1]:g})"
        )
        print(
            "\n| group | prior | reference rows | window rows | windows | advice given | kept "
            "| rows named when withheld, median | withheld: reasons |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for group in ("design", "held-out"):
            for prior in SIZE_PRIORS:
                for reference_rows, _ in SIZE_REFERENCES:
                    for window in SIZE_WINDOWS:
                        cell = sizes[(group, prior, reference_rows, window)]
                        needed = f"{np.median(cell.needed):.0f}" if cell.needed else "-"
                        print(
                            f"| {group} | {prior:g} | {reference_rows} | {window} | "
                            f"{cell.windows} | {cell.given} | {_share(cell)} | {needed} | "
                            f"{_reasons(cell)} |"
                        )
        print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
