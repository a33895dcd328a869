"""The Prometheus series contract (docs/reference/design.md, "Prometheus series"), as data.

``FAMILIES`` names every metric family calmon exports, with its type, its label names (target
labels such as ``job`` and ``instance`` are added by Prometheus, see ``TARGET_LABELS``) and the
processes that export it: the API (`calmon api`) or the scheduler (`calmon scheduler`);
`calmon serve` exports both sets. ``SERIES`` expands the families into the sample names a query
uses: a gauge under its own name, a counter as ``<name>_total``, a histogram as ``_bucket``
(with ``le``), ``_sum`` and ``_count``.

Dashboards and rules are checked against ``SERIES``; tests/integration/deploy/test_scrape.py
checks both lists against a real scrape of both processes, both ways: every family and sample
name listed here is exported, with exactly these labels, and nothing else under ``calmon_``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from harness.promql import Selector, selectors

#: every metric of docs/reference/metrics.md, in its order
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

#: metrics without a 95% interval (docs/reference/intervals.md): no ``_lower``/``_upper`` series
NO_INTERVAL: Final[frozenset[str]] = frozenset(
    {"best_f1_threshold", "ece", "mce", "best_f1", "pr_gain_auc", "ks"}
)

#: metrics whose change is split into prior and likelihood parts
SPLIT: Final[tuple[str, ...]] = ("precision", "f1", "average_precision", "best_f1", "pr_gain_auc")

#: split metrics whose parts have a 95% interval: ``calmon_<metric>_change_lower``/``_upper``
SPLIT_INTERVAL: Final[tuple[str, ...]] = ("precision", "f1", "average_precision")

#: label-free estimated metrics, ``calmon_estimated_<metric>`` (docs/reference/metrics.md,
#: "Label-free estimates")
ESTIMATED: Final[tuple[str, ...]] = ("precision", "recall", "f1", "roc_auc", "average_precision")

#: estimated metrics with a ``pi0`` label (``observed`` = at the estimated ratio, or a configured
#: prior; never ``reference``)
ESTIMATED_PRIOR_DEPENDENT: Final[frozenset[str]] = frozenset(
    {"precision", "f1", "average_precision"}
)

#: values of the ``component`` label of ``calmon_<metric>_change``
COMPONENTS: Final[frozenset[str]] = frozenset({"total", "prior", "likelihood"})

#: components whose ``calmon_<metric>_change_lower``/``_upper`` (95% interval) exist
INTERVAL_COMPONENTS: Final[frozenset[str]] = frozenset({"prior", "likelihood"})

#: the two named ``pi0`` variants; the others are configured priors such as "0.5"
NAMED_PI0: Final[frozenset[str]] = frozenset({"observed", "reference"})

#: labels Prometheus attaches to every scraped series
TARGET_LABELS: Final[frozenset[str]] = frozenset({"job", "instance"})

WINDOW: Final[frozenset[str]] = frozenset({"model", "segment"})

Kind = Literal["gauge", "counter", "histogram"]
Process = Literal["api", "scheduler"]

API: Final[frozenset[Process]] = frozenset({"api"})
SCHEDULER: Final[frozenset[Process]] = frozenset({"scheduler"})


@dataclass(frozen=True)
class Family:
    """One metric family: its type, label names and the processes exporting it."""

    kind: Kind
    labels: frozenset[str]
    processes: frozenset[Process] = API

    def samples(self, name: str) -> dict[str, frozenset[str]]:
        """Sample name -> label names of the family called ``name``."""
        if self.kind == "counter":
            return {f"{name}_total": self.labels}
        if self.kind == "histogram":
            return {
                f"{name}_bucket": self.labels | {"le"},
                f"{name}_sum": self.labels,
                f"{name}_count": self.labels,
            }
        return {name: self.labels}


def _families() -> dict[str, Family]:
    families: dict[str, Family] = {}
    for metric in CATALOGUE:
        labels = WINDOW | {"pi0"} if metric in PRIOR_DEPENDENT else WINDOW
        bounds = ("",) if metric in NO_INTERVAL else ("", "_lower", "_upper")
        for suffix in bounds:
            families[f"calmon_{metric}{suffix}"] = Family("gauge", labels)
        families[f"calmon_{metric}_reference"] = Family("gauge", WINDOW)
    for metric in SPLIT:
        suffixes = ("_change", "_change_lower", "_change_upper")
        for suffix in suffixes if metric in SPLIT_INTERVAL else suffixes[:1]:
            families[f"calmon_{metric}{suffix}"] = Family("gauge", WINDOW | {"component"})
    for metric in ESTIMATED:
        labels = WINDOW | {"pi0"} if metric in ESTIMATED_PRIOR_DEPENDENT else WINDOW
        families[f"calmon_estimated_{metric}"] = Family("gauge", labels)
    for name in (
        "estimated_positive_class_ratio",
        "estimated_positive_class_ratio_lower",
        "estimated_positive_class_ratio_upper",
        "estimated_label_shift_p_value",
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
        "decision_windows",
        "decision_predictions",
        "decision_positives",
        "decision_positive_class_ratio",
        "decision_positive_class_ratio_lower",
        "decision_positive_class_ratio_upper",
        "decision_positives_shift_p_value",
    ):
        families[f"calmon_{name}"] = Family("gauge", WINDOW)
    for suffix in ("", "_lower", "_upper"):
        families[f"calmon_decision_change{suffix}"] = Family("gauge", WINDOW | {"component"})
    families["calmon_advised_threshold"] = Family("gauge", WINDOW)
    families["calmon_advised_expected"] = Family("gauge", WINDOW | {"quantity"})
    families["calmon_advice_assumption_holds"] = Family("gauge", WINDOW)
    for name in ("calmon_reference_info", "calmon_decision_reference_info"):
        families[name] = Family("gauge", WINDOW | {"kind", "against"})
    model = frozenset({"model"})
    none = frozenset[str]()
    families |= {
        "calmon_segments_overflow_predictions": Family("gauge", model),
        "calmon_exporter_segments_omitted": Family("gauge", model),
        "calmon_predictions_ingested": Family("counter", model),
        "calmon_predictions_duplicate": Family("counter", model),
        "calmon_labels_ingested": Family("counter", model),
        "calmon_ingest_rejected": Family("counter", frozenset({"reason"})),
        "calmon_http_requests": Family("counter", frozenset({"method", "route", "status"})),
        "calmon_http_request_duration_seconds": Family("histogram", frozenset({"method", "route"})),
        "calmon_window_compute_duration_seconds": Family("histogram", none, SCHEDULER),
        "calmon_window_compute_failures": Family("counter", model, SCHEDULER),
        "calmon_segments_overflow": Family("counter", model, SCHEDULER),
        "calmon_last_compute_success_timestamp_seconds": Family("gauge", none, SCHEDULER),
        "calmon_windows_pending": Family("gauge", none, SCHEDULER),
        "calmon_windows_computed": Family("counter", none, SCHEDULER),
        "calmon_scheduler_leader": Family("gauge", none, SCHEDULER),
        "calmon_build_info": Family("gauge", frozenset({"version"}), API | SCHEDULER),
    }
    return families


#: family name (as a scrape's parser reports it: counters without ``_total``) -> family
FAMILIES: Final[dict[str, Family]] = _families()

#: sample name -> label names of the series (without target labels)
SERIES: Final[dict[str, frozenset[str]]] = {
    sample: labels
    for name, family in FAMILIES.items()
    for sample, labels in family.samples(name).items()
}

#: sample names the scheduler process exports (`calmon scheduler`)
SCHEDULER_SERIES: Final[frozenset[str]] = frozenset(
    sample
    for name, family in FAMILIES.items()
    if "scheduler" in family.processes
    for sample in family.samples(name)
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
                if "_change_" in selector.name and matcher.value not in INTERVAL_COMPONENTS:
                    problems.append(
                        f"{selector.name} only exists for component=prior and =likelihood"
                    )
            elif (
                matcher.op == "="
                and matcher.label == "pi0"
                and matcher.value not in NAMED_PI0
                and not re.fullmatch(r"0?\.\d+", matcher.value)
            ):
                problems.append(f"{selector.name}: unknown pi0 {matcher.value!r}")
    return problems
