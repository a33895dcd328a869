"""One descriptor per metric: the record's schema, the exporter's HELP lines and the web view's
charts say what :data:`calmon.catalogue.METRICS` says, and the engine's name lists are the
table's."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from calmon import catalogue, records
from calmon.catalogue import BY_NAME, METRICS
from calmon.exporter.snapshot import LatestWindow, build_snapshot
from calmon.metrics import evaluation, label_free, probability, split
from calmon.records import WindowRecord
from calmon.ui import charts

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "windows" / "golden_records.json"


def test_names_are_unique_and_the_engine_reads_the_table() -> None:
    names = [metric.name for metric in METRICS]
    assert len(set(names)) == len(names) == 18
    assert tuple(names) == catalogue.REGULAR_METRICS
    assert tuple(m.name for m in METRICS if m.probability_only) == catalogue.PROBABILITY_METRICS
    assert tuple(m.name for m in METRICS if m.split) == catalogue.SPLIT_METRICS
    # the engine's modules hold the table's lists themselves, not copies
    assert vars(evaluation)["REGULAR_METRICS"] is catalogue.REGULAR_METRICS
    assert vars(probability)["PROBABILITY_METRICS"] is catalogue.PROBABILITY_METRICS
    assert vars(split)["SPLIT_METRICS"] is catalogue.SPLIT_METRICS
    assert vars(label_free)["ESTIMATED_REGULAR"] is catalogue.ESTIMATED_REGULAR
    assert set(catalogue.ESTIMATED_CALIBRATED) <= set(catalogue.CALIBRATED_METRICS)
    assert set(catalogue.ESTIMATED_REGULAR) <= set(names)


def test_the_record_schema_describes_each_metric_as_its_descriptor() -> None:
    schema = records.WINDOW_RECORD.json_schema()
    properties = schema["$defs"]["RegularMetrics"]["properties"]
    assert list(properties) == [metric.name for metric in METRICS]
    for metric in METRICS:
        assert properties[metric.name]["description"].startswith(metric.about), metric.name


def _golden_window() -> LatestWindow:
    """The latest window of a probability model, from a record the scheduler computed."""
    stored: dict[str, str] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    record: WindowRecord = next(
        r for r in map(json.loads, stored.values()) if r["estimated"] is not None
    )
    start, end = (datetime.fromisoformat(record[key]) for key in ("start", "end"))
    return LatestWindow(
        model="m", segment=record["segment"], start=start, end=end, computed_at=end, record=record
    )


def test_the_exporter_help_is_the_descriptor() -> None:
    snapshot = build_snapshot([_golden_window()])
    families = {family.name: family.documentation for family in snapshot.families}
    for metric in METRICS:
        help_text = families[f"calmon_{metric.name}"]
        assert help_text.lower().startswith(metric.about.lower()), metric.name
    assert families["calmon_ks_abc"].startswith("Area between the class-conditional score CDFs")


def test_the_charts_name_each_metric_as_its_descriptor() -> None:
    assert {m.name: m.title for m in METRICS} == charts.METRIC_TITLES
    assert {m.name: m.short for m in METRICS} == charts.METRIC_NAMES
    assert BY_NAME["ks_abc"].title.startswith("KS area")
