"""The coverage table of ``docs/intervals.md`` (a script, not a test).

    .venv/bin/python -m bench.interval_coverage [--sets 1500]

Runs the regimes of the coverage study (``tests/unit/metrics/coverage_study.py``, the same
seeds as ``test_interval_coverage.py``) and prints, per regime (a row), the share of sets whose
published 95% interval covers the population value, as a Markdown table (``—`` where the
metric publishes no interval in that regime), then the mean widths.
"""

from __future__ import annotations

import argparse
import time

from tests.unit.metrics.coverage_study import METRICS, REGIMES, Coverage, coverage


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=1500)
    args = parser.parse_args()
    started = time.perf_counter()
    results: list[tuple[str, Coverage]] = []
    for index, (family, prior, positives) in enumerate(REGIMES):
        result = coverage(family, prior, positives, args.sets, seed=[20261125, index])
        results.append((f"{family.name}, π = {prior}, {positives} pos.", result))
    print("| regime | " + " | ".join(f"`{metric}`" for metric in METRICS) + " |")
    print("|---" * (len(METRICS) + 1) + "|")
    for name, result in results:
        cells = [
            f"{result.rate(metric):.3f}" if result.published[metric] else "—" for metric in METRICS
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nmean width:")
    for name, result in results:
        cells = [
            f"{result.width[metric]:.3f}" if result.published[metric] else "—" for metric in METRICS
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\n{args.sets} sets per regime, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
