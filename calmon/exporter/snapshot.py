"""The latest stored window of each model and segment, as ready-made Prometheus samples.

The reads are :mod:`calmon.services.stored_windows`' (re-exported here where callers of the
exporter used them): the latest window of each (model, segment) pair the model exports,
segment ``*`` and its first ``max_segments`` tracked segments, is one row of
``window_results_latest``; a segment whose latest window is more than
``QUIET_SEGMENT_WINDOWS`` windows older than the model's ``*`` window is left out.

``/metrics`` reads few of them: :func:`load_snapshot` holds a scrape to ``max_series`` series
(``CALMON_METRICS_MAX_SERIES``). It first reads which windows could be exported, without their
records (:func:`load_current`: every model's ``*`` window, and only as many of each model's
current segments, ranked and counted in the database, as the budget could pay for), chooses
within the budget (:func:`select_windows`: every model's ``*`` window, then the segments in
rounds of tracked position), and only then reads the records of the chosen windows
(:func:`load_records`), so a refresh reads and builds what is exported, not everything stored.
:func:`load_candidates` reads every pair's latest window instead. Segments left out are
counted per model in ``calmon_exporter_segments_omitted``.

:func:`build_snapshot` turns those records into the gauges of ``docs/reference/design.md``
("Prometheus series"); undefined values are left out (a series is absent, never NaN). The samples
are built once per refresh; a scrape only copies them. The snapshot's load time is read from the
:class:`~calmon.clock.Clock` passed in (the machine's by default), like every other *when* of the
scheduler and the exporter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from prometheus_client.samples import Sample
from sqlalchemy.orm import Session

from calmon.catalogue import (
    BY_NAME,
    CALIBRATED_METRICS,
    ESTIMATED_CALIBRATED,
    ESTIMATED_REGULAR,
    INTERVAL_KEYS,
    PROBABILITY_METRICS,
    REGULAR_METRICS,
    SPLIT_METRICS,
)
from calmon.clock import SYSTEM_CLOCK, Clock
from calmon.metrics.split import PART_INTERVAL_METRICS
from calmon.names import ALL_SEGMENTS
from calmon.records import WindowRecord, metric_interval, metric_value, split_parts
from calmon.services.stored_windows import (
    QUIET_SEGMENT_WINDOWS as QUIET_SEGMENT_WINDOWS,
)
from calmon.services.stored_windows import (
    LatestWindow as LatestWindow,
)
from calmon.services.stored_windows import (
    current_windows as current_windows,
)
from calmon.services.stored_windows import (
    latest_pairs,
    latest_stars,
    model_series_settings,
    ranked_segments,
)
from calmon.services.stored_windows import (
    load_latest_windows as load_latest_windows,
)
from calmon.services.stored_windows import (
    load_records as load_records,
)
from calmon.verdict import CHECK_LEVEL
from calmon.words import decision_reference, decision_words, reference_words

COMPONENTS: Final = ("total", "prior", "likelihood")
#: components of ``calmon_<metric>_change`` with a 95% interval (``_lower``/``_upper``)
INTERVAL_COMPONENTS: Final = ("prior", "likelihood")
WINDOW_LABELS: Final = ("model", "segment")
OMITTED_FAMILY: Final = "calmon_exporter_segments_omitted"
#: series of a model beside its windows': ``calmon_segments_overflow_predictions`` and
#: ``calmon_exporter_segments_omitted``
PER_MODEL_SERIES: Final = 2
#: regular metrics with a 95% interval (docs/reference/intervals.md), for every pi0 variant
INTERVAL_METRICS: Final = frozenset(
    name for name in INTERVAL_KEYS if BY_NAME[name].interval != "none"
)


def _capitalised(text: str) -> str:
    """A HELP line starts with a capital, as the exposition's other families do."""
    return text[:1].upper() + text[1:]


_WINDOW_FAMILIES: Final = (
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
)
_ESTIMATED_RATIO: Final = (
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
    (
        "calmon_estimated_label_shift_p_value",
        f"p-value of the label-shift check of the estimate (below {CHECK_LEVEL}: the scores"
        " changed in a way a class-ratio change does not explain)",
    ),
)
#: the pooled decision's series (docs/reference/metrics.md, "Decisions at few positives"); its parts
#: and their bounds by ``component`` (INTERVAL_COMPONENTS)
_DECISION_PARTS: Final = (
    (
        "calmon_decision_change",
        "Prior or likelihood part of the pooled decision's change of its metric (average "
        "precision) from the reference",
    ),
    ("calmon_decision_change_lower", "Lower end of the 95% interval of calmon_decision_change"),
    ("calmon_decision_change_upper", "Upper end of the 95% interval of calmon_decision_change"),
)
_DECISION_FAMILIES: Final = (
    ("calmon_decision_windows", "Windows the latest window's decision pools, itself included"),
    ("calmon_decision_predictions", "Labelled predictions the latest decision pools"),
    ("calmon_decision_positives", "Positives the latest decision pools"),
    ("calmon_decision_positive_class_ratio", "Positive class ratio of the pooled windows"),
    (
        "calmon_decision_positive_class_ratio_lower",
        "Lower end of the 95% Wilson interval of the pooled positive class ratio",
    ),
    (
        "calmon_decision_positive_class_ratio_upper",
        "Upper end of the 95% Wilson interval of the pooled positive class ratio",
    ),
    (
        "calmon_decision_positives_shift_p_value",
        "One-sided p-value of the test that the pooled positives score lower than the "
        "reference's (the page's test, docs/reference/metrics.md)",
    ),
)
#: what the latest window and its decision are compared with, as labels (``kind``, and
#: ``against``: the reference in words, docs/reference/references.md) of a series of value 1
_REFERENCE_INFO: Final = (
    (
        "calmon_reference_info",
        "1 for the reference the latest window is compared with; kind: trailing or fixed, "
        "against: the reference in words (docs/reference/references.md)",
    ),
    (
        "calmon_decision_reference_info",
        "1 for the reference the latest window's pooled decision is compared with; kind: "
        "trailing or fixed, against: the reference in words (docs/reference/references.md)",
    ),
)
#: series of one window's decision
DECISION_SERIES: Final = len(_DECISION_PARTS) * len(INTERVAL_COMPONENTS) + len(_DECISION_FAMILIES)
#: what the advised threshold of a window is expected to give (``calmon_advised_expected``)
ADVICE_QUANTITIES: Final = ("precision", "recall", "alert_rate", "cost")
_ADVICE: Final = (
    (
        "calmon_advised_threshold",
        "Threshold advised for the model's objective at the latest window's class ratio",
    ),
    (
        "calmon_advised_expected",
        "What the advised threshold is expected to give at the window's class ratio if "
        "P(score | class) is the reference's; quantity: precision, recall, alert_rate, cost",
    ),
    (
        "calmon_advice_assumption_holds",
        "1 when the label-shift check behind the advice held, 0 when it failed",
    ),
)
_PI0_HELP: Final = (
    "; pi0: observed = regular, reference = calibrated at the reference prior, "
    "or a configured prior"
)


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


@dataclass(frozen=True, slots=True)
class Candidate:
    """A model's latest stored window of one segment, before its record is read: where it
    stands in the model's order (``position``: -1 for ``*``, else the tracked position) and
    how many series its record can give at most (``series``)."""

    model_id: int
    model: str
    segment: str
    position: int
    start: datetime
    end: datetime
    series: int


@dataclass(frozen=True, slots=True)
class Selection:
    """The windows a scrape exports, ``*`` windows first, and per model how many of its
    current segments the budget left out."""

    windows: tuple[Candidate, ...]
    omitted: dict[str, int]


def window_series_bound(*, pi0: int, probability: bool) -> int:
    """The most series one window of a model with ``pi0`` configured priors can export:
    every value defined, and an interval wherever docs/reference/intervals.md publishes one."""
    count = 0
    for metric in REGULAR_METRICS:
        if not probability and metric in PROBABILITY_METRICS:
            continue
        variants = 2 + pi0 if metric in CALIBRATED_METRICS else 1
        bounds = 2 if metric in INTERVAL_METRICS else 0
        count += variants * (1 + bounds) + 1
    count += len(SPLIT_METRICS) * len(COMPONENTS)
    count += len(PART_INTERVAL_METRICS) * 2 * len(INTERVAL_COMPONENTS)
    count += len(_ESTIMATED_RATIO) + sum(
        1 + pi0 if metric in ESTIMATED_CALIBRATED else 1 for metric in ESTIMATED_REGULAR
    )
    count += len(ADVICE_QUANTITIES) + len(_ADVICE) - 1
    return count + len(_WINDOW_FAMILIES) + DECISION_SERIES + len(_REFERENCE_INFO)


def _bounds(session: Session) -> dict[int, tuple[str, int]]:
    """Per model id, its name and :func:`window_series_bound`."""
    return {
        model_id: (name, window_series_bound(pi0=len(pi0 or ()), probability=kind == "probability"))
        for model_id, name, kind, pi0 in model_series_settings(session)
    }


def load_candidates(session: Session) -> list[Candidate]:
    """Every model's latest ``*`` window and latest window of each tracked segment, without
    their records (two statements: the models' configurations, then the windows)."""
    bounds = _bounds(session)
    return [
        Candidate(model_id, model, segment, position, start, end, bounds[model_id][1])
        for model_id, model, segment, position, start, end in latest_pairs(session)
        if model_id in bounds
    ]


@dataclass(frozen=True, slots=True)
class Current:
    """What a budgeted refresh needs to choose its windows: every model's latest ``*``
    window, the first current segment windows of each model by tracked position (as many as
    the budget could give one model), and per model how many current segments it has."""

    candidates: list[Candidate]
    segments: dict[str, int]


def load_current(session: Session, *, max_series: int) -> Current:
    """:func:`load_candidates` for a refresh within ``max_series`` series, without reading
    every segment's window into Python: the latest ``*`` windows first (one row per model
    of ``window_results_latest``), then, in one statement, each model's current segments
    (:func:`current_windows`, decided in SQL) counted and ranked by position, returning only
    the ranks the series left after the ``*`` windows could pay for. At 100 models of 1,000
    segments the refresh thus reads about 100 rows instead of 100,100."""
    models = _bounds(session)
    stars = [
        Candidate(model_id, name, segment, position, start, end, models[model_id][1])
        for model_id, name, segment, position, start, end in latest_stars(session)
        if model_id in models
    ]
    left = max_series - sum(c.series + PER_MODEL_SERIES for c in stars)
    cheapest = min((bound for _, bound in models.values()), default=1)
    ranks = max(0, left) // max(1, cheapest)
    rows = session.execute(ranked_segments(session, ranks=ranks)).all()
    counts: dict[str, int] = {}
    segments = []
    for model_id, segment, position, start, end, rank, current in rows:
        if model_id not in models:
            continue
        name, bound = models[model_id]
        counts[name] = int(current)
        if rank <= ranks:
            segments.append(Candidate(model_id, name, segment, position, start, end, bound))
    return Current(candidates=stars + segments, segments=counts)


def select_windows(
    candidates: Iterable[Candidate],
    *,
    max_series: int,
    segments: Mapping[str, int] | None = None,
) -> Selection:
    """The current windows (:func:`current_windows`) one scrape exports within ``max_series``
    series, counting each window at its bound and :data:`PER_MODEL_SERIES` per model.

    Every model's ``*`` window is kept, whatever the budget. Segments follow in rounds: each
    model's first tracked segment (models by name), then each one's second, and so on; a model
    whose next segment does not fit stops there, so the segments a model exports are always
    its first ones by tracked position, stable from one refresh to the next (a new segment
    takes a later position). Quiet segments are neither exported nor counted as omitted.
    ``segments``: per model, how many current segments it has, when ``candidates`` holds only
    the first of them (:func:`load_current`); by default, those in ``candidates``.
    """
    current = current_windows(candidates)
    counts = segments or {}
    stars = sorted((c for c in current if c.segment == ALL_SEGMENTS), key=lambda c: c.model)
    queues: dict[str, list[Candidate]] = {}
    for candidate in current:
        if candidate.segment != ALL_SEGMENTS:
            queues.setdefault(candidate.model, []).append(candidate)
    models = sorted({c.model for c in current} | set(counts))
    for queue in queues.values():
        queue.sort(key=lambda c: c.position)
    used = sum(c.series for c in stars) + PER_MODEL_SERIES * len(models)
    chosen = list(stars)
    taken = dict.fromkeys(models, 0)
    going = [model for model in models if model in queues]
    while going:
        still = []
        for model in going:
            candidate = queues[model][taken[model]]
            if used + candidate.series > max_series:
                continue
            used += candidate.series
            chosen.append(candidate)
            taken[model] += 1
            if taken[model] < len(queues[model]):
                still.append(model)
        going = still
    omitted = {
        model: counts.get(model, len(queues.get(model, ()))) - taken[model] for model in models
    }
    return Selection(windows=tuple(chosen), omitted=omitted)


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


class _Builder:
    """Collects samples per family name, in first-seen order of the families."""

    def __init__(self) -> None:
        self.samples: dict[str, list[Sample]] = {}
        self.help: dict[str, str] = {}
        self.series = 0

    def family(self, name: str, documentation: str) -> None:
        self.samples.setdefault(name, [])
        self.help.setdefault(name, documentation)

    def add(self, name: str, labels: dict[str, str], value: Any) -> None:
        number = _number(value)
        if number is not None:
            self.samples[name].append(Sample(name=name, labels=labels, value=number))
            self.series += 1

    def mark(self) -> dict[str, int]:
        """Where every family ends now, for :meth:`rollback`."""
        return {name: len(samples) for name, samples in self.samples.items()}

    def rollback(self, mark: Mapping[str, int]) -> None:
        """Drop every sample added since ``mark``."""
        for name, size in mark.items():
            samples = self.samples[name]
            self.series -= len(samples) - size
            del samples[size:]

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
        about = _capitalised(BY_NAME[metric].about)
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
    for name, documentation in (*_WINDOW_FAMILIES, *_ESTIMATED_RATIO, *_ADVICE):
        builder.family(name, documentation)
    for name, documentation in (*_DECISION_PARTS, *_DECISION_FAMILIES, *_REFERENCE_INFO):
        builder.family(name, documentation)
    for metric in ESTIMATED_REGULAR:
        extra = (
            "; pi0: observed = at the estimated ratio, or a configured prior"
            if metric in ESTIMATED_CALIBRATED
            else ""
        )
        builder.family(
            f"calmon_estimated_{metric}",
            f"{_capitalised(BY_NAME[metric].about)} estimated without labels at the estimated "
            f"ratio{extra}",
        )
    builder.family(
        "calmon_segments_overflow_predictions",
        "Predictions of the latest window in segments beyond max_segments (counted in * only)",
    )
    builder.family(
        OMITTED_FAMILY,
        "Segments with a current window left out of this export by CALMON_METRICS_MAX_SERIES "
        "(the window API and the web view still have them)",
    )


def _add_metrics(builder: _Builder, window: LatestWindow, labels: dict[str, str]) -> None:
    record = window.record
    regular = record["regular"]
    regular_intervals = record["intervals"]["regular"]
    calibrated_intervals = record["intervals"]["calibrated"]
    reference = record["reference"]
    for metric in REGULAR_METRICS:
        name = f"calmon_{metric}"
        variants: list[tuple[dict[str, str], Any, Any]]
        if metric in CALIBRATED_METRICS:
            variants = [
                (
                    {**labels, "pi0": "observed"},
                    metric_value(regular, metric),
                    metric_interval(regular_intervals, metric),
                )
            ]
            for key, values in record["calibrated"].items():
                bounds = calibrated_intervals.get(key)
                variants.append(
                    (
                        {**labels, "pi0": key},
                        None if values is None else metric_value(values, metric),
                        None if bounds is None else metric_interval(bounds, metric),
                    )
                )
        else:
            variants = [
                (labels, metric_value(regular, metric), metric_interval(regular_intervals, metric))
            ]
        for variant_labels, value, bounds in variants:
            lower, upper = _interval(bounds)
            builder.add(name, variant_labels, value)
            builder.add(f"{name}_lower", variant_labels, lower)
            builder.add(f"{name}_upper", variant_labels, upper)
        if reference is not None:
            builder.add(f"{name}_reference", labels, metric_value(reference["regular"], metric))
    split = record["split"]
    if split is None:
        return
    for metric in SPLIT_METRICS:
        parts = split_parts(split, metric)
        if parts is None:
            continue
        name = f"calmon_{metric}_change"
        changes = {
            "total": parts["total"],
            "prior": parts["prior"],
            "likelihood": parts["likelihood"],
        }
        for component in COMPONENTS:
            builder.add(name, {**labels, "component": component}, changes[component])
        intervals = {"prior": parts["prior_interval"], "likelihood": parts["likelihood_interval"]}
        for component in INTERVAL_COMPONENTS:
            lower, upper = _interval(intervals[component])
            builder.add(f"{name}_lower", {**labels, "component": component}, lower)
            builder.add(f"{name}_upper", {**labels, "component": component}, upper)


def _add_estimated(builder: _Builder, record: WindowRecord, labels: dict[str, str]) -> None:
    estimated = record["estimated"]
    if estimated is None:
        return
    lower, upper = _interval(estimated["positive_class_ratio_interval"])
    builder.add("calmon_estimated_positive_class_ratio", labels, estimated["positive_class_ratio"])
    builder.add("calmon_estimated_positive_class_ratio_lower", labels, lower)
    builder.add("calmon_estimated_positive_class_ratio_upper", labels, upper)
    check = estimated["label_shift"]
    builder.add(
        "calmon_estimated_label_shift_p_value", labels, None if check is None else check["p_value"]
    )
    regular = estimated["regular"]
    for metric in ESTIMATED_REGULAR:
        name = f"calmon_estimated_{metric}"
        if metric not in ESTIMATED_CALIBRATED:
            builder.add(name, labels, metric_value(regular, metric))
            continue
        builder.add(name, {**labels, "pi0": "observed"}, metric_value(regular, metric))
        for key, values in estimated["calibrated"].items():
            builder.add(name, {**labels, "pi0": key}, metric_value(values, metric))


def _add_decision(builder: _Builder, record: WindowRecord, labels: dict[str, str]) -> None:
    """The series of the record's pooled decision."""
    decision = record["decision"]
    parts = {
        "prior": (decision["prior_part"], decision["prior_interval"]),
        "likelihood": (decision["likelihood_part"], decision["likelihood_interval"]),
    }
    for component in INTERVAL_COMPONENTS:
        component_labels = {**labels, "component": component}
        part, interval = parts[component]
        lower, upper = _interval(interval)
        builder.add("calmon_decision_change", component_labels, part)
        builder.add("calmon_decision_change_lower", component_labels, lower)
        builder.add("calmon_decision_change_upper", component_labels, upper)
    lower, upper = _interval(decision["positive_class_ratio_interval"])
    shift = decision["positives_shift"]
    for name, value in (
        ("calmon_decision_windows", decision["windows"]),
        ("calmon_decision_predictions", decision["n"]),
        ("calmon_decision_positives", decision["n_pos"]),
        ("calmon_decision_positive_class_ratio", decision["positive_class_ratio"]),
        ("calmon_decision_positive_class_ratio_lower", lower),
        ("calmon_decision_positive_class_ratio_upper", upper),
        ("calmon_decision_positives_shift_p_value", None if shift is None else shift["p_value"]),
    ):
        builder.add(name, labels, value)
    compared, _ = decision_reference(record)
    if compared is not None:
        builder.add(
            "calmon_decision_reference_info",
            {**labels, "kind": compared["kind"], "against": decision_words(record)},
            1,
        )


def _add_advice(builder: _Builder, record: WindowRecord, labels: dict[str, str]) -> None:
    advice = record["advice"]
    if advice is None:
        return
    builder.add("calmon_advised_threshold", labels, advice["threshold"])
    expected = advice["expected"]
    if expected is not None:
        quantities = {
            "precision": expected["precision"],
            "recall": expected["recall"],
            "alert_rate": expected["alert_rate"],
            "cost": expected["cost"],
        }
        for quantity in ADVICE_QUANTITIES:
            builder.add(
                "calmon_advised_expected", {**labels, "quantity": quantity}, quantities[quantity]
            )
    assumption = advice["assumption"]
    holds = None if assumption is None else assumption["holds"]
    builder.add(
        "calmon_advice_assumption_holds", labels, None if holds is None else float(holds is True)
    )


def _add_window(builder: _Builder, window: LatestWindow, labels: dict[str, str]) -> None:
    record = window.record
    reference = record["reference"]
    lower, upper = _interval(record["prior_interval"])
    for name, value in (
        ("calmon_positive_class_ratio", record["prior"]),
        ("calmon_positive_class_ratio_lower", lower),
        ("calmon_positive_class_ratio_upper", upper),
        (
            "calmon_reference_positive_class_ratio",
            None if reference is None else reference["prior"],
        ),
        ("calmon_window_predictions", record["n"]),
        ("calmon_window_positives", record["n_pos"]),
        ("calmon_window_unlabelled", record["unlabelled"]),
        ("calmon_window_start_timestamp_seconds", window.start.timestamp()),
        ("calmon_window_end_timestamp_seconds", window.end.timestamp()),
        ("calmon_window_computed_timestamp_seconds", window.computed_at.timestamp()),
    ):
        builder.add(name, labels, value)
    if reference is not None:
        builder.add(
            "calmon_reference_info",
            {**labels, "kind": reference["kind"], "against": reference_words(reference)},
            1,
        )
    overflow = record["segments_overflow"]
    if window.segment == ALL_SEGMENTS and overflow is not None:
        builder.add(
            "calmon_segments_overflow_predictions", {"model": window.model}, overflow["predictions"]
        )


def build_snapshot(
    windows: Iterable[LatestWindow],
    *,
    clock: Clock = SYSTEM_CLOCK,
    max_series: int | None = None,
    omitted: Mapping[str, int] | None = None,
) -> Snapshot:
    """The window series of ``windows`` (at most one per model and segment), loaded at
    ``clock``'s now.

    With ``max_series`` or ``omitted`` (the budgeted export of :func:`load_snapshot`) the
    ``*`` windows come first and are always kept; the segment windows follow in the given
    order, and one whose series would take the snapshot past ``max_series`` is dropped with
    the rest of its model's (its record holds more than its bound: the model's priors changed
    since it was computed). Every model then gets ``calmon_exporter_segments_omitted``:
    ``omitted`` plus what was dropped here.
    """
    builder = _Builder()
    _declare(builder)
    windows = list(windows)
    budgeted = max_series is not None or omitted is not None
    left_out = dict(omitted or {})
    models = sorted({w.model for w in windows} | set(left_out))
    reserve = len(models) if budgeted else 0
    stopped: set[str] = set()
    count = 0
    ordered = [w for w in windows if w.segment == ALL_SEGMENTS]
    ordered += [w for w in windows if w.segment != ALL_SEGMENTS]
    for window in ordered:
        checked = max_series is not None and window.segment != ALL_SEGMENTS
        if checked and window.model in stopped:
            left_out[window.model] = left_out.get(window.model, 0) + 1
            continue
        mark = builder.mark() if checked else {}
        labels = {"model": window.model, "segment": window.segment}
        _add_metrics(builder, window, labels)
        _add_estimated(builder, window.record, labels)
        _add_advice(builder, window.record, labels)
        _add_window(builder, window, labels)
        _add_decision(builder, window.record, labels)
        if checked and max_series is not None and builder.series + reserve > max_series:
            builder.rollback(mark)
            stopped.add(window.model)
            left_out[window.model] = left_out.get(window.model, 0) + 1
            continue
        count += 1
    if budgeted:
        for model in models:
            builder.add(OMITTED_FAMILY, {"model": model}, left_out.get(model, 0))
    return builder.finish(count, loaded_at=clock.now().timestamp())


def load_snapshot(session: Session, *, max_series: int, clock: Clock = SYSTEM_CLOCK) -> Snapshot:
    """The series of the latest windows within ``max_series``, loaded at ``clock``'s now:
    which windows exist (:func:`load_current`), which of them fit
    (:func:`select_windows`), then the records of those only (:func:`load_records`)."""
    current = load_current(session, max_series=max_series)
    selection = select_windows(current.candidates, max_series=max_series, segments=current.segments)
    return build_snapshot(
        load_records(session, selection.windows),
        clock=clock,
        max_series=max_series,
        omitted=selection.omitted,
    )
