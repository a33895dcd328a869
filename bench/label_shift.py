"""The label-shift check and π̂'s interval under pure label shift and under its violations.

    PYTHONPATH=. .venv/bin/python bench/label_shift.py [--windows 20] [--rows 20000 5000 2000]
        [--priors 0.005 0.02] [--scenarios label_shift negatives_rise]

Families, scenarios and cells: ``studies/label_shift.py`` (held-out ``tree``, ``logistic`` and
``beta`` families; references of 50,000 rows at prior 0.1). Per cell (family, scenario, prior,
rows), over every reference's windows: the share of windows where the check rejects, where
π̂'s 95% interval holds the window's measured ratio, and where either happens. Prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time

from studies.label_shift import FAMILIES, PRIORS, SCENARIOS, study


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=10, help="windows per reference")
    parser.add_argument("--references", type=int, default=4, help="references per family")
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 5_000, 2_000])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--priors", type=float, nargs="+", default=list(PRIORS))
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    args = parser.parse_args(argv)
    print("| family | rows | scenario | prior | rejects | interval holds | either | mean π̂ |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    began = time.perf_counter()
    for cell in study(
        families=tuple(args.families),
        rows=tuple(args.rows),
        windows=args.windows,
        references=args.references,
        scenarios=tuple(args.scenarios),
        priors=tuple(args.priors),
    ):
        print(
            f"| {cell.family} | {cell.rows} | {cell.scenario} | {cell.prior} |"
            f" {cell.rejection_rate:.2f} | {cell.covered / cell.windows:.2f} |"
            f" {cell.safe_rate:.2f} | {cell.ratio_mean:.4f} |",
            flush=True,
        )
    print(f"({time.perf_counter() - began:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
