"""Generate the Grafana dashboard deploy/grafana/dashboards/calmon.json.

The JSON is committed (Grafana provisions it as is); edit this script, then run
``python deploy/grafana/generate_dashboard.py`` to rewrite it, or ``--check`` to fail when the
committed file differs from what the script produces.

Queries only use the series of docs/reference/design.md ("Prometheus series"). Window series
describe the latest computed window, so each panel plots how that latest window's value
evolved. Every query reduces with ``max`` (gauges) or ``max by (job)`` of per-job sums
(counters) so that ``calmon serve`` scraped under both jobs is not counted twice.

Grafana's foundation SDK (``grafana-foundation-sdk``, builders generated from Grafana's
schemas) was tried for this script and not kept: the generator stayed as long (566 lines
against 571), the JSON grew by 166 lines of fields at their schema default, the SDK's
variables lack the ``definition`` Grafana shows, and its releases are told apart by a version
epoch under which the newest install is a build for an older Grafana (10.1, where compose runs
11.2). Plain dicts keep the output minimal; the tests check every query with promtool and
against the series contract.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "calmon.json"
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "prometheus"}
W = 'model="$model",segment="$segment"'

Panel = dict[str, Any]


def target(expr: str, legend: str) -> dict[str, Any]:
    """One Prometheus query of a panel (its refId is set by the panel)."""
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "range": True}


def band(expr_lower: str, expr_upper: str, name: str) -> tuple[list[str], list[Panel]]:
    """Two queries drawn as a shaded 95% interval named ``name``, and their overrides."""
    lower, upper = f"{name} 95% lower", f"{name} 95% upper"
    hidden = {"legend": True, "tooltip": False, "viz": False}
    overrides: list[Panel] = [
        {
            "matcher": {"id": "byName", "options": lower},
            "properties": [
                {"id": "custom.lineWidth", "value": 0},
                {"id": "custom.hideFrom", "value": hidden},
            ],
        },
        {
            "matcher": {"id": "byName", "options": upper},
            "properties": [
                {"id": "custom.lineWidth", "value": 0},
                {"id": "custom.fillBelowTo", "value": lower},
                {"id": "custom.fillOpacity", "value": 20},
                {"id": "custom.hideFrom", "value": hidden},
            ],
        },
    ]
    return [expr_lower, lower, expr_upper, upper], overrides


def interval(series: str, name: str, labels: str = W) -> tuple[str, str, str]:
    """The band named ``name`` of the 95% interval of ``series`` over ``labels``: the largest
    of its ``_lower`` and of its ``_upper`` gauges."""
    return f"max({series}_lower{{{labels}}})", f"max({series}_upper{{{labels}}})", name


def with_references(*metrics: tuple[str, str]) -> list[tuple[str, str]]:
    """The query and legend of each (metric, legend) of the latest window, each followed by
    the metric's value on the reference set."""
    return [
        query
        for metric, legend in metrics
        for query in (
            (f"max(calmon_{metric}{{{W}}})", legend),
            (f"max(calmon_{metric}_reference{{{W}}})", f"{legend} reference"),
        )
    ]


def timeseries(
    title: str,
    description: str,
    queries: list[tuple[str, str]],
    *,
    unit: str,
    bands: Sequence[tuple[str, str, str]] = (),
    soft_min: float | None = None,
    soft_max: float | None = None,
    draw_style: str = "line",
    wide: bool = False,
) -> Panel:
    """A time-series panel; ``bands`` are (lower expr, upper expr, name) interval pairs."""
    targets = [target(expr, legend) for expr, legend in queries]
    overrides: list[Panel] = []
    for expr_lower, expr_upper, name in bands:
        (lo_expr, lo_name, up_expr, up_name), band_overrides = band(expr_lower, expr_upper, name)
        targets += [target(lo_expr, lo_name), target(up_expr, up_name)]
        overrides += band_overrides
    for index, item in enumerate(targets):
        item["refId"] = chr(ord("A") + index)
    custom: dict[str, Any] = {
        "drawStyle": draw_style,
        "lineInterpolation": "stepAfter",
        "lineWidth": 2,
        "fillOpacity": 0,
        "showPoints": "never",
        "spanNulls": False,
    }
    if soft_min is not None:
        custom["axisSoftMin"] = soft_min
    if soft_max is not None:
        custom["axisSoftMax"] = soft_max
    return {
        "type": "timeseries",
        "gridPos": {"w": 24 if wide else 12, "h": 8},
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": overrides},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        },
    }


def stat(title: str, description: str, expr: str, *, unit: str, decimals: int) -> Panel:
    """A single-number panel showing the last value of ``expr``."""
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [target(expr, title) | {"instant": True, "range": False, "refId": "A"}],
        "fieldConfig": {"defaults": {"unit": unit, "decimals": decimals}, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "none",
            "graphMode": "none",
            "textMode": "value",
        },
    }


def row(title: str) -> Panel:
    """A section header."""
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


def metric_panels(metric: str, label: str) -> list[Panel]:
    """Regular and calibrated values of a prior-dependent metric, then the split of its change."""
    values = timeseries(
        f"{label}: regular and calibrated",
        f"{label} of the latest window: regular (π0 = observed), calibrated at the reference "
        "prior (π0 = reference) and at each configured π0, against the regular value on the "
        "reference set. Shaded: 95% intervals. A gap between observed and reference that the "
        "calibrated line does not show is the class ratio at work, not the model.",
        [
            (f"max by (pi0) (calmon_{metric}{{{W}}})", "π0 = {{pi0}}"),
            (f"max(calmon_{metric}_reference{{{W}}})", "reference set"),
        ],
        unit="percentunit",
        bands=[
            interval(f"calmon_{metric}", "observed", f'{W},pi0="observed"'),
            interval(f"calmon_{metric}", "calibrated at reference", f'{W},pi0="reference"'),
        ],
        soft_min=0,
        soft_max=1,
    )
    change = timeseries(
        f"{label}: change vs reference, prior and likelihood parts",
        f"Change of the regular {label} from the reference set (total), split into what the "
        "move of the class ratio explains (prior) and what the model's score distributions "
        "explain (likelihood), each the mean of the two orders of applying the shifts; "
        "prior + likelihood = total. Shaded: 95% intervals of both parts; the likelihood "
        "interval entirely below 0 means the model got worse.",
        [(f"max by (component) (calmon_{metric}_change{{{W}}})", "{{component}}")],
        unit="percentunit",
        bands=[
            interval(f"calmon_{metric}_change", component, f'{W},component="{component}"')
            for component in ("prior", "likelihood")
        ],
    )
    return [values, change]


def rate_per_job(series: str, by: str, selector: str = "") -> str:
    """Per-second rate of a counter summed over targets, deduplicated across jobs."""
    return f"max by ({by}) (sum by ({by}, job) (rate({series}{{{selector}}}[$__rate_interval])))"


def panels() -> list[Panel]:
    """Every panel, in display order."""
    out: list[Panel] = [
        row("Latest window"),
        stat(
            "Positive class ratio",
            "Share of positives among the labelled predictions of the latest window.",
            f"max(calmon_positive_class_ratio{{{W}}})",
            unit="percentunit",
            decimals=2,
        ),
        stat(
            "Reference positive class ratio",
            "Share of positives in the reference set.",
            f"max(calmon_reference_positive_class_ratio{{{W}}})",
            unit="percentunit",
            decimals=2,
        ),
        stat(
            "AP calibrated at reference",
            "Average precision of the latest window calibrated at the reference prior.",
            f'max(calmon_average_precision{{{W},pi0="reference"}})',
            unit="percentunit",
            decimals=1,
        ),
        stat(
            "AP likelihood change",
            "Part of the AP change from the reference that the model itself explains.",
            f'max(calmon_average_precision_change{{{W},component="likelihood"}})',
            unit="percentunit",
            decimals=1,
        ),
        row("Class ratio"),
        timeseries(
            "Positive class ratio vs reference",
            "Positive class ratio of the latest window with its 95% Wilson interval (shaded), "
            "against the ratio of the reference set. The prior-shift alert fires when the "
            "interval excludes the reference and the ratio moved by more than a factor 1.5.",
            [
                (f"max(calmon_positive_class_ratio{{{W}}})", "window"),
                (f"max(calmon_reference_positive_class_ratio{{{W}}})", "reference"),
            ],
            unit="percentunit",
            bands=[interval("calmon_positive_class_ratio", "window")],
            soft_min=0,
            wide=True,
        ),
        row("Label-free estimates"),
        timeseries(
            "Estimated positive class ratio, before the labels land",
            "Positive class ratio estimated without labels from every scored prediction of the "
            "latest window (EM prior adjustment on the reference's isotonic levels), with its "
            "95% interval (shaded), against the measured ratio of the labelled predictions and "
            "the reference ratio. It assumes that P(score | y) is the reference's: a likelihood "
            "drift moves it too, and only labels tell the two apart. The estimated-shift alert "
            "fires when the whole interval leaves the band from the reference ratio / 1.5 to "
            "1.5 times it.",
            [
                (f"max(calmon_estimated_positive_class_ratio{{{W}}})", "estimated"),
                (f"max(calmon_positive_class_ratio{{{W}}})", "measured"),
                (f"max(calmon_reference_positive_class_ratio{{{W}}})", "reference"),
            ],
            unit="percentunit",
            bands=[interval("calmon_estimated_positive_class_ratio", "estimated")],
            soft_min=0,
        ),
        timeseries(
            "Estimated vs measured precision, F1 and AP",
            "Regular precision, F1 (at the decision threshold) and average precision estimated "
            "without labels at the estimated ratio, against the measured values once labels "
            "land. The estimates have no interval (docs/reference/metrics.md).",
            [
                (f'max(calmon_{prefix}{metric}{{{W},pi0="observed"}})', f"{name} {kind}")
                for prefix, kind in (("estimated_", "estimated"), ("", "measured"))
                for metric, name in (
                    ("precision", "precision"),
                    ("f1", "F1"),
                    ("average_precision", "AP"),
                )
            ],
            unit="percentunit",
            soft_min=0,
            soft_max=1,
        ),
        row("Average precision and F1"),
        *metric_panels("average_precision", "Average precision"),
        *metric_panels("f1", "F1 at the decision threshold"),
        row("Prior-invariant and probability metrics"),
        timeseries(
            "ROC AUC and KS",
            "Prior-invariant ranking metrics of the latest window against their reference "
            "values; they move only when the model's score distributions move. Shaded: 95% "
            "interval of ROC AUC.",
            with_references(("roc_auc", "ROC AUC"), ("ks", "KS")),
            unit="percentunit",
            bands=[interval("calmon_roc_auc", "ROC AUC")],
            soft_min=0,
            soft_max=1,
        ),
        timeseries(
            "Brier score and ECE (probability models)",
            "Calibration of the predicted probabilities: Brier score and expected calibration "
            "error (10 equal-width bins), against the reference set. Empty for models whose "
            "scores are not probabilities.",
            with_references(("brier", "Brier"), ("ece", "ECE")),
            unit="none",
            bands=[interval("calmon_brier", "Brier")],
            soft_min=0,
        ),
        row("Volume and freshness"),
        timeseries(
            "Window volume",
            "Labelled predictions and positives of the latest window, and predictions still "
            "without a label.",
            [
                (f"max(calmon_window_predictions{{{W}}})", "labelled predictions"),
                (f"max(calmon_window_positives{{{W}}})", "positives"),
                (f"max(calmon_window_unlabelled{{{W}}})", "unlabelled"),
            ],
            unit="short",
            soft_min=0,
        ),
        timeseries(
            "Unlabelled share",
            "Share of the latest window's predictions that have no label yet: unlabelled / "
            "(labelled + unlabelled). Metrics only use labelled predictions.",
            [
                (
                    f"max(calmon_window_unlabelled{{{W}}}) / (max(calmon_window_unlabelled"
                    f"{{{W}}}) + max(calmon_window_predictions{{{W}}}))",
                    "unlabelled share",
                )
            ],
            unit="percentunit",
            soft_min=0,
            soft_max=1,
        ),
        timeseries(
            "Computation lag",
            "Computation lag: when the latest window was computed minus when it ended (grace "
            "plus scheduling delay; recomputations after late labels raise it). Age: time "
            "since that computation, and since the scheduler last completed any computation.",
            [
                (
                    f"max(calmon_window_computed_timestamp_seconds{{{W}}}) - "
                    f"max(calmon_window_end_timestamp_seconds{{{W}}})",
                    "computed - window end",
                ),
                (
                    f"time() - max(calmon_window_computed_timestamp_seconds{{{W}}})",
                    "age of the latest computation",
                ),
                (
                    "time() - max(calmon_last_compute_success_timestamp_seconds)",
                    "since the scheduler's last success (any model)",
                ),
            ],
            unit="s",
            soft_min=0,
        ),
        timeseries(
            "Segments over the limit",
            "Predictions of the latest window whose segment was beyond the model's "
            "max_segments (counted only in segment *).",
            [('max(calmon_segments_overflow_predictions{model="$model"})', "overflow")],
            unit="short",
            soft_min=0,
        ),
        row("Operations"),
        timeseries(
            "Ingestion",
            "Predictions and labels accepted per second for this model.",
            [
                (
                    rate_per_job("calmon_predictions_ingested_total", "model", 'model="$model"'),
                    "predictions/s",
                ),
                (
                    rate_per_job("calmon_labels_ingested_total", "model", 'model="$model"'),
                    "labels/s",
                ),
            ],
            unit="short",
            soft_min=0,
        ),
        timeseries(
            "Rejected predictions",
            "Predictions rejected per second (all models), by reason.",
            [(rate_per_job("calmon_ingest_rejected_total", "reason"), "{{reason}}")],
            unit="short",
            soft_min=0,
        ),
        timeseries(
            "HTTP requests",
            "Requests per second by route and status class.",
            [
                (
                    rate_per_job("calmon_http_requests_total", "route, status"),
                    "{{route}} {{status}}",
                )
            ],
            unit="reqps",
            soft_min=0,
        ),
        timeseries(
            "HTTP latency (p95)",
            "95th percentile of request duration by route.",
            [
                (
                    "histogram_quantile(0.95, "
                    + rate_per_job("calmon_http_request_duration_seconds_bucket", "le, route")
                    + ")",
                    "{{route}}",
                )
            ],
            unit="s",
            soft_min=0,
        ),
        timeseries(
            "Window computation duration",
            "Duration of window computations, median and 95th percentile.",
            [
                (
                    f"histogram_quantile({quantile}, "
                    + rate_per_job("calmon_window_compute_duration_seconds_bucket", "le")
                    + ")",
                    name,
                )
                for quantile, name in ((0.5, "p50"), (0.95, "p95"))
            ],
            unit="s",
            soft_min=0,
        ),
        timeseries(
            "Scheduler",
            "Which scheduler instance holds the leader lock (change scan, retention; exactly "
            "one should), how many do, windows due and not computed yet (the largest count a "
            "scheduler reports), and how many processes run each version.",
            [
                ("max by (instance) (calmon_scheduler_leader)", "leader {{instance}}"),
                ("sum(max by (instance) (calmon_scheduler_leader))", "leaders"),
                ("max(calmon_windows_pending)", "pending windows"),
                (
                    "count by (version) (max by (instance, version) (calmon_build_info))",
                    "processes running {{version}}",
                ),
            ],
            unit="short",
            soft_min=0,
        ),
        timeseries(
            "Windows computed",
            "Windows computed per minute by each scheduler process (every process claims and "
            "computes due windows on PostgreSQL) and by all together; compare with the pending "
            "windows of the Scheduler panel.",
            [
                (
                    "60 * max by (instance) "
                    "(rate(calmon_windows_computed_total[$__rate_interval]))",
                    "{{instance}}",
                ),
                (
                    "60 * sum(max by (instance) "
                    "(rate(calmon_windows_computed_total[$__rate_interval])))",
                    "all schedulers",
                ),
            ],
            unit="short",
            soft_min=0,
        ),
    ]
    return out


def layout(items: list[Panel]) -> list[Panel]:
    """Place panels on Grafana's 24-column grid, left to right; rows start a new line."""
    x = y = 0
    line_height = 0
    for panel_id, panel in enumerate(items, start=1):
        kind = panel["type"]
        size = panel.get("gridPos") or {"row": {"w": 24, "h": 1}, "stat": {"w": 6, "h": 4}}[kind]
        width, height = size["w"], size["h"]
        if kind == "row" or x + width > 24:
            x, y = 0, y + line_height
            line_height = 0
        panel["id"] = panel_id
        panel["gridPos"] = {"h": height, "w": width, "x": x, "y": y}
        x += width
        line_height = max(line_height, height)
        if kind == "row":
            x, y, line_height = 0, y + height, 0
    return items


def variable(name: str, label: str, query: str, *, default: str | None = None) -> Panel:
    """A single-value template variable filled by a ``label_values`` query."""
    current: dict[str, Any] = {}
    if default is not None:
        current = {"selected": True, "text": default, "value": default}
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor"},
        "refresh": 2,
        "sort": 1,
        "multi": False,
        "includeAll": False,
        "current": current,
        "options": [],
        "hide": 0,
    }


def build_dashboard() -> dict[str, Any]:
    """The whole dashboard as Grafana's JSON model."""
    return {
        "uid": "calmon",
        "title": "calmon: model quality",
        "description": "Regular and prior-calibrated metrics of binary classifiers, per window.",
        "tags": ["calmon"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "1m",
        "time": {"from": "now-2d", "to": "now"},
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": {
            "list": [
                variable("model", "Model", "label_values(calmon_window_predictions, model)"),
                variable(
                    "segment",
                    "Segment",
                    'label_values(calmon_window_predictions{model="$model"}, segment)',
                    default="*",
                ),
            ]
        },
        "panels": layout(panels()),
    }


def render() -> str:
    """The dashboard file's exact text."""
    return json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the dashboard, or with ``--check`` report whether the committed file is current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.name} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
