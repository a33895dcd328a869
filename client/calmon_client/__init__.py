"""Send a model's predictions and labels to a calmon server from production code.

    from calmon_client import Monitor, ensure_model

    ensure_model("http://calmon:8000", "fraud", config={"window": "1h"}, token=ADMIN_TOKEN)
    monitor = Monitor("http://calmon:8000", "fraud", token="…")
    monitor.log("tx-1", 0.93, segment="country=FR")  # queued; sent in the background
    monitor.label("tx-1", 1)                          # the label, when it is known

Batches by size and age from a background thread, retries what may pass (connection errors,
timeouts, 429 and 503 with their ``Retry-After``) with jittered back-off, and flushes at exit.
Nothing raises into the caller after the constructor: problems are counted (:meth:`Monitor.stats`),
logged on the ``calmon_client`` logger, and passed to an optional ``on_error`` callback.
The model must exist: :func:`ensure_model` creates it when missing (and raises
:class:`ModelError` when it cannot), or give the monitor a ``config`` to have it do the same.
:class:`AsyncMonitor` is the asyncio twin. :class:`Api` makes the API's requests one at a
time for tools (create a model, send a prepared batch, read window records, ask for a
recompute), with the same retries, raising :class:`ApiError`. Depends on httpx only.
"""

from calmon_client._api import Api
from calmon_client._async import AsyncMonitor, ensure_model_async
from calmon_client._core import (
    ApiError,
    Incident,
    IncidentKind,
    ModelConfigMismatchError,
    ModelError,
    ModelInfo,
    Stats,
    WhenFull,
)
from calmon_client._sync import Monitor, ensure_model

__all__ = [
    "Api",
    "ApiError",
    "AsyncMonitor",
    "Incident",
    "IncidentKind",
    "ModelConfigMismatchError",
    "ModelError",
    "ModelInfo",
    "Monitor",
    "Stats",
    "WhenFull",
    "ensure_model",
    "ensure_model_async",
]
__version__ = "0.1.0"
