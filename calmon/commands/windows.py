"""`calmon windows MODEL`: the stored windows of a model as a table, read from the server's API.

One line per window, oldest first: the window's start, its labelled predictions and
positives, the class ratio, one metric (regular, and calibrated at the reference's class
ratio) and the prior and likelihood parts of that metric's change since the reference, each
part marked where its 95% interval excludes 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING, Any, Final, cast

from calmon.catalogue import DECISION_METRIC, REGULAR_METRICS
from calmon.commands.common import api_error_text, http_url, positive_int
from calmon.names import ALL_SEGMENTS
from calmon.records import (
    Advice,
    Interval,
    ReferenceSummary,
    WindowRecord,
    metric_value,
    split_parts,
)
from calmon.verdict import ESTIMATE_WORDS, speaking_estimate, stored_verdict
from calmon.words import reference_words, verdict_against

if TYPE_CHECKING:
    from calmon_client import Api

TOKEN_ENV: Final = "CALMON_TOKEN"  # noqa: S105 (the variable's name, not a token)
DEFAULT_URL: Final = "http://127.0.0.1:8000"
DEFAULT_METRIC: Final = DECISION_METRIC
DEFAULT_LAST: Final = 24
PAGE: Final = 1000
#: requests made of each kind before giving up on a failure that may pass (the client's back-off)
ATTEMPTS: Final = 2
#: after a part of the split: its 95% interval excludes 0, holds it, or is not published
EXCLUDES_ZERO: Final = "*"
HOLDS_ZERO: Final = " "
NO_INTERVAL: Final = "?"
#: in place of an advised threshold whose label-shift check failed
WITHHELD: Final = "withheld"
ADVICE_LEGEND: Final = (
    "threshold, advised: the configured threshold and the one advised for the model's objective"
    f" at the window's class ratio (docs/reference/acting.md); {WITHHELD}: the label-shift check"
    " failed, so no threshold computed from the reference's classes is advised; - no advice."
)
LEGEND: Final = "\n".join(
    (
        f"{EXCLUDES_ZERO} the part's 95% interval excludes 0: a real change",
        f"{NO_INTERVAL} no interval (average precision: under 100 positives in the window or"
        " the reference)",
        "- not defined: one class only, no reference yet (a calibrated value needs a reference"
        " with both classes), or no calibrated value or split for the metric",
        "pooled: the windows and positives the decision pools; decision: the likelihood part of"
        " its AP change; verdict: what the decision says; against: the reference it compares"
        " with (docs/reference/references.md).",
    )
)

EPILOG = """\
Columns: window start (UTC); n, n_pos: labelled predictions and positives; unlabelled:
predictions without a label yet; ratio: the positive class ratio n_pos / n; regular: the
metric at the window's own ratio; calibrated: the metric calibrated at the reference's ratio
(what it would be had the ratio not moved; - until the model has a reference with both
classes, or for a metric that does not depend on the ratio); prior part and
likelihood part: the change of the metric since the reference, split into what the class ratio
moving explains and what the model getting better (> 0) or worse (< 0) explains; pooled,
decision, verdict: the window's pooled decision (docs/reference/metrics.md, "Decisions at few
positives"): the windows pooled back until they hold enough positives, the likelihood part of
their average precision change, and the one verdict (the web view and the alerts read it too);
against: the reference that verdict compares with, the previous windows of a trailing
reference or the period of a fixed one (docs/reference/references.md). Until at least half of a
window's predictions are labelled, the last column gives the class ratio estimated from the
scores alone with its 95% interval and what it says: the class ratio moved (the scores fit a
class-ratio change), the scores changed in a way a class-ratio change does not explain (the
label-shift check rejects: labels needed), no change, or not enough data.

Windows are computed by the scheduler at its tick after they end (plus the model's grace);
the table shows what is stored. Exit status: 0, 1 when the server cannot be reached or fails,
2 when it refuses the request (unknown model, bad token) or for bad options.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon windows`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("model", metavar="MODEL", help="the model's name")
    parser.add_argument(
        "--segment",
        default=ALL_SEGMENTS,
        metavar="S",
        help="one segment (default *: every prediction)",
    )
    parser.add_argument(
        "--last",
        type=positive_int,
        default=DEFAULT_LAST,
        metavar="N",
        help=f"the N most recent windows (default {DEFAULT_LAST})",
    )
    parser.add_argument(
        "--metric",
        choices=REGULAR_METRICS,
        default=DEFAULT_METRIC,
        metavar="M",
        help=f"the metric shown (default {DEFAULT_METRIC}; any of {', '.join(REGULAR_METRICS)})",
    )
    parser.add_argument(
        "--url",
        type=http_url,
        default=DEFAULT_URL,
        help=f"root URL of the server (default {DEFAULT_URL})",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token with the read scope (default: the {TOKEN_ENV} variable)",
    )


def run(args: argparse.Namespace) -> int:
    """Read the model and its last windows from the server and print the table."""
    from calmon_client import Api, ApiError

    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        with Api(args.url, token=token, timeout=30.0, attempts=ATTEMPTS) as api:
            records = last_records(api, model=args.model, segment=args.segment, last=args.last)
            if not records and args.segment != ALL_SEGMENTS:
                known = segments_with_windows(api, model=args.model)
                if known:
                    print(
                        f"calmon windows: model {args.model} has no window of segment"
                        f" {args.segment!r}; its segments: {', '.join(known)}",
                        file=sys.stderr,
                    )
                    return 2
    except ApiError as exc:
        if not exc.transient:
            print(f"calmon windows: {api_error_text(exc)}", file=sys.stderr)
            return 2
        print(f"calmon windows: {args.url}: {exc.reason}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("calmon windows: interrupted", file=sys.stderr)
        return 130
    print(
        format_table(records, model=args.model, segment=args.segment, metric=args.metric),
    )
    return 0


def last_records(api: Api, *, model: str, segment: str, last: int) -> list[WindowRecord]:
    """The ``last`` most recent records of ``model`` and ``segment``, oldest first.

    The model is read first (an unknown model is the server's 404). The windows API lists
    oldest first, so the records are read from ``last`` windows before now, and, when that
    finds fewer (windows further in the past), from the beginning, keeping the last ones.
    """
    from calmon.timeline import iso, window_length

    stored = api.get_model(model)
    since = datetime.now(UTC) - last * window_length(stored["window"])
    records = _read(api, model=model, segment=segment, last=last, start=iso(since))
    if len(records) < last:
        records = _read(api, model=model, segment=segment, last=last, start=None)
    return records


def segments_with_windows(api: Api, *, model: str) -> list[str]:
    """The segments of ``model``'s most recent computed windows (``*`` first, then by name):
    what to suggest for a segment that has none."""
    first_page = islice(api.windows(model, page=PAGE), PAGE)
    names = {record["segment"] for record in first_page}
    return sorted(names, key=lambda name: (name != ALL_SEGMENTS, name))


def _read(
    api: Api, *, model: str, segment: str, last: int, start: str | None
) -> list[WindowRecord]:
    kept: deque[WindowRecord] = deque(
        (cast(WindowRecord, r) for r in api.windows(model, segment=segment, start=start)),
        maxlen=last,
    )
    return list(kept)


def _value(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _part(value: float | None, bounds: Interval) -> str:
    """A part of a change, signed, followed by the mark of its interval ``bounds`` (``-``
    when the part is undefined)."""
    if value is None:
        return "-"
    if bounds is None:
        mark = NO_INTERVAL
    else:
        mark = HOLDS_ZERO if bounds[0] <= 0.0 <= bounds[1] else EXCLUDES_ZERO
    return f"{value:+.3f}{mark}"


def _estimate(record: WindowRecord) -> str:
    """The label-free ratio with its interval and verdict, while the window's own labels do
    not decide its ratio yet (:func:`calmon.verdict.speaking_estimate`; ``-`` after, or
    without an estimate)."""
    estimated = record["estimated"]
    if estimated is None:
        return "-"
    speaks = speaking_estimate(
        estimated["verdict"], labelled=record["n"], unlabelled=record["unlabelled"]
    )
    if speaks is None:
        return "-"
    lower, upper = estimated["positive_class_ratio_interval"]
    return (
        f"{_value(estimated['positive_class_ratio'], 4)} [{_value(lower, 4)}, {_value(upper, 4)}]"
        f" {ESTIMATE_WORDS[speaks]}"
    )


def against(record: WindowRecord) -> str:
    """The reference a record's verdict compares with, in short words (``previous 2
    windows``, ``fixed reference 1-2 Nov 2026``, ``no reference yet``)."""
    words = verdict_against(record)
    return words.removeprefix("against ").removeprefix("with ").removeprefix("the ")


def _decision_cells(record: WindowRecord) -> tuple[str, str, str, str]:
    """(pooled windows/positives, decision's likelihood part with its mark, verdict code
    (:class:`calmon.verdict.Verdict`), what it compares with) of a record."""
    decision = record["decision"]
    pooled = f"{decision['windows']}/{decision['n_pos']}"
    likelihood = _part(decision["likelihood_part"], decision["likelihood_interval"])
    return pooled, likelihood, stored_verdict(decision["verdict"]).value, against(record)


def _advised(advice: Advice) -> str:
    """The advised threshold of a record, or :data:`WITHHELD` when its assumption check
    failed (a number resting on a broken assumption is not shown)."""
    threshold = advice["threshold"]
    if threshold is None:
        return "-"
    assumption = advice["assumption"]
    if assumption is not None and assumption["holds"] is False:
        return WITHHELD
    return f"{threshold:.4f}"


def format_table(records: Iterable[WindowRecord], *, model: str, segment: str, metric: str) -> str:
    """The table of ``records`` (window records of the API, oldest first) for ``metric``: a
    title (and the reference), the header, a line per window and the legend."""
    rows: list[tuple[str, ...]] = []
    reference: ReferenceSummary | None = None
    records_list = list(records)
    for record in records_list:
        start = datetime.fromisoformat(record["start"]).astimezone(UTC)
        calibrated = record["calibrated"]["reference"]
        split = record["split"]
        parts = None if split is None else split_parts(split, metric)
        reference = record["reference"] or reference
        rows.append(
            (
                f"{start:%Y-%m-%d %H:%M}",
                str(record["n"]),
                str(record["n_pos"]),
                str(record["unlabelled"]),
                _value(record["prior"], 4),
                _value(metric_value(record["regular"], metric)),
                _value(None if calibrated is None else metric_value(calibrated, metric)),
                "-" if parts is None else _part(parts["prior"], parts["prior_interval"]),
                "-" if parts is None else _part(parts["likelihood"], parts["likelihood_interval"]),
                *_decision_cells(record),
                _estimate(record),
            )
        )
    title = f"model {model}, segment {segment}, {metric}"
    if reference is not None:
        title += (
            f"\nreference of the latest window: {reference_words(reference)},"
            f" {reference['start']} to {reference['end']}: n {reference['n']},"
            f" ratio {_value(reference['prior'], 4)},"
            f" {metric} {_value(metric_value(reference['regular'], metric))}"
        )
    if not rows:
        return f"{title}\nno computed window yet (windows are computed at the scheduler's tick)"
    header: tuple[str, ...] = (
        "window start (UTC)",
        "n",
        "n_pos",
        "unlabelled",
        "ratio",
        "regular",
        "calibrated",
        "prior part",
        "likelihood part",
        "pooled",
        "decision",
        "verdict",
        "against",
        "estimated ratio [95%] before labels",
    )
    advices = [record["advice"] for record in records_list]
    advised = any(advices)
    if advised:
        header += ("threshold", "advised")
        rows = [
            (
                *row,
                _value(None if advice is None else advice["configured_threshold"], 4),
                "-" if advice is None else _advised(advice),
            )
            for row, advice in zip(rows, advices, strict=True)
        ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [title]
    for row in [header, *rows]:
        cells = [
            row[0].ljust(widths[0]),
            *(cell.rjust(width) for cell, width in zip(row[1:-1], widths[1:-1], strict=True)),
            row[-1],
        ]
        lines.append("  ".join(cells).rstrip())
    lines.append(LEGEND)
    if advised:
        lines.append(ADVICE_LEGEND)
    return "\n".join(lines)
