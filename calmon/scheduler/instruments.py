"""The scheduler's own Prometheus instruments, in a registry of their own.

``calmon scheduler`` serves them on ``--metrics-port`` together with the service registry
(``calmon_build_info``) through :func:`calmon.instruments.build_scrape_registry`; in
``calmon serve`` the API's ``/metrics`` adds this registry to its collectors.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

SCHEDULER_REGISTRY: Final = CollectorRegistry(auto_describe=True)

WINDOW_COMPUTE_DURATION: Final = Histogram(
    "calmon_window_compute_duration_seconds",
    "Time to compute and store one window (every segment, one transaction)",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
    registry=SCHEDULER_REGISTRY,
)
LAST_COMPUTE_SUCCESS: Final = Gauge(
    "calmon_last_compute_success_timestamp_seconds",
    "When this process last stored a computed window (Unix time)",
    registry=SCHEDULER_REGISTRY,
)
WINDOWS_PENDING: Final = Gauge(
    "calmon_windows_pending",
    "Windows due for computation (ended past their grace, never computed or changed since), "
    "as this scheduler last planned them",
    registry=SCHEDULER_REGISTRY,
)
WINDOWS_COMPUTED: Final = Counter(
    "calmon_windows_computed",
    "Windows this scheduler process computed and stored (every segment, one transaction)",
    registry=SCHEDULER_REGISTRY,
)
SCHEDULER_LEADER: Final = Gauge(
    "calmon_scheduler_leader",
    "1 when this scheduler holds the leader lock (change scan, retention), 0 otherwise",
    registry=SCHEDULER_REGISTRY,
)
SEGMENTS_OVERFLOW: Final = Counter(
    "calmon_segments_overflow",
    "Predictions in segments beyond the model's max_segments (counted in '*' only), "
    "counted once (a recomputation adds only what its window gained)",
    ["model"],
    registry=SCHEDULER_REGISTRY,
)
COMPUTE_FAILURES: Final = Counter(
    "calmon_window_compute_failures",
    "Window computations or scans that failed (logged; retried later)",
    ["model"],
    registry=SCHEDULER_REGISTRY,
)
