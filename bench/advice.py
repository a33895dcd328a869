"""The study of threshold advice at rare priors (a script, not a test): the table of
``docs/acting.md`` ("Advice at rare priors").

    .venv/bin/python -m bench.advice [--models 25] [--seed 0]

Runs ``bench/studies/advice.py``: per score family, ``--models`` references of each
size, each with a pair of 20,000-row windows at every prior (target precision 0.8, pure label
shift), and prints, per group of families (design, held-out), prior and rule (``before``: the
reference's point estimates, advice whenever a threshold meets them; ``after``: calmon's
rule), the windows, those with advice, the share of those within ±0.05 of the target on the
next window, the median rows flagged and precision there, and why advice was withheld.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.studies.advice import FAMILIES, PRIORS, REFERENCES, TARGET, TOLERANCE, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=25, help="references per family and size")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    cells = run(args.models, seed=args.seed)
    for group in ("design", "held-out"):
        names = ", ".join(name for name, (_, g) in FAMILIES.items() if g == group)
        models = args.models * len(REFERENCES) * sum(g == group for _, g in FAMILIES.values())
        print(f"\n{group} families ({names}): {models} models, one window pair per prior each")
        print(
            f"\n| prior | rule | windows | advice given | within ±{TOLERANCE:g} of {TARGET:g} "
            "| flagged rows, median | next precision, median | withheld: reasons |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for prior in PRIORS:
            for rule in ("before", "after"):
                cell = cells[(group, prior, rule)]
                share = f"{cell.held}/{cell.given}" + (
                    f" ({cell.held / cell.given:.0%})" if cell.given else ""
                )
                flagged = f"{np.median(cell.flagged):.0f}" if cell.flagged else "-"
                precision = f"{np.nanmedian(cell.precisions):.3f}" if cell.given else "-"
                reasons = ", ".join(f"{r} {c}" for r, c in cell.reasons.most_common()) or "-"
                print(
                    f"| {prior:g} | {rule} | {cell.windows} | {cell.given} | {share} | "
                    f"{flagged} | {precision} | {reasons} |"
                )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
