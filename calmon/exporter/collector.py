"""The window series on ``/metrics``: a prometheus_client collector over the current snapshot.

A scrape reads memory only: :meth:`WindowCollector.collect` wraps the samples of the snapshot
it finds at that moment in fresh gauge families. It never queries the database and never
computes a metric; :meth:`WindowCollector.update` swaps in a new snapshot (one attribute
assignment, so a scrape sees the old snapshot or the new one, never a mix).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from calmon.exporter.snapshot import EMPTY_SNAPSHOT, Snapshot


class WindowCollector(Collector):
    """Exposes the latest window of each model and segment from a precomputed snapshot."""

    def __init__(self, snapshot: Snapshot = EMPTY_SNAPSHOT) -> None:
        self._snapshot = snapshot

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot scrapes currently read."""
        return self._snapshot

    def update(self, snapshot: Snapshot) -> None:
        """Serve ``snapshot`` from the next scrape on."""
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        """One gauge family per series name of the snapshot, with its samples."""
        for family in self._snapshot.families:
            metric = Metric(family.name, family.documentation, "gauge")
            metric.samples = list(family.samples)
            yield metric
