"""Time `calmon evaluate` on a generated CSV of 10^6 predictions (target: at most 3 s).

Prints the end-to-end wall time of the real command (a subprocess, interpreter start-up and
imports included) and, in this process, the breakdown: reading and parsing the file, grouping,
the metric engine, rendering. The file has columns score,label,timestamp,segment: probability
scores of a binormal model with 17 significant digits, π ≈ 0.1, 2% unlabelled rows, timestamps
over 7 days ("Z" layout), 3 segments.

    python bench/evaluate_cli.py [--rows N] [--repeats R] [--options "..."]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

TARGET_SECONDS = 3.0
DEFAULT_OPTIONS = "--pi0 0.5 --pi0 0.01 --format json"


def write_csv(path: Path, *, rows: int, seed: int = 0) -> None:
    """A realistic evaluation file of ``rows`` lines (plus the header)."""
    rng = np.random.default_rng(seed)
    positive = rng.random(rows) < 0.1
    scores = 1.0 / (1.0 + np.exp(-(rng.normal(size=rows) + 2.5 * positive - 2.0)))
    labels = np.where(rng.random(rows) < 0.02, "", np.where(positive, "1", "0"))
    start = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())
    seconds = start + np.sort(rng.integers(0, 7 * 86_400, size=rows))
    stamps = np.datetime_as_string(seconds.astype("datetime64[s]"), unit="s")
    segments = np.array(["country=FR", "country=DE", "country=US"])[rng.integers(0, 3, rows)]
    with path.open("w") as handle:
        handle.write("score,label,timestamp,segment\n")
        handle.writelines(
            f"{score!r},{label},{stamp}Z,{segment}\n"
            for score, label, stamp, segment in zip(
                scores.tolist(), labels.tolist(), stamps.tolist(), segments.tolist(), strict=True
            )
        )


def command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m calmon.cli``."""
    script = Path(sys.executable).with_name("calmon")
    return [str(script)] if script.exists() else [sys.executable, "-m", "calmon.cli"]


def end_to_end(path: Path, options: list[str], repeats: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (user + system) seconds of each run of the command.

    The CPU time is what the command would take on an idle machine (it is single-threaded
    apart from NumPy internals); wall time also counts waiting for a busy CPU.
    """
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        begin = time.perf_counter()
        subprocess.run(
            [*command(), "evaluate", str(path), *options],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        walls.append(time.perf_counter() - begin)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


class Stages:
    """Wall-clock and CPU seconds of named stages, run one after the other."""

    def __init__(self) -> None:
        self.seconds: dict[str, tuple[float, float]] = {}
        self._begin = (time.perf_counter(), time.process_time())

    def done(self, name: str) -> None:
        """Close the stage called ``name`` (it began when the previous one ended)."""
        now = (time.perf_counter(), time.process_time())
        self.seconds[name] = (now[0] - self._begin[0], now[1] - self._begin[1])
        self._begin = now


def breakdown(path: Path, options: list[str]) -> dict[str, tuple[float, float]]:
    """(wall, cpu) seconds of each stage of the command, run in this process."""
    from calmon.cli import build_parser
    from calmon.commands.evaluate import evaluate_groups, read_input, required_columns
    from calmon.offline.csv_input import parse_csv
    from calmon.offline.grouping import split_rows
    from calmon.offline.report import render_json, render_table

    args = build_parser().parse_args(["evaluate", str(path), *options])
    stages = Stages()
    data = read_input(args.file)
    stages.done("read file")
    rows = parse_csv(data, score_kind=args.score_kind, required=required_columns(args))
    stages.done("parse + validate")
    groups = split_rows(rows, window=args.window, by_segment=args.by_segment)
    stages.done("group")
    records = evaluate_groups(groups, args)
    stages.done(f"metrics ({len(groups)} records)")
    (render_json if args.format == "json" else render_table)(records)
    stages.done("render")
    return stages.seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--options", default=DEFAULT_OPTIONS, help="options of calmon evaluate")
    args = parser.parse_args()
    options = shlex.split(args.options)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "predictions.csv"
        write_csv(path, rows=args.rows)
        size_mb = path.stat().st_size / 1e6
        print(f"file: {args.rows:,} rows, {size_mb:.1f} MB; options: {args.options}")
        walls, cpus = end_to_end(path, options, args.repeats)
        print(f"end to end, {args.repeats} runs of: calmon evaluate FILE {args.options}")
        print(
            f"  wall: min {min(walls):.2f} s, median {statistics.median(walls):.2f} s; "
            f"cpu: min {min(cpus):.2f} s, median {statistics.median(cpus):.2f} s; "
            f"target {TARGET_SECONDS:.1f} s; load average {os.getloadavg()[0]:.2f}"
        )
        print("breakdown (in process, one run):      wall      cpu")
        stages = breakdown(path, options)
        for stage, (wall, cpu) in stages.items():
            print(f"  {stage:<30} {wall:6.3f} s {cpu:6.3f} s")
        wall_total = sum(wall for wall, _ in stages.values())
        cpu_total = sum(cpu for _, cpu in stages.values())
        print(f"  {'total':<30} {wall_total:6.3f} s {cpu_total:6.3f} s")
    return 0 if min(walls) <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
