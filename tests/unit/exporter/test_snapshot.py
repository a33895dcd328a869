"""Window records become exactly the contract's series: names, labels, values, counts."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from calmon.exporter.snapshot import (
    QUIET_SEGMENT_WINDOWS,
    LatestWindow,
    Snapshot,
    build_snapshot,
    current_windows,
)
from harness.contract import NO_INTERVAL, SERIES
from harness.records import (
    PROBABILITY_ONLY,
    Key,
    expected_series,
    key,
    make_record,
    per_window_series,
    window,
)
from tests.integration.scheduler.helpers import SetClock


def _series(snapshot: Snapshot) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for family in snapshot.families:
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def test_every_field_of_a_record_is_one_series_with_its_value() -> None:
    record = make_record(segment="country=FR", pi0=(0.01, 0.5))
    assert _series(build_snapshot([window("fraud", record)])) == expected_series("fraud", record)


def test_segment_star_also_reports_the_overflow_of_its_model() -> None:
    record = make_record(segment="*")
    series = _series(build_snapshot([window("fraud", record)]))
    assert series == expected_series("fraud", record)
    assert series[key("calmon_segments_overflow_predictions", model="fraud")] == 412


def test_pi0_labels_are_observed_reference_and_the_configured_priors() -> None:
    record = make_record(pi0=(0.001, 0.25, 0.5))
    series = _series(build_snapshot([window("m", record)]))
    ap = {
        dict(labels)["pi0"]: value
        for (name, labels), value in series.items()
        if name == "calmon_average_precision"
    }
    assert ap == {
        "observed": record["regular"]["average_precision"],
        "reference": record["calibrated"]["reference"]["average_precision"],
        "0.001": record["calibrated"]["0.001"]["average_precision"],
        "0.25": record["calibrated"]["0.25"]["average_precision"],
        "0.5": record["calibrated"]["0.5"]["average_precision"],
    }


def test_series_count_is_models_times_segments_times_variants() -> None:
    # (model, configured pi0, named segments)
    models = [("a", (), []), ("b", (0.5,), ["x"]), ("c", (0.01, 0.1, 0.3), ["x", "y", "z"])]
    windows = [
        window(name, make_record(segment=segment, pi0=pi0))
        for name, pi0, segments in models
        for segment in ["*", *segments]
    ]
    snapshot = build_snapshot(windows)
    expected = sum(
        (1 + len(segments)) * per_window_series(configured_pi0=len(pi0)) + 1
        for _, pi0, segments in models
    )
    # 139 + 15 per configured pi0 for a window (13 of them the decision's, 6 the advice's, 1
    # the label-shift check's, 2 the references' info); one overflow series per model
    assert per_window_series(configured_pi0=0) == 139
    assert per_window_series(configured_pi0=2) == 169
    assert expected == 1 * 140 + 2 * 154 + 1 + 4 * 184 + 1
    assert len(_series(snapshot)) == expected
    assert snapshot.series == expected
    assert snapshot.windows == len(windows)


def test_every_series_is_a_contract_series_with_its_labels() -> None:
    snapshot = build_snapshot([window("m", make_record(segment=s)) for s in ("*", "b=1")])
    names = set()
    for family in snapshot.families:
        assert family.name in SERIES, family.name
        assert family.documentation
        for sample in family.samples:
            assert sample.name == family.name
            assert set(sample.labels) == SERIES[family.name], (family.name, sample.labels)
        names.add(family.name)
    window_series = {n for n, labels in SERIES.items() if labels >= {"model", "segment"}}
    without_interval = {f"calmon_{m}_{end}" for m in NO_INTERVAL for end in ("lower", "upper")}
    assert not without_interval & set(SERIES)
    assert names == window_series | {"calmon_segments_overflow_predictions"}


def test_undefined_values_are_absent_never_nan() -> None:
    record = make_record(pi0=(0.5,))
    record["regular"]["precision"] = None
    record["regular"]["roc_auc"] = math.nan
    record["regular"]["ks"] = math.inf
    record["intervals"]["regular"]["recall"] = None
    record["calibrated"]["reference"] = None
    record["intervals"]["calibrated"]["reference"] = None
    record["split"] = None
    record["reference"] = None
    record["prior"] = None
    record["prior_interval"] = None
    record["decision"].update(
        prior_part=None,
        prior_interval=None,
        likelihood_part=math.nan,
        likelihood_interval=None,
        positive_class_ratio=None,
        positive_class_ratio_interval=None,
        positives_shift=None,
        reference=None,
    )
    series = _series(build_snapshot([window("m", record)]))
    assert all(math.isfinite(value) for value in series.values())
    names = {name for name, _ in series}
    assert not any(name.endswith(("_change", "_change_lower", "_change_upper")) for name in names)
    assert not any(
        name.startswith(
            (
                "calmon_decision_positive_class_ratio",
                "calmon_decision_positives_shift",
                "calmon_decision_reference",
            )
        )
        for name in names
    )
    assert not any(name.endswith("_reference") for name in names)
    assert not names & {
        "calmon_positive_class_ratio",
        "calmon_positive_class_ratio_lower",
        "calmon_positive_class_ratio_upper",
        "calmon_reference_positive_class_ratio",
    }
    assert key("calmon_precision", model="m", segment="*", pi0="observed") not in series
    assert key("calmon_precision_lower", model="m", segment="*", pi0="observed") in series
    assert key("calmon_precision", model="m", segment="*", pi0="0.5") in series
    assert not any(dict(labels).get("pi0") == "reference" for _, labels in series)
    for name in ("calmon_roc_auc", "calmon_ks", "calmon_recall_lower", "calmon_recall_upper"):
        assert key(name, model="m", segment="*") not in series
    assert key("calmon_roc_auc_lower", model="m", segment="*") in series
    assert series[key("calmon_window_predictions", model="m", segment="*")] == 20_000


def test_score_models_have_no_probability_metrics() -> None:
    record = make_record(pi0=())
    for section in (record["regular"], record["intervals"]["regular"]):
        for name in PROBABILITY_ONLY:
            del section[name]
    for name in PROBABILITY_ONLY:
        del record["reference"]["regular"][name]
    series = _series(build_snapshot([window("s", record)]))
    assert len(series) == per_window_series(configured_pi0=0, probability=False) + 1
    assert not any(
        name.startswith(("calmon_brier", "calmon_ece", "calmon_log_loss")) for name, _ in series
    )


def test_overflow_absent_without_its_field_and_zero_when_zero() -> None:
    star = make_record()
    star["segments_overflow"] = None
    assert key("calmon_segments_overflow_predictions", model="m") not in _series(
        build_snapshot([window("m", star)])
    )
    star["segments_overflow"] = {"segments": 0, "predictions": 0}
    assert (
        _series(build_snapshot([window("m", star)]))[
            key("calmon_segments_overflow_predictions", model="m")
        ]
        == 0
    )


@pytest.mark.parametrize("value", [True, "0.5", [0.5], {"x": 1}])
def test_values_that_are_not_numbers_are_left_out(value: Any) -> None:
    record = make_record()
    record["regular"]["roc_auc"] = value
    record["n"] = value
    series = _series(build_snapshot([window("m", record)]))
    assert key("calmon_roc_auc", model="m", segment="*") not in series
    assert key("calmon_window_predictions", model="m", segment="*") not in series


def test_no_window_no_series() -> None:
    snapshot = build_snapshot([])
    assert snapshot.families == ()
    assert (snapshot.series, snapshot.windows) == (0, 0)


def test_the_load_time_is_the_clock_now() -> None:
    clock = SetClock(at=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC))
    snapshot = build_snapshot([window("m", make_record())], clock=clock)
    assert snapshot.loaded_at == 1893553445.0  # 2030-01-02T03:04:05Z


def test_segments_gone_quiet_are_not_exported() -> None:
    def at(model: str, segment: str, windows_ago: int) -> LatestWindow:
        found = window(model, make_record(segment=segment))
        shift = windows_ago * (found.end - found.start)
        return replace(found, start=found.start - shift, end=found.end - shift)

    windows = [
        at("m", "*", 0),
        at("m", "recent", QUIET_SEGMENT_WINDOWS),
        at("m", "quiet", QUIET_SEGMENT_WINDOWS + 1),
        at("old", "*", 30),
        at("old", "a", 30),
        at("no-star", "a", 50),
    ]
    kept = current_windows(windows)
    assert [(w.model, w.segment) for w in kept] == [
        ("m", "*"),
        ("m", "recent"),
        ("old", "*"),
        ("old", "a"),
        ("no-star", "a"),
    ]
    assert current_windows(iter(windows)) == kept
    names = {
        dict(sample.labels).get("segment")
        for family in build_snapshot(kept).families
        for sample in family.samples
    }
    assert "quiet" not in names


def test_estimated_series_follow_the_estimate_and_vanish_without_it() -> None:
    record = make_record(pi0=(0.5,))
    series = _series(build_snapshot([window("m", record)]))
    estimated = record["estimated"]
    assert series[key("calmon_estimated_positive_class_ratio", model="m", segment="*")] == 0.04
    assert series[key("calmon_estimated_positive_class_ratio_upper", model="m", segment="*")] == (
        0.046
    )
    assert (
        series[key("calmon_estimated_precision", model="m", segment="*", pi0="observed")]
        == estimated["regular"]["precision"]
    )
    assert (
        series[key("calmon_estimated_f1", model="m", segment="*", pi0="0.5")]
        == estimated["calibrated"]["0.5"]["f1"]
    )
    assert (
        series[key("calmon_estimated_roc_auc", model="m", segment="*")]
        == estimated["regular"]["roc_auc"]
    )
    record["estimated"] = None
    names = {name for name, _ in _series(build_snapshot([window("m", record)]))}
    assert not any(name.startswith("calmon_estimated_") for name in names)


def test_advice_series_follow_the_advice_and_vanish_without_it() -> None:
    record = make_record()
    series = _series(build_snapshot([window("m", record)]))
    advice = record["advice"]
    assert series[key("calmon_advised_threshold", model="m", segment="*")] == 0.71
    for quantity in ("precision", "recall", "alert_rate", "cost"):
        assert (
            series[key("calmon_advised_expected", model="m", segment="*", quantity=quantity)]
            == advice["expected"][quantity]
        )
    assert series[key("calmon_advice_assumption_holds", model="m", segment="*")] == 1.0
    advice["assumption"]["holds"] = False
    advice["expected"]["cost"] = None
    series = _series(build_snapshot([window("m", record)]))
    assert series[key("calmon_advice_assumption_holds", model="m", segment="*")] == 0.0
    assert key("calmon_advised_expected", model="m", segment="*", quantity="cost") not in series
    record["advice"] = None
    names = {name for name, _ in _series(build_snapshot([window("m", record)]))}
    assert not any(name.startswith(("calmon_advised_", "calmon_advice_")) for name in names)


def test_the_references_are_labels_in_words() -> None:
    """What the window and its pooled decision compare against (docs/reference/references.md): the
    record's trailing reference of 7 windows, and the 7 windows before the 5 pooled ones."""
    series = _series(build_snapshot([window("fraud", make_record(segment="*"))]))
    where = {"model": "fraud", "segment": "*", "kind": "trailing"}
    assert series[key("calmon_reference_info", **where, against="the previous 7 windows")] == 1
    pooled = "the 7 windows before the pooled ones"
    assert series[key("calmon_decision_reference_info", **where, against=pooled)] == 1
