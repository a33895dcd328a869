"""The latest stored window of each model and segment, as ready-made Prometheus samples.

:func:`load_latest_windows` reads, in one statement, the latest ``window_results`` row of
each (model, segment) pair the model exports: segment ``*`` and its first ``max_segments``
tracked segments, at most models x (1 + max_segments) rows, each found by a descending probe of
the primary key however much history is stored. A segment whose latest window is more than
``QUIET_SEGMENT_WINDOWS`` windows older than the model's ``*`` window is left out.

:func:`build_snapshot` turns those records into the gauges of ``docs/design.md`` ("Prometheus
series"); undefined values are left out (a series is absent, never NaN). The samples are built
once per refresh; a scrape only copies them. The snapshot's load time is read from the
:class:`~app.clock.Clock` passed in (the machine's by default), like every other *when* of the
scheduler and the exporter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from prometheus_client.samples import Sample
from sqlalchemy import and_, func, literal, select, union_all
from sqlalchemy.orm import Session, aliased

from app.catalogue import CALIBRATED_METRICS, REGULAR_METRICS
from app.clock import SYSTEM_CLOCK, Clock
from app.db.models import Model, ModelSegment, WindowResult
from app.metrics.label_free import ESTIMATED_CALIBRATED, ESTIMATED_REGULAR
from app.metrics.split import SPLIT_METRICS

ALL_SEGMENTS: Final = "*"
#: a segment whose latest window is older than the model's by more windows is not exported
QUIET_SEGMENT_WINDOWS: Final = 7
COMPONENTS: Final = ("total", "prior", "likelihood")
#: components of ``calmon_<metric>_change`` with a 95% interval (``_lower``/``_upper``)
INTERVAL_COMPONENTS: Final = ("prior", "likelihood")
WINDOW_LABELS: Final = ("model", "segment")

#: what each catalogue metric is (docs/metrics.md), for the HELP lines
DESCRIPTIONS: Final[dict[str, str]] = {
    "precision": "Precision TP/(TP+FP) at the decision threshold",
    "recall": "Recall TP/n_pos at the decision threshold",
    "fpr": "False positive rate FP/n_neg at the decision threshold",
    "f1": "F1 score at the decision threshold",
    "roc_auc": "Area under the ROC curve",
    "average_precision": "Average precision",
    "best_f1": "Best F1 score over the thresholds",
    "best_f1_threshold": "Highest threshold reaching the best F1 score",
    "pr_gain_auc": "Area under the precision-recall-gain curve",
    "ks": "Kolmogorov-Smirnov statistic, max TPR - FPR",
    "ks_abc": "Area between the class-conditional score CDFs",
    "brier": "Brier score",
    "brier_skill": "Brier skill score against predicting the prior",
    "brier_pos": "Brier score over the positives",
    "brier_neg": "Brier score over the negatives",
    "ece": "Expected calibration error (10 equal-width bins)",
    "mce": "Maximum calibration error (10 equal-width bins)",
    "log_loss": "Log loss",
}
_PI0_HELP: Final = (
    "; pi0: observed = regular, reference = calibrated at the reference prior, "
    "or a configured prior"
)


@dataclass(frozen=True, slots=True)
class LatestWindow:
    """The latest stored window of one model and segment: its record as the API serves it."""

    model: str
    segment: str
    start: datetime
    end: datetime
    computed_at: datetime
    record: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Family:
    """One gauge family: its name, HELP text and finished samples."""

    name: str
    documentation: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every window series at one moment: ``windows`` (model, segment) pairs, ``series``
    samples in ``families``, read at ``loaded_at`` (Unix time)."""

    families: tuple[Family, ...]
    windows: int
    series: int
    loaded_at: float


EMPTY_SNAPSHOT: Final = Snapshot(families=(), windows=0, series=0, loaded_at=0.0)


def current_windows(windows: Iterable[LatestWindow]) -> list[LatestWindow]:
    """The windows still worth exporting: every model's ``*`` window, and the segments whose
    latest window started at most ``QUIET_SEGMENT_WINDOWS`` window lengths before it.

    A segment that stopped receiving predictions would otherwise show its last window's
    values, and fire alerts on them, for ever; its history stays in Prometheus and in the
    window API. ``windows`` is read once (a generator is fine).
    """
    windows = list(windows)
    latest = {w.model: w.start for w in windows if w.segment == ALL_SEGMENTS}
    return [
        w
        for w in windows
        if w.segment == ALL_SEGMENTS
        or w.model not in latest
        or w.start >= latest[w.model] - QUIET_SEGMENT_WINDOWS * (w.end - w.start)
    ]


def load_latest_windows(session: Session, *, model_id: int | None = None) -> list[LatestWindow]:
    """The latest stored window of each model (only of ``model_id`` when given) and exported
    segment (see :func:`current_windows`), ordered by model name, then ``*`` first and the
    other segments by name."""
    models = select(
        Model.id.label("model_id"),
        Model.name.label("model"),
        literal(ALL_SEGMENTS).label("segment"),
    )
    segments = (
        select(ModelSegment.model_id, Model.name, ModelSegment.name)
        .join(Model, Model.id == ModelSegment.model_id)
        .where(ModelSegment.position < Model.max_segments)
    )
    if model_id is not None:
        models = models.where(Model.id == model_id)
        segments = segments.where(Model.id == model_id)
    pairs = union_all(models, segments).subquery("pairs")
    inner = aliased(WindowResult)
    latest = (
        select(func.max(inner.starts_at))
        .where(inner.model_id == pairs.c.model_id, inner.segment == pairs.c.segment)
        .correlate(pairs)
        .scalar_subquery()
    )
    rows = session.execute(
        select(
            pairs.c.model,
            WindowResult.segment,
            WindowResult.starts_at,
            WindowResult.ends_at,
            WindowResult.computed_at,
            WindowResult.record,
        ).join(
            WindowResult,
            and_(
                WindowResult.model_id == pairs.c.model_id,
                WindowResult.segment == pairs.c.segment,
                WindowResult.starts_at == latest,
            ),
        )
    ).all()
    windows = [
        LatestWindow(
            model=model,
            segment=segment,
            start=start,
            end=end,
            computed_at=computed_at,
            record=record,
        )
        for model, segment, start, end, computed_at, record in rows
    ]
    windows.sort(key=lambda w: (w.model, w.segment != ALL_SEGMENTS, w.segment))
    return current_windows(windows)


def _number(value: Any) -> float | None:
    """A finite float, or None for anything undefined."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _interval(value: Any) -> tuple[float | None, float | None]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None, None
    return _number(value[0]), _number(value[1])


def _section(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class _Builder:
    """Collects samples per family name, in first-seen order of the families."""

    def __init__(self) -> None:
        self.samples: dict[str, list[Sample]] = {}
        self.help: dict[str, str] = {}

    def family(self, name: str, documentation: str) -> None:
        self.samples.setdefault(name, [])
        self.help.setdefault(name, documentation)

    def add(self, name: str, labels: dict[str, str], value: Any) -> None:
        number = _number(value)
        if number is not None:
            self.samples[name].append(Sample(name=name, labels=labels, value=number))

    def finish(self, windows: int, *, loaded_at: float) -> Snapshot:
        families = tuple(
            Family(name=name, documentation=self.help[name], samples=tuple(samples))
            for name, samples in self.samples.items()
            if samples
        )
        return Snapshot(
            families=families,
            windows=windows,
            series=sum(len(f.samples) for f in families),
            loaded_at=loaded_at,
        )


def _declare(builder: _Builder) -> None:
    """Every family, so that the exposition's order does not depend on the data."""
    for metric in REGULAR_METRICS:
        name = f"calmon_{metric}"
        about = DESCRIPTIONS[metric]
        extra = _PI0_HELP if metric in CALIBRATED_METRICS else ""
        builder.family(name, f"{about} of the latest window{extra}")
        builder.family(f"{name}_lower", f"Lower end of the 95% interval of {name}{extra}")
        builder.family(f"{name}_upper", f"Upper end of the 95% interval of {name}{extra}")
        builder.family(f"{name}_reference", f"{about} of the reference set (regular)")
    for metric in SPLIT_METRICS:
        name = f"calmon_{metric}_change"
        builder.family(
            name,
            f"Change of calmon_{metric} (observed) from its reference value: total, and its "
            "prior and likelihood parts",
        )
        builder.family(
            f"{name}_lower",
            f"Lower end of the 95% interval of the prior or likelihood part of {name}",
        )
        builder.family(
            f"{name}_upper",
            f"Upper end of the 95% interval of the prior or likelihood part of {name}",
        )
    for name, documentation in (
        ("calmon_positive_class_ratio", "Share of positives among the labelled predictions"),
        ("calmon_positive_class_ratio_lower", "Lower end of the 95% Wilson interval of the ratio"),
        ("calmon_positive_class_ratio_upper", "Upper end of the 95% Wilson interval of the ratio"),
        ("calmon_reference_positive_class_ratio", "Positive class ratio of the reference set"),
        ("calmon_window_predictions", "Labelled predictions of the latest window (n)"),
        ("calmon_window_positives", "Positives of the latest window"),
        ("calmon_window_unlabelled", "Predictions of the latest window still without a label"),
        ("calmon_window_start_timestamp_seconds", "Start of the latest window (Unix time)"),
        ("calmon_window_end_timestamp_seconds", "End of the latest window (Unix time)"),
        (
            "calmon_window_computed_timestamp_seconds",
            "When the latest window was computed (Unix time)",
        ),
    ):
        builder.family(name, documentation)
    for name, documentation in (
        (
            "calmon_estimated_positive_class_ratio",
            "Positive class ratio estimated without labels from every scored prediction",
        ),
        (
            "calmon_estimated_positive_class_ratio_lower",
            "Lower end of the 95% interval of the estimated positive class ratio",
        ),
        (
            "calmon_estimated_positive_class_ratio_upper",
            "Upper end of the 95% interval of the estimated positive class ratio",
        ),
    ):
        builder.family(name, documentation)
    for metric in ESTIMATED_REGULAR:
        extra = (
            "; pi0: observed = at the estimated ratio, or a configured prior"
            if metric in ESTIMATED_CALIBRATED
            else ""
        )
        builder.family(
            f"calmon_estimated_{metric}",
            f"{DESCRIPTIONS[metric]} estimated without labels at the estimated ratio{extra}",
        )
    builder.family(
        "calmon_segments_overflow_predictions",
        "Predictions of the latest window in segments beyond max_segments (counted in * only)",
    )


def _add_metrics(builder: _Builder, window: LatestWindow, labels: dict[str, str]) -> None:
    record = window.record
    regular = _section(record.get("regular"))
    calibrated = _section(record.get("calibrated"))
    intervals = _section(record.get("intervals"))
    regular_intervals = _section(intervals.get("regular"))
    calibrated_intervals = _section(intervals.get("calibrated"))
    reference = _section(_section(record.get("reference")).get("regular"))
    for metric in REGULAR_METRICS:
        name = f"calmon_{metric}"
        variants: list[tuple[dict[str, str], Any, Any]]
        if metric in CALIBRATED_METRICS:
            variants = [
                ({**labels, "pi0": "observed"}, regular.get(metric), regular_intervals.get(metric))
            ]
            for key, values in calibrated.items():
                bounds = _section(calibrated_intervals.get(key)).get(metric)
                variants.append(({**labels, "pi0": key}, _section(values).get(metric), bounds))
        else:
            variants = [(labels, regular.get(metric), regular_intervals.get(metric))]
        for variant_labels, value, bounds in variants:
            lower, upper = _interval(bounds)
            builder.add(name, variant_labels, value)
            builder.add(f"{name}_lower", variant_labels, lower)
            builder.add(f"{name}_upper", variant_labels, upper)
        builder.add(f"{name}_reference", labels, reference.get(metric))
    split = _section(record.get("split"))
    for metric in SPLIT_METRICS:
        parts = _section(split.get(metric))
        name = f"calmon_{metric}_change"
        for component in COMPONENTS:
            builder.add(name, {**labels, "component": component}, parts.get(component))
        for component in INTERVAL_COMPONENTS:
            lower, upper = _interval(parts.get(f"{component}_interval"))
            builder.add(f"{name}_lower", {**labels, "component": component}, lower)
            builder.add(f"{name}_upper", {**labels, "component": component}, upper)


def _add_estimated(builder: _Builder, record: Mapping[str, Any], labels: dict[str, str]) -> None:
    estimated = _section(record.get("estimated"))
    lower, upper = _interval(estimated.get("positive_class_ratio_interval"))
    builder.add(
        "calmon_estimated_positive_class_ratio", labels, estimated.get("positive_class_ratio")
    )
    builder.add("calmon_estimated_positive_class_ratio_lower", labels, lower)
    builder.add("calmon_estimated_positive_class_ratio_upper", labels, upper)
    regular = _section(estimated.get("regular"))
    calibrated = _section(estimated.get("calibrated"))
    for metric in ESTIMATED_REGULAR:
        name = f"calmon_estimated_{metric}"
        if metric not in ESTIMATED_CALIBRATED:
            builder.add(name, labels, regular.get(metric))
            continue
        builder.add(name, {**labels, "pi0": "observed"}, regular.get(metric))
        for key, values in calibrated.items():
            builder.add(name, {**labels, "pi0": key}, _section(values).get(metric))


def _add_window(builder: _Builder, window: LatestWindow, labels: dict[str, str]) -> None:
    record = window.record
    lower, upper = _interval(record.get("prior_interval"))
    for name, value in (
        ("calmon_positive_class_ratio", record.get("prior")),
        ("calmon_positive_class_ratio_lower", lower),
        ("calmon_positive_class_ratio_upper", upper),
        ("calmon_reference_positive_class_ratio", _section(record.get("reference")).get("prior")),
        ("calmon_window_predictions", record.get("n")),
        ("calmon_window_positives", record.get("n_pos")),
        ("calmon_window_unlabelled", record.get("unlabelled")),
        ("calmon_window_start_timestamp_seconds", window.start.timestamp()),
        ("calmon_window_end_timestamp_seconds", window.end.timestamp()),
        ("calmon_window_computed_timestamp_seconds", window.computed_at.timestamp()),
    ):
        builder.add(name, labels, value)
    if window.segment == ALL_SEGMENTS:
        overflow = _section(record.get("segments_overflow"))
        builder.add(
            "calmon_segments_overflow_predictions",
            {"model": window.model},
            overflow.get("predictions"),
        )


def build_snapshot(windows: Iterable[LatestWindow], *, clock: Clock = SYSTEM_CLOCK) -> Snapshot:
    """The window series of ``windows`` (at most one per model and segment), loaded at
    ``clock``'s now."""
    builder = _Builder()
    _declare(builder)
    count = 0
    for window in windows:
        labels = {"model": window.model, "segment": window.segment}
        _add_metrics(builder, window, labels)
        _add_estimated(builder, window.record, labels)
        _add_window(builder, window, labels)
        count += 1
    return builder.finish(count, loaded_at=clock.now().timestamp())


def load_snapshot(session: Session, *, clock: Clock = SYSTEM_CLOCK) -> Snapshot:
    """Read the latest windows (one statement) and build their series, loaded at ``clock``'s
    now."""
    return build_snapshot(load_latest_windows(session), clock=clock)
