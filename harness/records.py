"""Window records of the documented shape (docs/reference/scheduler.md, "The record"), built by
hand.

Every value is defined where a real window of a probability model with a usable reference
has one: every catalogue metric, calibrated values at the reference prior and at each
configured π0, intervals for the metrics docs/reference/intervals.md lists, the reference's regular
values, the split of the five split metrics with the intervals of both parts.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from calmon.catalogue import CANNOT_SEE
from calmon.exporter.snapshot import ADVICE_QUANTITIES, LatestWindow
from calmon.metrics.prepared import pi0_key
from calmon.records import WindowRecord
from calmon.words import decision_reference, decision_words, reference_words
from harness.contract import (
    CATALOGUE,
    COMPONENTS,
    ESTIMATED,
    ESTIMATED_PRIOR_DEPENDENT,
    INTERVAL_COMPONENTS,
    NO_INTERVAL,
    PRIOR_DEPENDENT,
    SPLIT,
    SPLIT_INTERVAL,
)

#: docs/reference/intervals.md: these have no interval
#: docs/reference/metrics.md: these exist for probability models only
PROBABILITY_ONLY = frozenset(
    {"brier", "brier_skill", "brier_pos", "brier_neg", "ece", "mce", "log_loss"}
)

Key = tuple[str, frozenset[tuple[str, str]]]

START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
LENGTH = timedelta(minutes=5)
COMPUTED = START + timedelta(minutes=15, seconds=3)

_counter = itertools.count(1)


def _value() -> float:
    """A distinct value in (0, 1) per call, so each sample can be traced to its field."""
    return next(_counter) / 100_003


def _metrics(names: tuple[str, ...]) -> dict[str, float]:
    return {name: _value() for name in names}


def _intervals(values: dict[str, float]) -> dict[str, list[float] | None]:
    return {
        name: None if name in NO_INTERVAL else [value - 0.01, value + 0.02]
        for name, value in values.items()
    }


def _absent(values: dict[str, float]) -> dict[str, str]:
    """Why the metrics without a published interval have none."""
    return {name: "no_method" for name in values if name in NO_INTERVAL}


def make_record(*, segment: str = "*", pi0: tuple[float, ...] = (0.01, 0.5)) -> dict[str, Any]:
    """A record with every value defined; calibrated at "reference" and at each ``pi0``."""
    regular = _metrics(CATALOGUE)
    keys = ["reference", *(pi0_key(p) for p in pi0)]
    calibrated = {key: _metrics(tuple(sorted(PRIOR_DEPENDENT))) for key in keys}
    split = {}
    for name in sorted(SPLIT):
        total, prior = _value(), _value()
        split[name] = {
            "total": total,
            "prior": prior,
            "likelihood": total - prior,
            "prior_interval": [prior - 0.03, prior + 0.06] if name in SPLIT_INTERVAL else None,
            "likelihood_interval": (
                [total - prior - 0.05, total - prior + 0.04] if name in SPLIT_INTERVAL else None
            ),
        }
    return {
        "start": START.isoformat(),
        "end": (START + LENGTH).isoformat(),
        "segment": segment,
        "computed_at": COMPUTED.isoformat(),
        "n": 20_000,
        "n_pos": 1_000,
        "unlabelled": 37,
        "prior": 0.05,
        "prior_interval": [0.047, 0.053],
        "regular": regular,
        "calibrated": calibrated,
        "intervals": {
            "regular": _intervals(regular),
            "calibrated": {key: _intervals(values) for key, values in calibrated.items()},
            "absent": {
                "regular": _absent(regular),
                "calibrated": {key: _absent(values) for key, values in calibrated.items()},
            },
        },
        "split": split,
        "reference": {
            "kind": "trailing",
            "start": (START - 7 * LENGTH).isoformat(),
            "end": START.isoformat(),
            "windows": 7,
            "n": 140_000,
            "n_pos": 2_800,
            "prior": 0.02,
            "regular": _metrics(CATALOGUE),
        },
        "estimated": {
            "positive_class_ratio": 0.04,
            "positive_class_ratio_interval": [0.035, 0.046],
            "method": "saerens_em_isotonic",
            "n": 20_037,
            "regular": _metrics(ESTIMATED),
            "calibrated": {
                pi0_key(p): _metrics(tuple(sorted(ESTIMATED_PRIOR_DEPENDENT))) for p in pi0
            },
            "label_shift": {
                "p_value": 0.42,
                "holds": True,
                "method": "cvm_pearson_mixture_bootstrap",
            },
            "verdict": "more_positives_or_higher_scores",
            "cannot_see": CANNOT_SEE,
            "positive_class_ratio_resolved": True,
        },
        "reliability": [],
        "segments_overflow": {"segments": 3, "predictions": 412} if segment == "*" else None,
        "decision": {
            "windows": 5,
            "start": (START - 4 * LENGTH).isoformat(),
            "n": 100_000,
            "n_pos": 5_000,
            "verdict": "model_got_worse",
            "metric": "average_precision",
            "prior_part": 0.01,
            "prior_interval": [-0.01, 0.03],
            "likelihood_part": -0.08,
            "likelihood_interval": [-0.12, -0.04],
            "positive_class_ratio": 0.05,
            "positive_class_ratio_interval": [0.0487, 0.0514],
            "reference_positive_class_ratio_interval": [0.0193, 0.0207],
            "positives_shift": {
                "method": "location_and_placement",
                "z": 1.2,
                "p_value": 0.23,
                "mann_whitney_z": 1.1,
                "placement_z": 1.2,
                "location_z": 0.9,
            },
            "reference": {
                "kind": "trailing",
                "start": (START - 11 * LENGTH).isoformat(),
                "end": (START - 4 * LENGTH).isoformat(),
                "windows": 7,
            },
        },
        "advice": {
            "objective": {"costs": {"false_positive": 1.0, "false_negative": 20.0}},
            "configured_threshold": 0.5,
            "prior": 0.05,
            "prior_source": "measured",
            "threshold": 0.71,
            "expected": {name: _value() for name in ADVICE_QUANTITIES},
            "expected_intervals": {
                "precision": [0.5, 0.7],
                "recall": [0.2, 0.3],
                "alert_rate": [0.01, 0.02],
                "cost": None,
            },
            "assumption": {"holds": True, "p_value": 0.4, "method": "ks_by_class"},
            "reason": None,
        },
    }


def window(model: str, record: dict[str, Any]) -> LatestWindow:
    """The stored window holding ``record``."""
    return LatestWindow(
        model=model,
        segment=record["segment"],
        start=START,
        end=START + LENGTH,
        computed_at=COMPUTED,
        record=cast(WindowRecord, record),
    )


def key(name: str, **labels: str) -> Key:
    """The identity of a series: its name and label pairs."""
    return name, frozenset(labels.items())


def _section(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _bounds(value: Any) -> tuple[Any, Any]:
    return (value[0], value[1]) if value is not None else (None, None)


def _unix(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def expected_series(model: str, record: dict[str, Any]) -> dict[Key, float]:
    """The series of one window record by the contract's rules (docs/reference/design.md,
    docs/reference/deployment.md): what /metrics must show for it, undefined values left out."""
    w = {"model": model, "segment": record["segment"]}
    out: dict[Key, float] = {}

    def put(name: str, value: Any, **labels: str) -> None:
        if value is not None:
            out[key(name, **w, **labels)] = float(value)

    intervals = _section(record["intervals"])
    reference = _section(record["reference"])
    for metric in CATALOGUE:
        name = f"calmon_{metric}"
        if metric in PRIOR_DEPENDENT:
            variants = [("observed", record["regular"], _section(intervals.get("regular")))]
            variants += [
                (pi0, _section(values), _section(_section(intervals.get("calibrated")).get(pi0)))
                for pi0, values in record["calibrated"].items()
            ]
            for pi0, values, bounds in variants:
                put(name, values.get(metric), pi0=pi0)
                lower, upper = _bounds(bounds.get(metric))
                put(f"{name}_lower", lower, pi0=pi0)
                put(f"{name}_upper", upper, pi0=pi0)
        else:
            put(name, record["regular"].get(metric))
            lower, upper = _bounds(_section(intervals.get("regular")).get(metric))
            put(f"{name}_lower", lower)
            put(f"{name}_upper", upper)
        put(f"{name}_reference", _section(reference.get("regular")).get(metric))
    for metric in SPLIT:
        parts = _section(_section(record["split"]).get(metric))
        for component in COMPONENTS:
            put(f"calmon_{metric}_change", parts.get(component), component=component)
        for component in sorted(INTERVAL_COMPONENTS):
            lower, upper = _bounds(parts.get(f"{component}_interval"))
            put(f"calmon_{metric}_change_lower", lower, component=component)
            put(f"calmon_{metric}_change_upper", upper, component=component)
    estimated = _section(record.get("estimated"))
    lower, upper = _bounds(estimated.get("positive_class_ratio_interval"))
    put("calmon_estimated_positive_class_ratio", estimated.get("positive_class_ratio"))
    put("calmon_estimated_positive_class_ratio_lower", lower)
    put("calmon_estimated_positive_class_ratio_upper", upper)
    put(
        "calmon_estimated_label_shift_p_value",
        _section(estimated.get("label_shift")).get("p_value"),
    )
    for metric in ESTIMATED:
        name = f"calmon_estimated_{metric}"
        value = _section(estimated.get("regular")).get(metric)
        if metric not in ESTIMATED_PRIOR_DEPENDENT:
            put(name, value)
            continue
        put(name, value, pi0="observed")
        for pi0, values in _section(estimated.get("calibrated")).items():
            put(name, _section(values).get(metric), pi0=pi0)
    decision = _section(record.get("decision"))
    for component in sorted(INTERVAL_COMPONENTS):
        lower, upper = _bounds(decision.get(f"{component}_interval"))
        put("calmon_decision_change", decision.get(f"{component}_part"), component=component)
        put("calmon_decision_change_lower", lower, component=component)
        put("calmon_decision_change_upper", upper, component=component)
    lower, upper = _bounds(decision.get("positive_class_ratio_interval"))
    put("calmon_decision_windows", decision.get("windows"))
    put("calmon_decision_predictions", decision.get("n"))
    put("calmon_decision_positives", decision.get("n_pos"))
    put("calmon_decision_positive_class_ratio", decision.get("positive_class_ratio"))
    put("calmon_decision_positive_class_ratio_lower", lower)
    put("calmon_decision_positive_class_ratio_upper", upper)
    put(
        "calmon_decision_positives_shift_p_value",
        _section(decision.get("positives_shift")).get("p_value"),
    )
    advice = _section(record.get("advice"))
    put("calmon_advised_threshold", advice.get("threshold"))
    for quantity in ADVICE_QUANTITIES:
        put(
            "calmon_advised_expected",
            _section(advice.get("expected")).get(quantity),
            quantity=quantity,
        )
    holds = _section(advice.get("assumption")).get("holds")
    put("calmon_advice_assumption_holds", None if holds is None else float(holds))
    lower, upper = _bounds(record["prior_interval"])
    put("calmon_positive_class_ratio", record["prior"])
    put("calmon_positive_class_ratio_lower", lower)
    put("calmon_positive_class_ratio_upper", upper)
    put("calmon_reference_positive_class_ratio", reference.get("prior"))
    put("calmon_window_predictions", record["n"])
    put("calmon_window_positives", record["n_pos"])
    put("calmon_window_unlabelled", record["unlabelled"])
    put("calmon_window_start_timestamp_seconds", _unix(record["start"]))
    put("calmon_window_end_timestamp_seconds", _unix(record["end"]))
    put("calmon_window_computed_timestamp_seconds", _unix(record["computed_at"]))
    # the references as labels: their words are calmon.words' (tests/unit/test_words.py)
    if record["reference"] is not None:
        put(
            "calmon_reference_info",
            1,
            kind=record["reference"]["kind"],
            against=reference_words(record["reference"]),
        )
    compared, _ = decision_reference(cast(Any, record))
    if compared is not None:
        put(
            "calmon_decision_reference_info",
            1,
            kind=compared["kind"],
            against=decision_words(cast(Any, record)),
        )
    overflow = record["segments_overflow"]
    if record["segment"] == "*" and overflow is not None:
        out[key("calmon_segments_overflow_predictions", model=model)] = overflow["predictions"]
    return out


def per_window_series(*, configured_pi0: int, probability: bool = True) -> int:
    """Series of one fully defined window, from the contract: every catalogue metric (once,
    or once per pi0 variant: observed, reference and each configured prior), its interval
    bounds where docs/reference/intervals.md gives one, its reference value; the three components of
    each split metric and, where docs/reference/intervals.md gives them, the two bounds of its prior
    and of its likelihood part; the estimated ratio and its bounds, each estimated metric (once per
    pi0 variant: observed and each configured prior, for the prior-dependent ones), the
    label-shift check's p-value; ratio, its bounds, its reference; predictions, positives,
    unlabelled, start, end, computed; the decision's prior and likelihood parts with their
    bounds, its pooled windows, predictions, positives, ratio, the ratio's bounds and the
    positives' shift p-value; the advised threshold, its four expected values and its
    assumption check; the reference's and the decision's reference's info series."""
    count = 0
    for metric in CATALOGUE:
        if not probability and metric in PROBABILITY_ONLY:
            continue
        variants = 2 + configured_pi0 if metric in PRIOR_DEPENDENT else 1
        bounds = 0 if metric in NO_INTERVAL else 2
        count += variants * (1 + bounds) + 1
    count += len(SPLIT) * len(COMPONENTS) + len(SPLIT_INTERVAL) * 2 * len(INTERVAL_COMPONENTS)
    count += estimated_series(configured_pi0=configured_pi0)
    return count + 4 + 6 + 2 * 3 + 7 + 1 + len(ADVICE_QUANTITIES) + 1 + 2


def estimated_series(*, configured_pi0: int) -> int:
    """Series of one window's label-free estimate (absent where the window's labels measure
    its ratio): the ratio, its bounds and the check's p-value, and each estimated metric
    (once per pi0 variant, observed and each configured prior, for the prior-dependent ones)."""
    return 4 + sum(
        1 + configured_pi0 if metric in ESTIMATED_PRIOR_DEPENDENT else 1 for metric in ESTIMATED
    )
