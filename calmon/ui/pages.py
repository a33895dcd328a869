"""HTML pages of the web view, as text, from window records and plain values.

Pure functions: the routes (:mod:`calmon.api.routes.ui`) read the records through the services and
pass them here. Every value that comes from a record or a request is escaped. Pages carry
their small style sheet inline and load nothing: the routes send them with a Content-Security-
Policy that forbids scripts and every other host. Logging out is a form (POST), not a link.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Final, TypeVar
from urllib.parse import quote_plus, urlencode

from calmon.catalogue import UNRESOLVED
from calmon.records import Objective, WindowRecord, metric_interval, metric_value, split_parts
from calmon.ui.charts import (
    DASH,
    NUMBER_AXIS,
    TIME_AXIS,
    Level,
    Series,
    format_number,
    metric_name,
    metric_title,
    reliability_chart,
    signed,
    time_chart,
)
from calmon.ui.verdict import (
    ALERT_DETAIL,
    DecisionReading,
    WindowReading,
    bounds,
    estimate_speaks,
    number,
    read_decision,
    read_window,
    record_verdict,
)
from calmon.verdict import (
    ESTIMATE_WORDS,
    OWN_PAGE_P,
    PAGE_MATERIAL,
    PAGE_P,
    VERDICT_METRIC,
    VERDICT_WORDS,
    Bounds,
    Estimate,
    Verdict,
)
from calmon.words import plural, reference_words, verdict_against

Item = TypeVar("Item")

TIMES: Final = "\u00d7"
STYLE: Final = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1180px;padding:0 16px 40px;
color:#1b1b1b;background:#fff}
header{display:flex;gap:16px;align-items:baseline;border-bottom:1px solid #ccc;margin-bottom:12px}
header nav{margin-left:auto}
h1{font-size:1.5em;margin:.5em 0}h2{font-size:1.15em;margin:1.4em 0 .3em}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:3px 8px;border-bottom:1px solid #e3e3e3;text-align:right;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:0}
td.text,th.text{text-align:left}td.text a,td.when{white-space:nowrap}
.alert{color:#9b1c1c;font-weight:600}.alert .detail{font-weight:400}
.ok{color:#23663a}.muted{color:#666}
.v-both,.v-worse{color:#9b1c1c;font-weight:600}.v-ratio{color:#8a5300;font-weight:600}
.v-maybe{color:#8a5300}
.v-unknown{color:#666}
caption{caption-side:top;text-align:left;padding:2px 0 6px;font-size:.9em}
table.verdicts{font-size:.9em}table.verdicts td{white-space:nowrap}
table.verdicts td.verdict{white-space:normal;min-width:14em}
table.verdicts th{vertical-align:bottom}table.verdicts th,table.verdicts td{padding:3px}
tr.selected td{background:#fff6d6}
form.inline{display:flex;gap:12px;align-items:end;flex-wrap:wrap}
label{display:flex;flex-direction:column;font-size:.9em}
.error{color:#9b1c1c}
form.logout{display:inline}form.logout button{font:inherit;padding:0;border:0;background:none;
color:#1f5fa8;text-decoration:underline;cursor:pointer}
svg.chart{max-width:100%;height:auto;display:block}svg.chart.wide{width:100%}
svg .count-bar{fill:#1f5fa8;opacity:.16;stroke:none}svg .count{font-size:10px;fill:#555}
table.models{width:100%}table.models td{white-space:nowrap}
table.models td.state{white-space:normal;min-width:17em;font-size:.9em}
table.models th{vertical-align:bottom}table.models th,table.models td{padding:3px 6px}
.detail{display:block;font-size:.82em;color:#666}
svg text{font:12px system-ui,sans-serif;fill:#333}
svg .label{font-size:13px}
svg .grid path{stroke:#e6e6e6}svg .axis{stroke:#555;fill:none}
svg .line{fill:none;stroke-width:1.8}svg .band{stroke:none;opacity:.2}
svg .level{fill:none;stroke-width:1.4;stroke-dasharray:2 3}
svg .empty{fill:#888;font-size:15px}
.s0{stroke:#1f5fa8;fill:#1f5fa8}.s1{stroke:#c2410c;fill:#c2410c}
.s2{stroke:#15803d;fill:#15803d}.s3{stroke:#7e22ce;fill:#7e22ce}
.ref{stroke:#222;fill:#222}
svg .line.s0,svg .line.s1,svg .line.s2,svg .line.s3,svg .line.ref,svg .level{fill:none}
svg .mark{stroke:none}
.withheld{color:#9b1c1c}
@media print{
@page{size:A4 landscape;margin:10mm}
body{max-width:none;padding:0;font-size:10pt}
header nav,form.inline,form.logout{display:none}
th{position:static}
table.verdicts,table.models{font-size:8pt;width:100%}
table.verdicts th,table.verdicts td,table.models th,table.models td{padding:1px 4px}
table.verdicts td.verdict{min-width:13em}
thead{display:table-header-group}tr,svg.chart,caption{break-inside:avoid}
h2{break-after:avoid}
a{color:inherit;text-decoration:none}
}
"""

ICON: Final = '<link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">'
VERDICT_CLASS: Final[dict[Verdict, str]] = {
    Verdict.BOTH: "v-both",
    Verdict.WORSE: "v-worse",
    Verdict.RATIO: "v-ratio",
    Verdict.MAYBE_WORSE: "v-maybe",
    Verdict.RATIO_MAYBE_WORSE: "v-ratio",
    Verdict.STABLE: "ok",
    Verdict.UNKNOWN: "v-unknown",
}
#: what the label-free estimate cannot see, said beside every estimate that holds
BLIND_SPOT: Final = (
    "Scores alone cannot tell fewer positives from positives scoring like negatives, nor more "
    "positives from negatives scoring like positives: labels will tell."
)
#: the label-free estimate's verdicts, styled as the measured verdict they stand for
ESTIMATE_CLASS: Final[dict[Estimate, str]] = {
    Estimate.FELL: "v-unknown",
    Estimate.ROSE: "v-unknown",
    Estimate.SCORES_CHANGED: "v-worse",
    Estimate.NO_CHANGE: "ok",
    Estimate.UNKNOWN: "v-unknown",
}


def _page(
    title: str, body: str, *, nav: bool = True, logout: bool = False, standalone: bool = False
) -> str:
    """A whole page; ``logout`` adds the log-out button (tokens configured): a form, since
    logging out is a POST. A ``standalone`` page (a report saved as a file) links to nothing
    of the server, not even its icon."""
    out = (
        ' · <form class="logout" method="post" action="/ui/logout">'
        '<button type="submit">log out</button></form>'
        if logout
        else ""
    )
    links = (
        f'<nav><a href="/ui">models</a> · <a href="/docs">API docs</a>{out}</nav>' if nav else ""
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)} · calmon</title>"
        f"{'' if standalone else ICON}"
        f"<style>{STYLE}</style></head><body>"
        f'<header><strong>calmon</strong><span class="muted">{escape(title)}</span>{links}</header>'
        f"<main>{body}</main></body></html>"
    )


def interval_text(interval: Bounds | None, digits: int = 3) -> str:
    """``[lo, hi]`` or an empty string when absent."""
    if interval is None:
        return ""
    return f" [{format_number(interval[0], digits)}, {format_number(interval[1], digits)}]"


def _metric(record: WindowRecord, metric: str, *, calibrated: bool = False) -> float | None:
    if calibrated:
        at_reference = record["calibrated"]["reference"]
        return None if at_reference is None else number(metric_value(at_reference, metric))
    return number(metric_value(record["regular"], metric))


def _metric_interval(
    record: WindowRecord, metric: str, *, calibrated: bool = False
) -> Bounds | None:
    intervals = record["intervals"]
    if calibrated:
        at_reference = intervals["calibrated"]["reference"]
        return None if at_reference is None else bounds(metric_interval(at_reference, metric))
    return bounds(metric_interval(intervals["regular"], metric))


def _reference_metric(record: WindowRecord, metric: str) -> float | None:
    reference = record["reference"]
    return None if reference is None else number(metric_value(reference["regular"], metric))


def _ratio_vs_reference(reading: WindowReading) -> str:
    if reading.ratio is None:
        return DASH
    text = format_number(reading.ratio, 4)
    if reading.reference_ratio:
        factor = reading.ratio / reading.reference_ratio
        text += f" vs {format_number(reading.reference_ratio, 4)} ({TIMES}{factor:.2f})"
    return text


def _estimated_ratio(record: WindowRecord, reading: WindowReading) -> str:
    """The label-free ratio with its interval against the reference's, marked as estimated."""
    estimated = record["estimated"]
    ratio = None if estimated is None else number(estimated["positive_class_ratio"])
    if estimated is None or ratio is None:
        return DASH
    text = (
        f"est. {format_number(ratio, 4)}"
        f"{interval_text(bounds(estimated['positive_class_ratio_interval']), 4)}"
    )
    if reading.reference_ratio:
        text += f" vs {format_number(reading.reference_ratio, 4)}"
    return text


def _verdict_against(record: WindowRecord, *, numbered: bool = False) -> str:
    """What the verdict :func:`window_verdict` shows is compared with: the window's own
    reference where the label-free estimate speaks, else the pooled decision's. Windows
    ``numbered`` (undated rows) have no period to name: ``against the reference``."""
    if record["reference"] is not None and numbered:
        return "against the reference"
    if estimate_speaks(record) is not None:
        words = reference_words(record["reference"])
        return f"with {words}" if record["reference"] is None else f"against {words}"
    return verdict_against(record)


def window_verdict(record: WindowRecord, reading: WindowReading) -> tuple[str, str, str]:
    """A window's verdict (text, CSS class) and its class ratio text: its pooled decision's
    (:func:`calmon.ui.verdict.record_verdict`), unless the window's own labels do not decide yet,
    where the label-free estimate speaks (:func:`calmon.ui.verdict.estimate_speaks`)."""
    speaks = estimate_speaks(record)
    if speaks is None:
        verdict = record_verdict(record)
        return VERDICT_WORDS[verdict], VERDICT_CLASS[verdict], _ratio_vs_reference(reading)
    return ESTIMATE_WORDS[speaks], ESTIMATE_CLASS[speaks], _estimated_ratio(record, reading)


def _part(value: float | None, interval: Bounds | None) -> str:
    return signed(value) + interval_text(interval)


@dataclass(frozen=True, slots=True)
class ModelSummary:
    """One row of the model list: the model, its latest ``*`` window (None before the first),
    the alert states of its latest windows (stale included; each said once, the segments
    where it holds counted: :func:`calmon.ui.verdict.segment_alerts`) and how many segments
    have a latest window besides ``*``."""

    name: str
    window: str
    score_kind: str
    latest: WindowRecord | None
    alerts: Sequence[str]
    segments: int = 0


def _short_time(value: object) -> str:
    """An ISO instant of a record as ``YYYY-MM-DD HH:MM`` (UTC), or the text as it is."""
    try:
        return f"{datetime.fromisoformat(str(value)):%Y-%m-%d %H:%M}"
    except ValueError:
        return str(value)


def _stacked(value: str, detail: str) -> str:
    """A number with its detail (an interval, a comparison) in a small line under it, so that
    a column of the list stays narrow and reads at a glance."""
    shown = f'<span class="detail">{escape(detail.strip())}</span>' if detail.strip() else ""
    return f"{escape(value)}{shown}"


def _versus(reading: WindowReading) -> str:
    """``vs 0.0483 x1.02`` (with a true times sign): the reference's class ratio and the
    factor, or nothing."""
    if reading.ratio is None or not reading.reference_ratio:
        return ""
    factor = reading.ratio / reading.reference_ratio
    return f"vs {format_number(reading.reference_ratio, 4)} {TIMES}{factor:.2f}"


def _alert(text: str) -> str:
    """An alert state (HTML): its words, and where it holds (after
    :data:`~calmon.ui.verdict.ALERT_DETAIL`) in a small line under them."""
    words, _, where = text.partition(ALERT_DETAIL)
    return _stacked(words, where)


def _ratio_cell(record: WindowRecord, reading: WindowReading) -> str:
    """The class ratio of a window against the reference's, stacked (HTML): from the labels,
    or, while the label-free estimate speaks for the window, estimated with its interval."""
    estimated = record["estimated"]
    ratio = None if estimated is None else number(estimated["positive_class_ratio"])
    if estimate_speaks(record) is None or estimated is None or ratio is None:
        return _stacked(format_number(reading.ratio, 4), _versus(reading))
    detail = interval_text(bounds(estimated["positive_class_ratio_interval"]), 4).strip()
    if reading.reference_ratio:
        detail += f" vs {format_number(reading.reference_ratio, 4)}"
    return _stacked(f"est. {format_number(ratio, 4)}", detail)


def index_page(models: Sequence[ModelSummary], *, logout: bool = False) -> str:
    """``/ui``: a table of the models with their latest window's key numbers and alerts."""
    if not models:
        body = (
            "<h1>Models</h1><p>No model yet. Create one with <code>PUT /v1/models/{name}</code> "
            "or try <code>calmon simulate</code>.</p>"
        )
        return _page("models", body, logout=logout)
    rows = []
    for model in models:
        link = f'<a href="/ui/models/{escape(model.name)}">{escape(model.name)}</a>'
        if model.segments:
            link += f'<span class="detail">{plural(model.segments, "segment")}</span>'
        state = (
            "".join(f'<div class="alert">{_alert(a)}</div>' for a in model.alerts)
            if model.alerts
            else '<span class="ok">no alert</span>'
        )
        record = model.latest
        if record is None:
            cells = '<td class="text muted" colspan="8">no window computed yet</td>'
        else:
            reading = read_window(record)
            if not model.alerts:
                state += f'<span class="detail">{escape(_verdict_against(record))}</span>'
            cells = (
                f'<td class="text when">{escape(_short_time(record["start"]))}</td>'
                f"<td>{record['n']:,}</td><td>{record['n_pos']:,}</td>"
                f"<td>{_ratio_cell(record, reading)}</td>"
                f"<td>{format_number(_metric(record, VERDICT_METRIC))}</td>"
                f"<td>{format_number(_metric(record, VERDICT_METRIC, calibrated=True))}</td>"
                f"<td>{_stacked(signed(reading.prior_part), interval_text(reading.prior_interval))}"
                "</td><td>"
                + _stacked(
                    signed(reading.likelihood_part), interval_text(reading.likelihood_interval)
                )
                + "</td>"
            )
        rows.append(
            f'<tr><td class="text">{link}</td><td class="text">{escape(model.window)}</td>'
            f'{cells}<td class="text state">{state}</td></tr>'
        )
    body = (
        "<h1>Models</h1>"
        "<p>Latest window of every model (all predictions, segment <code>*</code>); alerts "
        "follow the Prometheus rules and cover every tracked segment, each said once with the "
        "segments where it holds. A dash marks a value not defined yet: calibrated AP needs a "
        "reference with both classes, the parts of the change a reference and their 95% "
        "intervals at least 100 positives in the window and in the reference.</p>"
        '<table class="models"><thead><tr><th class="text" scope="col">model</th>'
        '<th class="text" scope="col">window</th><th class="text" scope="col">latest (UTC)</th>'
        '<th scope="col">n</th><th scope="col">positives</th>'
        '<th scope="col">class ratio vs reference</th><th scope="col">AP</th>'
        '<th scope="col">calibrated AP</th><th scope="col">AP change: prior part</th>'
        '<th scope="col">AP change: likelihood part</th><th class="text" scope="col">state</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return _page("models", body, logout=logout)


def _times(records: Sequence[WindowRecord], *, numbered: bool) -> tuple[list[float], float]:
    """Window starts (Unix seconds), where the charts put each window as the tables list it,
    and half a window length; ``numbered`` (records without real dates): the windows'
    positions 1, 2, … and half a step."""
    if numbered:
        return [float(i) for i in range(1, len(records) + 1)], 0.5
    times: list[float] = []
    half = 0.0
    for record in records:
        start = datetime.fromisoformat(record["start"]).timestamp()
        end = datetime.fromisoformat(record["end"]).timestamp()
        times.append(start)
        half = (end - start) / 2
    return times, half


def _banded(
    label: str,
    css: str,
    items: Sequence[Item],
    value: Callable[[Item], float | None],
    band: Callable[[Item], Bounds | None],
    *,
    dashed: bool = False,
) -> Series:
    """A line of ``value`` over ``items`` (one per window) with the 95% band ``band`` gives."""
    return Series(label, [value(i) for i in items], css, [band(i) for i in items], dashed=dashed)


def metric_chart(
    records: Sequence[WindowRecord],
    metric: str,
    *,
    chart_id: str,
    times: Sequence[float],
    half: float,
    numbered: bool = False,
) -> str:
    """Regular against calibrated (at the reference prior) ``metric`` with 95% bands, and the
    reference's value; a metric that does not depend on the class ratio has no calibrated
    line."""
    name = metric_name(metric)
    series = [
        _banded(
            f"{name} (regular)",
            "s0",
            records,
            lambda r: _metric(r, metric),
            lambda r: _metric_interval(r, metric),
        )
    ]
    if any(_metric(r, metric, calibrated=True) is not None for r in records):
        series.append(
            _banded(
                f"{name} calibrated at the reference ratio",
                "s1",
                records,
                lambda r: _metric(r, metric, calibrated=True),
                lambda r: _metric_interval(r, metric, calibrated=True),
            )
        )
    series.append(
        Series("reference", [_reference_metric(r, metric) for r in records], "ref", dashed=True)
    )
    return time_chart(
        chart_id=chart_id,
        title=f"{name}: regular and calibrated per window",
        desc=(
            f"{name} of each window as measured (regular) and calibrated at the reference's "
            "class ratio, with their 95% intervals as shaded bands, and the reference's value."
        ),
        y_label=metric_title(metric),
        times=times,
        series=series,
        half_window=half,
        numbered=numbered,
    )


def split_chart(
    readings: Sequence[WindowReading],
    records: Sequence[WindowRecord],
    *,
    times: Sequence[float],
    half: float,
    numbered: bool = False,
) -> str:
    """The change of average precision from the reference split into its prior part (what the
    class ratio explains) and likelihood part (what the model's scores explain), with 95%
    bands, the total, and the zero line."""
    totals = [
        None
        if (split := r["split"]) is None or (parts := split_parts(split, VERDICT_METRIC)) is None
        else number(parts["total"])
        for r in records
    ]
    return time_chart(
        chart_id="split",
        title="Change of average precision from the reference, split in two parts",
        desc=(
            "Per window, the total change of average precision from the reference, its prior "
            "part (explained by the class ratio) and its likelihood part (explained by the "
            "model's scores), with 95% intervals as shaded bands. A likelihood part below 0 "
            "means the model got worse."
        ),
        y_label="change of average precision",
        times=times,
        series=[
            _banded(
                "prior part", "s2", readings, lambda x: x.prior_part, lambda x: x.prior_interval
            ),
            _banded(
                "likelihood part",
                "s3",
                readings,
                lambda x: x.likelihood_part,
                lambda x: x.likelihood_interval,
            ),
            Series("total", totals, "s0", dashed=True),
        ],
        levels=[Level("no change", 0.0)],
        half_window=half,
        numbered=numbered,
    )


def ratio_chart(
    readings: Sequence[WindowReading],
    records: Sequence[WindowRecord],
    *,
    times: Sequence[float],
    half: float,
    numbered: bool = False,
) -> str:
    """The positive class ratio (labels) with its Wilson band, the reference's with its band,
    and the label-free estimate with its band."""
    estimated = [r["estimated"] for r in records]
    return time_chart(
        chart_id="ratio",
        title="Positive class ratio per window against the reference",
        desc=(
            "Per window, the fraction of positive labels with its 95% interval, the reference's "
            "ratio with its 95% interval, and the ratio estimated from the scores alone "
            "(without labels) with its 95% interval."
        ),
        y_label="positive class ratio (fraction)",
        times=times,
        series=[
            _banded("from labels", "s0", readings, lambda x: x.ratio, lambda x: x.ratio_interval),
            _banded(
                "estimated without labels",
                "s1",
                estimated,
                lambda e: None if e is None else number(e["positive_class_ratio"]),
                lambda e: None if e is None else bounds(e["positive_class_ratio_interval"]),
                dashed=True,
            ),
            _banded(
                "reference",
                "ref",
                readings,
                lambda x: x.reference_ratio,
                lambda x: x.reference_interval,
            ),
        ],
        half_window=half,
        numbered=numbered,
    )


def _options(values: Sequence[str], selected: str) -> str:
    return "".join(
        f'<option value="{escape(v)}"{" selected" if v == selected else ""}>{escape(v)}</option>'
        for v in values
    )


def verdict_table(
    records: Sequence[WindowRecord],
    readings: Sequence[WindowReading],
    *,
    selected: str | None,
    link: Mapping[str, str] | None,
    model_path: str,
    numbered: bool = False,
) -> str:
    """Newest window first: counts, ratio, AP, the two parts and the verdict with what it is
    compared against; each start links to the page with that window's reliability diagram.
    Without ``link`` (a report saved as a file, which has no other page) the starts are plain
    text; ``numbered`` names each window by its position instead of its start. Every row is on
    the page (no scrolling box) and every cell holds a value and at most a small line of
    detail, so that the table reads on screen and in print alike."""
    rows = []
    base = None if link is None else f"{model_path}?{urlencode(link)}&window="
    for position, record, reading in zip(
        range(len(records), 0, -1), reversed(records), reversed(readings), strict=True
    ):
        start = record["start"]
        css = ' class="selected"' if start == selected else ""
        shown = (
            escape(window_name(start, position, numbered=numbered))
            if numbered
            else f'<time datetime="{escape(start)}">{escape(_short_time(start))}</time>'
        )
        if base is not None:
            shown = f'<a href="{escape(base + quote_plus(start))}">{shown}</a>'
        verdict, verdict_class, _ = window_verdict(record, reading)
        rows.append(
            f'<tr{css}><td class="text">{shown}</td>'
            f"<td>{record['n']:,}</td><td>{record['n_pos']:,}</td>"
            f"<td>{record['unlabelled']:,}</td>"
            f"<td>{_ratio_cell(record, reading)}</td>"
            f"<td>{format_number(_metric(record, VERDICT_METRIC))}</td>"
            f"<td>{format_number(_metric(record, VERDICT_METRIC, calibrated=True))}</td>"
            f"<td>{_stacked(signed(reading.prior_part), interval_text(reading.prior_interval))}"
            "</td><td>"
            + _stacked(signed(reading.likelihood_part), interval_text(reading.likelihood_interval))
            + f"</td>{_decision_cells(record)}"
            f'<td class="text verdict"><span class="{verdict_class}">{escape(verdict)}</span>'
            f'<span class="detail">{escape(_verdict_against(record, numbered=numbered))}</span>'
            "</td></tr>"
        )
    return (
        '<table id="verdicts" class="verdicts"><caption class="muted">Per window, newest first '
        "(UTC). The parts are the AP change from the reference, with their 95% intervals under "
        "them; a dash marks a value not defined yet (calibrated AP needs a reference with both "
        "classes; the parts need a reference, their intervals at least 100 positives in the "
        "window and in the reference). Before most of a window is labelled, its class ratio "
        "and verdict are estimated from the scores (est.). Each verdict names what it is "
        "compared against.</caption>"
        f'<thead><tr><th class="text" scope="col">{NUMBER_AXIS if numbered else TIME_AXIS}</th>'
        '<th scope="col">n</th>'
        '<th scope="col">positives</th><th scope="col">unlabelled</th>'
        '<th scope="col">class ratio</th>'
        '<th scope="col">AP</th><th scope="col">calibrated AP</th>'
        '<th scope="col">prior part</th><th scope="col">likelihood part</th>'
        '<th scope="col">decision pools</th><th scope="col">decision: likelihood part</th>'
        '<th class="text" scope="col">verdict (decision)</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def window_name(start: str, position: int, *, numbered: bool) -> str:
    """How the page names a window: its start, or ``window N`` (its position, from 1) when
    the records have no real dates."""
    return f"window {position}" if numbered else start


def _pooled(decision: DecisionReading) -> str:
    """The pooled span of a decision: windows, positives of labelled predictions."""
    positives = DASH if decision.n_pos is None else plural(decision.n_pos, "positive")
    labelled = DASH if decision.n is None else f"{decision.n:,}"
    return f"{plural(decision.windows, 'window')}: {positives} in {labelled}"


def _decision_cells(record: WindowRecord) -> str:
    """The decision's cells of a row of the verdict table: span and counts, and its
    likelihood part."""
    decision = read_decision(record)
    positives = DASH if decision.n_pos is None else plural(decision.n_pos, "positive")
    labelled = DASH if decision.n is None else f"{decision.n:,}"
    return (
        f"<td>{_stacked(plural(decision.windows, 'window'), f'{positives} in {labelled}')}</td>"
        "<td>"
        + _stacked(signed(decision.likelihood_part), interval_text(decision.likelihood_interval))
        + "</td>"
    )


def _explain_decision(decision: DecisionReading) -> str:
    """One sentence on a window's pooled decision, with its numbers."""
    pooled = (
        f"Decision over {_pooled(decision)} labelled predictions"
        + (f" since {decision.start}" if decision.start and decision.windows > 1 else "")
        + ": "
    )
    ratio = (
        f"class ratio {format_number(decision.ratio, 4)}"
        f"{interval_text(decision.ratio_interval, 4)}; "
    )
    if decision.likelihood_interval is None:
        return (
            pooled
            + ratio
            + "the likelihood part has no interval yet (under 100 positives pooled within the "
            "model's decision.max_span, or no reference)."
        )
    parts = (
        pooled + ratio + "the prior part of the AP change is "
        f"{_part(decision.prior_part, decision.prior_interval)}, the likelihood part "
        f"{_part(decision.likelihood_part, decision.likelihood_interval)}."
    )
    if decision.verdict in (Verdict.MAYBE_WORSE, Verdict.RATIO_MAYBE_WORSE):
        parts += (
            " Its interval lies below 0, but the positives' shift test"
            f" (p = {_p_value(decision.shift_p_value)}) has not reached the page's level"
            f" (p < {(PAGE_P if decision.windows > 1 else OWN_PAGE_P):.3g}, with a fall of the"
            f" part by more than {PAGE_MATERIAL:.0%} of the reference AP):"
            " not yet significant;"
            " the next windows will tell."
        )
    return parts


def _verdict_sentence(record: WindowRecord, reading: WindowReading) -> str:
    """The explanation beside a window's verdict: the label-free estimate's where it speaks
    for the window, else its decision's."""
    speaks = estimate_speaks(record)
    if speaks is not None:
        return _explain_estimate(record, reading, speaks)
    return _explain_decision(read_decision(record))


def _objective_text(objective: Objective) -> str:
    """A model's objective in words."""
    if "target_precision" in objective:
        return f"precision at least {format_number(number(objective['target_precision']))}"
    if "alert_rate" in objective:
        return f"flag at most {format_number(number(objective['alert_rate']), 4)} of predictions"
    costs = objective.get("costs")
    false_positive = None if costs is None else number(costs["false_positive"])
    false_negative = None if costs is None else number(costs["false_negative"])
    return (
        f"least expected cost (false positive {format_number(false_positive)}"
        f", false negative {format_number(false_negative)})"
    )


def _p_value(value: float | None) -> str:
    """A p-value in two significant digits (``2e-42``), or a dash."""
    return DASH if value is None else f"{value:.2g}"


def advice_section(record: WindowRecord, *, name: str, segment: str) -> str:
    """The advice of a window (``docs/reference/acting.md``): the advised threshold beside the
    configured one, what it is expected to give, and whether its assumption held; or why
    there is none. Empty when the model has no objective."""
    advice = record["advice"]
    if advice is None:
        return ""
    configured = format_number(number(advice["configured_threshold"]), 4)
    objective = escape(_objective_text(advice["objective"]))
    head = (
        f"<h2>Threshold advice</h2><p>Objective: {objective}."
        f" Configured threshold: <strong>{configured}</strong>.</p>"
    )
    threshold = number(advice["threshold"])
    if threshold is None:
        reason = str(advice["reason"] or "no threshold meets the objective")
        return head + f'<p class="muted" id="advice">No advice: {escape(reason)}.</p>'
    assumption = advice["assumption"]
    if assumption is not None and assumption["holds"] is False:
        return head + (
            '<p class="withheld" id="advice"><strong>Advice withheld</strong>: the label-shift '
            f"check failed (p = {_p_value(number(assumption['p_value']))}), so P(score | class)"
            " is no longer the reference's, and a threshold computed from the reference's "
            "classes would rest on a broken assumption. Keep the configured threshold and look "
            "at the likelihood part of the change: the model or its inputs changed.</p>"
        )
    expected = advice["expected"]
    intervals = advice["expected_intervals"]
    values = (
        {}
        if expected is None
        else {
            "precision": (
                number(expected["precision"]),
                None if intervals is None else bounds(intervals["precision"]),
            ),
            "recall": (
                number(expected["recall"]),
                None if intervals is None else bounds(intervals["recall"]),
            ),
            "alert rate": (
                number(expected["alert_rate"]),
                None if intervals is None else bounds(intervals["alert_rate"]),
            ),
            "cost per prediction": (
                number(expected["cost"]),
                None if intervals is None else bounds(intervals["cost"]),
            ),
        }
    )
    rows = "".join(
        f'<tr><td class="text">{label}</td><td>{format_number(value, 4)}</td>'
        f"<td>{interval_text(interval, 4).strip() or DASH}</td></tr>"
        for label, (value, interval) in values.items()
        if value is not None
    )
    source = (
        "measured from its labels"
        if advice["prior_source"] == "measured"
        else ("estimated without labels")
    )
    check = '<p class="muted">Assumes P(score | class) is the reference\'s (label shift); ' + (
        "the check held.</p>"
        if assumption is not None and assumption["holds"]
        else "not checked.</p>"
    )
    query = urlencode({"window": record["start"], "segment": segment})
    return (
        head
        + f'<p id="advice">Advised threshold: <strong>{format_number(threshold, 4)}</strong> at '
        f"the window's class ratio {format_number(number(advice['prior']), 4)} "
        f"({source}).</p>"
        + '<table><caption class="muted">Expected at the advised threshold, with 95% intervals '
        "over the reference's sampling (not the next window's own noise)</caption>"
        f'<tr><th class="text">quantity</th><th>expected</th><th>95% interval</th></tr>{rows}'
        "</table>"
        + check
        + '<p class="muted">Recalibrated probabilities for this ratio: <code>GET '
        f"{escape(f'/v1/models/{name}/calibration?{query}')}</code> (docs/reference/acting.md).</p>"
    )


def _explain_estimate(record: WindowRecord, reading: WindowReading, verdict: Estimate) -> str:
    """One sentence on a window that its label-free estimate speaks for (one with an
    estimate: :func:`calmon.ui.verdict.estimate_speaks`)."""
    estimated = record["estimated"]
    check = None if estimated is None else estimated["label_shift"]
    p_value = format_number(None if check is None else number(check["p_value"]))
    counts = (
        f"{record['unlabelled']} of its {DASH if estimated is None else estimated['n']} scored "
        "predictions have no label yet. "
    )
    if verdict is Estimate.UNKNOWN:
        return counts + "Not enough data: the estimate needs at least 200 scored predictions."
    ratio = f"The class ratio estimated from the scores is {_estimated_ratio(record, reading)}"
    if verdict is Estimate.SCORES_CHANGED:
        return (
            counts + f"The label-shift check rejects (p = {p_value})"
            ": the scores are not a mixture of the reference's classes at any class ratio, so "
            "the model or its inputs changed. The estimate does not hold; labels are needed."
        )
    fits = (
        f"; the scores fit the reference's classes at that ratio (label-shift check p = "
        f"{p_value}). "
    )
    resolved = estimated is None or estimated["positive_class_ratio_resolved"] is not False
    precision = "" if resolved else f" (Not resolved: {UNRESOLVED}.)"
    if verdict is Estimate.FELL:
        return (
            counts
            + ratio
            + fits
            + "That reads as fewer positives, or as positives scoring lower (a model that got "
            "worse gives the same scores): labels will tell." + precision
        )
    if verdict is Estimate.ROSE:
        return (
            counts
            + ratio
            + fits
            + "That reads as more positives, or as negatives scoring like positives (a change "
            "of the inputs can give the same scores): labels will tell." + precision
        )
    return counts + ratio + fits + BLIND_SPOT + precision


def model_page(
    *,
    name: str,
    window: str,
    segment: str,
    segments: Sequence[str],
    metric: str,
    metrics: Sequence[str],
    records: Sequence[WindowRecord],
    selected: str | None,
    model_alerts: Sequence[str],
    logout: bool = False,
    standalone: str | None = None,
    numbered: bool = False,
) -> str:
    """``/ui/models/{model}``: the charts over ``records`` (oldest first, one segment), the
    reliability diagram of the ``selected`` window start (default: the latest), and the
    verdict of every window.

    ``standalone`` (HTML of an introduction) makes the same page as a file of its own, the
    offline report (:mod:`calmon.offline.html_report`): that introduction instead of the alerts and
    the form that asks the server for another segment or metric, and no link to the server.
    ``numbered`` (records of undated rows, whose bounds mean nothing) names the windows by
    their position and counts them along the charts' axis instead of showing dates.
    """
    model_path = f"/ui/models/{name}" if standalone is None else ""
    link = {"segment": segment, "metric": metric}
    form = (
        f'<form class="inline" method="get" action="{escape(model_path)}">'
        f'<label>segment<select name="segment">{_options(segments, segment)}</select></label>'
        f'<label>second metric<select name="metric">{_options(metrics, metric)}</select></label>'
        '<button type="submit">show</button></form>'
    )
    state = (
        "".join(f'<p class="alert">{_alert(a)}</p>' for a in model_alerts)
        if model_alerts
        else '<p class="ok">No alert on the latest windows.</p>'
    )
    head = f"<h1>{escape(name)}</h1><p>{escape(window)} windows.</p>{state}{form}"
    if standalone is not None:
        head = f"<h1>{escape(name)}</h1>{standalone}"
    if not records:
        body = head + f"<p>No window of segment <code>{escape(segment)}</code> computed yet.</p>"
        return _page(
            name, body, logout=logout, nav=standalone is None, standalone=standalone is not None
        )
    readings = [read_window(r) for r in records]
    times, half = _times(records, numbered=numbered)
    chosen = next((r for r in records if r["start"] == selected), records[-1])
    chosen_name = str(records.index(chosen) + 1) if numbered else chosen["start"]
    latest_verdict, latest_class, _ = window_verdict(records[-1], readings[-1])
    latest_against = _verdict_against(records[-1], numbered=numbered)
    summary = (
        f'<h2>Latest window: <span class="{latest_class}">'
        f"{escape(latest_verdict)}</span> {escape(latest_against)}</h2>"
        f"<p>{escape(_verdict_sentence(records[-1], readings[-1]))}</p>"
    )
    reliability = chosen.get("reliability")
    if reliability:
        diagram = reliability_chart(
            chart_id="reliability",
            title=f"Reliability diagram of window {chosen_name}"
            if numbered
            else f"Reliability diagram of the window starting {chosen_name}",
            rows=reliability,
        )
    else:
        diagram = (
            '<p class="muted">No reliability diagram: the model\'s scores are not '
            "probabilities, or the window has no labelled prediction.</p>"
        )
    chosen_reading = read_window(chosen)
    chosen_verdict, chosen_class, _ = window_verdict(chosen, chosen_reading)
    body = (
        head + summary + f'<p class="muted">{plural(len(records), "window")} of segment'
        f" <code>{escape(segment)}</code>. Shaded bands are 95% intervals.</p>"
        + "<h2>Average precision</h2>"
        + metric_chart(
            records, VERDICT_METRIC, chart_id="ap", times=times, half=half, numbered=numbered
        )
        + "<h2>Prior and likelihood parts of the change</h2>"
        + split_chart(readings, records, times=times, half=half, numbered=numbered)
        + "<h2>Positive class ratio</h2>"
        + ratio_chart(readings, records, times=times, half=half, numbered=numbered)
        + f"<h2>{escape(metric_title(metric))}</h2>"
        + metric_chart(
            records, metric, chart_id="metric", times=times, half=half, numbered=numbered
        )
        + f"<h2>Window {escape(chosen_name)}</h2>"
        + f'<p><span class="{chosen_class}">'
        f"{escape(chosen_verdict)}</span> {escape(_verdict_against(chosen, numbered=numbered))}."
        f" {escape(_verdict_sentence(chosen, chosen_reading))}</p>"
        + advice_section(chosen, name=name, segment=segment)
        + diagram
        + "<h2>Verdict per window</h2>"
        + verdict_table(
            records,
            readings,
            selected=chosen["start"],
            link=link if standalone is None else None,
            model_path=model_path,
            numbered=numbered,
        )
    )
    return _page(
        name, body, logout=logout, nav=standalone is None, standalone=standalone is not None
    )


def login_page(*, error: str | None, next_path: str) -> str:
    """The form that asks for a token with the ``read`` scope."""
    message = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    body = (
        "<h1>Log in</h1><p>This server needs a token with the <code>read</code> scope "
        "(one of <code>CALMON_API_TOKENS</code>).</p>"
        f'{message}<form method="post" action="/ui/login">'
        f'<input type="hidden" name="next" value="{escape(next_path)}">'
        '<label>token<input type="password" name="token" autocomplete="current-password" '
        'required autofocus></label><p><button type="submit">log in</button></p></form>'
    )
    return _page("log in", body, nav=False)


def not_found_page(name: str) -> str:
    """The page of a model that does not exist."""
    return _page(
        "not found", f"<h1>Not found</h1><p>No model named <code>{escape(name)}</code>.</p>"
    )
