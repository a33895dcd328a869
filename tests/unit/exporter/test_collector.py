"""The collector serves the snapshot it holds, as fresh families, through prometheus_client."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from calmon.exporter.collector import WindowCollector
from calmon.exporter.snapshot import build_snapshot
from harness.records import make_record, per_window_series, window


def _scrape(collector: WindowCollector) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def test_empty_until_updated_then_the_snapshot_values_exactly() -> None:
    collector = WindowCollector()
    assert _scrape(collector) == {}
    snapshot = build_snapshot([window("fraud", make_record()), window("ads", make_record())])
    collector.update(snapshot)
    expected = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in snapshot.families
        for sample in family.samples
    }
    assert len(expected) == snapshot.series
    assert _scrape(collector) == expected


def test_each_collect_builds_new_families() -> None:
    collector = WindowCollector(build_snapshot([window("m", make_record())]))
    first = list(collector.collect())
    for family in first:
        family.samples.clear()
    second = list(collector.collect())
    assert [f.name for f in second] == [f.name for f in first]
    assert sum(len(f.samples) for f in second) == collector.snapshot.series
    assert all(a is not b for a, b in zip(first, second, strict=True))


def test_update_replaces_the_whole_snapshot() -> None:
    collector = WindowCollector(build_snapshot([window("old", make_record())]))
    collector.update(build_snapshot([window("new", make_record())]))
    models = {dict(labels)["model"] for _, labels in _scrape(collector)}
    assert models == {"new"}


def test_scrape_of_20_models_by_21_segments_gives_every_series() -> None:
    """Its speed is measured by ``bench/exporter.py``, not here."""
    windows = [
        window(f"model-{m}", make_record(segment="*" if s == 0 else f"seg={s}", pi0=(0.01, 0.5)))
        for m in range(20)
        for s in range(21)
    ]
    collector = WindowCollector(build_snapshot(windows))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    body = generate_latest(registry)
    assert collector.snapshot.series == 20 * 21 * per_window_series(configured_pi0=2) + 20
    assert body.count(b"\ncalmon_") == collector.snapshot.series
