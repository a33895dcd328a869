"""The service's own Prometheus instruments (ingestion, HTTP, build) and the registry served
on ``/metrics``; the scheduler's are in :mod:`calmon.scheduler.instruments`.

Label values are bounded: ``model`` only takes names of stored models (metrics move after a
successful request), ``reason`` is one of ``REJECT_REASONS``, ``route`` is a route template
(or ``unmatched``), ``method`` a standard HTTP method (or ``other``), ``status`` a class such
as ``2xx``.

With several worker processes (``calmon api --workers N``), ``PROMETHEUS_MULTIPROC_DIR`` is set
before any worker starts; every worker then writes its values to files in that directory and
each scrape, whichever worker answers it, adds them up (prometheus_client's multiprocess mode).
Without it, the values live in this process.

:func:`build_scrape_registry` builds the registry for one scrape: the service metrics plus any
collectors the application registered (``app.state.scrape_collectors``), such as the window
metrics exporter.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Final

from prometheus_client import (
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from calmon import __version__
from calmon.settings import MULTIPROC_ENV

#: what `calmon_ingest_rejected_total{reason}` may say, by HTTP status of the rejection
REJECT_REASONS: Final[dict[int, str]] = {
    400: "invalid_json",
    401: "unauthorized",
    403: "forbidden",
    404: "unknown_model",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "rate_limited",
    503: "unavailable",
}
REJECT_OTHER: Final = "error"
#: reasons that are no fault of the client: the batch is answered 503 or 429 and retried until
#: it is stored, or failed on the service's side. ``CalmonIngestRejections`` leaves them out and
#: counts only what a client must fix (validation, conflicts, authentication, size, ...)
NOT_CLIENT_ERRORS: Final = frozenset({"unavailable", "rate_limited", REJECT_OTHER})
HTTP_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

disable_created_metrics()  # type: ignore[no-untyped-call]
SERVICE_REGISTRY = CollectorRegistry(auto_describe=True)

PREDICTIONS_INGESTED = Counter(
    "calmon_predictions_ingested",
    "Predictions stored (new ones; exact repeats are counted as duplicates)",
    ["model"],
    registry=SERVICE_REGISTRY,
)
PREDICTIONS_DUPLICATE = Counter(
    "calmon_predictions_duplicate",
    "Predictions received again with the same content (changed nothing)",
    ["model"],
    registry=SERVICE_REGISTRY,
)
LABELS_INGESTED = Counter(
    "calmon_labels_ingested",
    "Labels that changed something: a prediction's label set or changed, or a pending label "
    "new or replaced (repeats not counted)",
    ["model"],
    registry=SERVICE_REGISTRY,
)
INGEST_REJECTED = Counter(
    "calmon_ingest_rejected",
    "Predictions rejected (every prediction of a rejected request), by reason; unavailable and "
    "rate_limited batches are retried by clients, error is the service's own failure",
    ["reason"],
    registry=SERVICE_REGISTRY,
)
# Every reason has a series from start-up, at 0, so that rate() sees the first rejection.
for _reason in (*REJECT_REASONS.values(), REJECT_OTHER):
    INGEST_REJECTED.labels(_reason)
HTTP_REQUESTS = Counter(
    "calmon_http_requests",
    "HTTP requests served",
    ["route", "method", "status"],
    registry=SERVICE_REGISTRY,
)
HTTP_DURATION = Histogram(
    "calmon_http_request_duration_seconds",
    "Time to serve an HTTP request, from its first byte in to the last byte out",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=SERVICE_REGISTRY,
)
BUILD_INFO = Gauge(
    "calmon_build_info",
    "Always 1; the label says which version runs",
    ["version"],
    multiprocess_mode="max",
    registry=SERVICE_REGISTRY,
)
BUILD_INFO.labels(version=__version__).set(1)


class _Forward(Collector):
    """Expose the metrics of another registry (this process's values)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()


def multiprocess_dir() -> str | None:
    """The directory shared by worker processes, when running several."""
    return os.environ.get(MULTIPROC_ENV) or None


def build_scrape_registry(extra_collectors: Iterable[Collector] = ()) -> CollectorRegistry:
    """The registry one ``/metrics`` scrape renders: service metrics and ``extra_collectors``.

    Service metrics come from every worker's files in multiprocess mode, else from this
    process (plus its process and platform metrics).
    """
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_dir() is not None:
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Forward(SERVICE_REGISTRY))
        registry.register(PROCESS_COLLECTOR)
        registry.register(PLATFORM_COLLECTOR)
    for collector in extra_collectors:
        registry.register(collector)
    return registry


def reject_reason(status: int) -> str:
    """The bounded ``reason`` label for a rejection with HTTP ``status``."""
    return REJECT_REASONS.get(status, REJECT_OTHER)
