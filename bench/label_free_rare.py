"""π̂ and the label-shift check at rare priors: bias, coverage, false flags and rises seen.

    PYTHONPATH=. .venv/bin/python -m bench.label_free_rare [--references 4] [--windows 15]

Families, scenarios and cells: ``studies/label_free.py`` (design families
``beta``, ``gumbel``; held-out ``binormal``, ``noise``, ``tree``, ``student``). Windows of
20,000 rows at priors 0.002, 0.005 and 0.02; references of 20,000 and 50,000 rows at 0.1.
Prints a Markdown table: per cell the windows, the check's flags, π̂'s coverage of the
measured ratio, the share flagged or covered ("safe"), the share of estimates that say they
are not resolved (their interval reaches 0: ``estimated.positive_class_ratio_resolved``
false) and π̂'s relative bias (Σ π̂ / Σ π - 1).
"""

from __future__ import annotations

import argparse
import sys
import time

from studies.label_free import DESIGN, HELD_OUT, RISES, run_cell

PRIORS = (0.002, 0.005, 0.02)
REFERENCE_ROWS = (20_000, 50_000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--references", type=int, default=4, help="references per cell")
    parser.add_argument("--windows", type=int, default=15, help="windows per reference")
    parser.add_argument("--families", nargs="+", default=[*DESIGN, *HELD_OUT])
    parser.add_argument("--reference-rows", type=int, nargs="+", default=list(REFERENCE_ROWS))
    parser.add_argument("--priors", type=float, nargs="+", default=list(PRIORS))
    parser.add_argument("--rises", action="store_true", help="also the negatives_rise cells")
    args = parser.parse_args(argv)
    print(
        "| family | reference rows | π | scenario | windows | flagged | π̂ covers | safe |"
        " unresolved | bias of π̂ |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    began = time.perf_counter()
    seed = 0
    for name in args.families:
        for rows in args.reference_rows:
            for prior in args.priors:
                rises = [None, *RISES] if args.rises else [None]
                for rise in rises:
                    seed += 1
                    cell = run_cell(
                        name,
                        reference_rows=rows,
                        prior=prior,
                        rise=rise,
                        references=args.references,
                        windows=args.windows,
                        seed=seed,
                    )
                    held = " (held out)" if name in HELD_OUT else ""
                    print(
                        f"| {name}{held} | {rows:,} | {prior:g} | {cell.scenario} |"
                        f" {cell.windows} | {cell.flagged / cell.windows:.3f} |"
                        f" {cell.covered / cell.windows:.3f} | {cell.safe / cell.windows:.3f} |"
                        f" {cell.unresolved / cell.windows:.3f} | {cell.bias:+.3f} |",
                        flush=True,
                    )
    print(f"({time.perf_counter() - began:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
