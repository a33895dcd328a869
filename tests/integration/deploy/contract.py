"""The Prometheus series contract (docs/design.md, "Prometheus series"), as data.

``SERIES`` maps every series name calmon exports to the label names it carries (target labels
such as ``job`` and ``instance`` are added by Prometheus, see ``TARGET_LABELS``). Dashboards and
rules are checked against it; the exporter's tests can import it to check the other side.
Histograms appear under their exposition names (``_bucket`` with ``le``, ``_sum``, ``_count``).
"""

from __future__ import annotations

import re
from typing import Final

from tests.integration.deploy.promql import Selector, selectors

#: every metric of docs/metrics.md, in its order
CATALOGUE: Final[tuple[str, ...]] = (
    "precision",
    "recall",
    "fpr",
    "f1",
    "roc_auc",
    "average_precision",
    "best_f1",
    "best_f1_threshold",
    "pr_gain_auc",
    "ks",
    "ks_abc",
    "brier",
    "brier_skill",
    "brier_pos",
    "brier_neg",
    "ece",
    "mce",
    "log_loss",
)

#: metrics that depend on the class ratio: exported once per ``pi0`` variant
PRIOR_DEPENDENT: Final[frozenset[str]] = frozenset(
    {"precision", "f1", "average_precision", "best_f1", "best_f1_threshold", "pr_gain_auc"}
)

#: metrics whose change is split into prior and likelihood parts
SPLIT: Final[tuple[str, ...]] = ("precision", "f1", "average_precision", "best_f1", "pr_gain_auc")

#: values of the ``component`` label of ``calmon_<metric>_change``
COMPONENTS: Final[frozenset[str]] = frozenset({"total", "prior", "likelihood"})

#: the two named ``pi0`` variants; the others are configured priors such as "0.5"
NAMED_PI0: Final[frozenset[str]] = frozenset({"observed", "reference"})

#: labels Prometheus attaches to every scraped series
TARGET_LABELS: Final[frozenset[str]] = frozenset({"job", "instance"})

WINDOW: Final[frozenset[str]] = frozenset({"model", "segment"})


def _histogram(name: str, labels: frozenset[str]) -> dict[str, frozenset[str]]:
    return {
        f"{name}_bucket": labels | {"le"},
        f"{name}_sum": labels,
        f"{name}_count": labels,
    }


def _series() -> dict[str, frozenset[str]]:
    series: dict[str, frozenset[str]] = {}
    for metric in CATALOGUE:
        labels = WINDOW | {"pi0"} if metric in PRIOR_DEPENDENT else WINDOW
        for suffix in ("", "_lower", "_upper"):
            series[f"calmon_{metric}{suffix}"] = labels
        series[f"calmon_{metric}_reference"] = WINDOW
    for metric in SPLIT:
        for suffix in ("_change", "_change_lower", "_change_upper"):
            series[f"calmon_{metric}{suffix}"] = WINDOW | {"component"}
    for name in (
        "positive_class_ratio",
        "positive_class_ratio_lower",
        "positive_class_ratio_upper",
        "reference_positive_class_ratio",
        "window_predictions",
        "window_positives",
        "window_unlabelled",
        "window_start_timestamp_seconds",
        "window_end_timestamp_seconds",
        "window_computed_timestamp_seconds",
    ):
        series[f"calmon_{name}"] = WINDOW
    series["calmon_segments_overflow_predictions"] = frozenset({"model"})
    series["calmon_predictions_ingested_total"] = frozenset({"model"})
    series["calmon_labels_ingested_total"] = frozenset({"model"})
    series["calmon_ingest_rejected_total"] = frozenset({"reason"})
    series["calmon_http_requests_total"] = frozenset({"method", "route", "status"})
    series.update(
        _histogram("calmon_http_request_duration_seconds", frozenset({"method", "route"}))
    )
    series.update(_histogram("calmon_window_compute_duration_seconds", frozenset()))
    series["calmon_last_compute_success_timestamp_seconds"] = frozenset()
    series["calmon_windows_pending"] = frozenset()
    series["calmon_scheduler_leader"] = frozenset()
    series["calmon_build_info"] = frozenset({"version"})
    return series


#: series name -> label names of the series (without target labels)
SERIES: Final[dict[str, frozenset[str]]] = _series()

#: series the scheduler process exports (`calmon scheduler`); the API exports all the others
SCHEDULER_SERIES: Final[frozenset[str]] = frozenset(
    {
        *_histogram("calmon_window_compute_duration_seconds", frozenset()),
        "calmon_last_compute_success_timestamp_seconds",
        "calmon_windows_pending",
        "calmon_scheduler_leader",
        "calmon_build_info",
    }
)


def contract_violations(expr: str, extra: dict[str, frozenset[str]] | None = None) -> list[str]:
    """Problems of ``expr`` against the series contract: unknown series, labels or values."""
    known = SERIES | (extra or {})
    problems: list[str] = []
    found: list[Selector] = selectors(expr)
    if not found:
        problems.append(f"no series in {expr!r}")
    for selector in found:
        if selector.name is None:
            problems.append(f"selector without a metric name in {expr!r}")
            continue
        if selector.name not in known:
            problems.append(f"{selector.name} is not in the series contract")
            continue
        allowed = known[selector.name] | TARGET_LABELS
        for matcher in selector.matchers:
            if matcher.label not in allowed:
                problems.append(f"{selector.name} has no label {matcher.label!r}")
            elif matcher.op == "=" and matcher.label == "component":
                if matcher.value not in COMPONENTS:
                    problems.append(f"{selector.name}: unknown component {matcher.value!r}")
                if "_change_" in selector.name and matcher.value != "likelihood":
                    problems.append(f"{selector.name} only exists for component=likelihood")
            elif (
                matcher.op == "="
                and matcher.label == "pi0"
                and matcher.value not in NAMED_PI0
                and not re.fullmatch(r"0?\.\d+", matcher.value)
            ):
                problems.append(f"{selector.name}: unknown pi0 {matcher.value!r}")
    return problems
