"""`calmon evaluate FILE`: every metric of a CSV file of scored predictions, offline."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calmon.timeline import WINDOW_SECONDS
from calmon.words import plural

#: the columns of the file format (calmon.offline.csv_input.KNOWN_COLUMNS, not imported at start)
KNOWN_COLUMNS = ("score", "label", "timestamp", "segment")

if TYPE_CHECKING:
    from calmon.offline.csv_input import EvaluationRows
    from calmon.offline.grouping import Group
    from calmon.records import EvaluationRecord

MAX_PI0 = 5
#: the bootstrap's seed unless --seed says otherwise: a run's intervals are repeatable
DEFAULT_SEED = 0

EPILOG = """\
FILE is a CSV file with a header line (or - for standard input), its fields separated by
commas or, when the header holds more of one of them, by ';', tabs or '|' (--delimiter to
say which). Columns, in any order (--score-column NAME and the like when they are named
otherwise in the file):
  score      required; finite; in [0, 1] with --score-kind probability
  label      required; 0, 1 (or 0.0, 1.0), or empty when not known yet: such rows only
             count towards 'unlabelled'
  timestamp  optional; ISO 8601 with a UTC offset or Z (needed by --window)
  segment    optional; a segment name such as country=FR, or empty for none (needed by
             --by-segment; rows without a segment only count in '*')
Other columns are ignored. Known columns are always validated. Fields may be quoted;
spaces around a score or a label are ignored, and so are blank lines at the end of FILE.

Output: one record per window and segment, oldest window first, segment '*' (all rows)
first, then the segments by name. Errors in FILE are reported as FILE:LINE: reason (the
header is line 1), one line per bad row up to 20 then a count of the others, with exit
status 2 and nothing on standard output.
"""


def _pi0(text: str) -> float:
    from calmon.metrics.prepared import check_pi0

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    try:
        return check_pi0(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _delimiter(text: str) -> str:
    value = "\t" if text in ("tab", "\\t") else text
    if len(value) != 1 or value in '\n\r"':
        raise argparse.ArgumentTypeError(f"one character other than a quote or newline: {text!r}")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite: {text!r}")
    return value


class _AppendPi0(argparse.Action):
    """Collects the distinct --pi0 values in the order given, at most MAX_PI0 of them."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, float)
        current: list[float] = list(getattr(namespace, self.dest) or [])
        if values not in current:
            current.append(values)
        if len(current) > MAX_PI0:
            raise argparse.ArgumentError(self, f"at most {MAX_PI0} distinct values")
        setattr(namespace, self.dest, current)


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon evaluate`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("file", metavar="FILE", help="CSV file of predictions, or - for stdin")
    parser.add_argument(
        "--pi0",
        type=_pi0,
        action=_AppendPi0,
        default=[],
        metavar="P",
        help=f"reference prior in (0, 1) for the calibrated metrics; repeatable, up to {MAX_PI0}",
    )
    parser.add_argument(
        "--threshold",
        type=_finite,
        default=0.5,
        metavar="T",
        help="decision threshold: predicted positive iff score >= threshold (default 0.5)",
    )
    parser.add_argument(
        "--score-kind",
        choices=("probability", "score"),
        default="probability",
        help="probability (in [0, 1], adds the calibration metrics) or score (any real);"
        " default probability",
    )
    parser.add_argument(
        "--window",
        choices=tuple(WINDOW_SECONDS),
        help="one record per UTC-aligned window of this length (needs a timestamp column)",
    )
    parser.add_argument(
        "--by-segment",
        action="store_true",
        help="one record per segment too, besides '*' (needs a segment column)",
    )
    parser.add_argument(
        "--intervals", action="store_true", help="add 95%% confidence intervals (bootstrap)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        metavar="N",
        help=f"seed of the bootstrap intervals (with --intervals); the same file and seed give"
        f" the same intervals (default {DEFAULT_SEED})",
    )
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default table)"
    )
    for column in KNOWN_COLUMNS:
        parser.add_argument(
            f"--{column}-column",
            dest=f"{column}_column",
            metavar="NAME",
            help=f"the file's name of the {column} column (default {column})",
        )
    parser.add_argument(
        "--delimiter",
        type=_delimiter,
        metavar="CHAR",
        help="field separator: one character, or 'tab' (default: read from the header line)",
    )
    parser.add_argument(
        "--html",
        metavar="REPORT",
        help="also write an HTML report (the web view's charts, split and verdict) to REPORT:"
        " the first window (with --window) or the whole file is the reference, each later"
        " window is compared with it",
    )


def run(args: argparse.Namespace) -> int:
    """Read FILE, compute one record per window and segment, print them; 2 on bad input."""
    from calmon.offline.csv_input import InputError, parse_csv
    from calmon.offline.grouping import split_rows
    from calmon.offline.report import render_json, render_table

    name = "<stdin>" if args.file == "-" else args.file
    try:
        data = read_input(args.file)
    except OSError as exc:
        print(f"{name}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        rows = parse_csv(
            data,
            score_kind=args.score_kind,
            required=required_columns(args),
            columns=renamed_columns(args),
            delimiter=args.delimiter,
        )
    except InputError as exc:
        for line, reason in exc.problems:
            print(f"{name}:{line}: {reason}", file=sys.stderr)
        if exc.count > len(exc.problems):
            more = plural(exc.count - len(exc.problems), "more bad row")
            print(f"{name}: ... and {more}", file=sys.stderr)
        return 2
    del data
    if args.html is not None:
        status = write_html(rows, args, name=name)
        if status:
            return status
    groups = split_rows(rows, window=args.window, by_segment=args.by_segment)
    records = evaluate_groups(groups, args)
    output = render_json(records) if args.format == "json" else render_table(records)
    return write_output(output)


def renamed_columns(args: argparse.Namespace) -> dict[str, str]:
    """The known columns the options give another name in the file."""
    renamed = {column: getattr(args, f"{column}_column") for column in KNOWN_COLUMNS}
    return {column: name for column, name in renamed.items() if name is not None}


def write_html(rows: EvaluationRows, args: argparse.Namespace, *, name: str) -> int:
    """Write the HTML report of ``rows`` to ``args.html``; 2 (after saying why) when it cannot
    be made or written."""
    from calmon.offline.html_report import ReportError, report_from_rows

    try:
        report = report_from_rows(
            rows,
            window=args.window,
            threshold=args.threshold,
            pi0=args.pi0,
            score_kind=args.score_kind,
            title=name,
        )
    except ReportError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    try:
        report.save(args.html)
    except OSError as exc:
        print(f"{args.html}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"report written to {Path(args.html).resolve()}", file=sys.stderr)
    return 0


def required_columns(args: argparse.Namespace) -> list[str]:
    """The optional columns that the options need."""
    needs = (("timestamp", args.window), ("segment", args.by_segment))
    return [column for column, needed in needs if needed]


def evaluate_groups(groups: Sequence[Group], args: argparse.Namespace) -> list[EvaluationRecord]:
    """One output record per group: the metric engine's result with the options of ``args``."""
    from calmon.offline.report import evaluate_group

    return [
        evaluate_group(
            group,
            threshold=args.threshold,
            pi0=args.pi0,
            score_kind=args.score_kind,
            intervals=args.intervals,
            seed=args.seed,
        )
        for group in groups
    ]


def read_input(path: str) -> bytes:
    """The bytes of ``path``, or of standard input for ``-``."""
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as handle:
        return handle.read()


def write_output(text: str) -> int:
    """Write ``text`` to stdout; a reader that went away (``| head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0
