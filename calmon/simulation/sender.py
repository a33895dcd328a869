"""The upload of ``calmon simulate``: a stream's windows as prediction batches, sent window after
window through :class:`calmon_client.Api`, several batches of a window at a time.

Every request is safe to repeat (a prediction batch whose repeat is a no-op, labels), so the
client's retries apply (connection errors, timeouts, 408, 429, 5xx, with its back-off); any
other error answer stops the run with :class:`calmon_client.ApiError`, which names the
server's error code and message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from calmon.services.ingest_schemas import MAX_BATCH
from calmon.simulation.stream import WindowData

if TYPE_CHECKING:
    from calmon_client import Api


@dataclass(frozen=True, slots=True)
class SendTotals:
    """What the server answered for the batches of one window: new + duplicates = sent."""

    new: int
    duplicates: int


def encode_batches(data: WindowData, *, batch_size: int, labels: bool = True) -> list[bytes]:
    """The window's predictions as request bodies of at most ``batch_size`` each, in order;
    without their labels unless ``labels``."""
    if not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
    stamps = np.datetime_as_string(
        data.timestamps.astype("datetime64[us]"), unit="us", timezone="UTC"
    ).tolist()
    scores = data.scores.tolist()
    values = data.labels.tolist()
    bodies = []
    for first in range(0, len(data.ids), batch_size):
        last = first + batch_size
        rows: list[dict[str, Any]] = [
            {"id": i, "timestamp": t, "score": s, "label": y}
            if labels
            else {"id": i, "timestamp": t, "score": s}
            for i, t, s, y in zip(
                data.ids[first:last],
                stamps[first:last],
                scores[first:last],
                values[first:last],
                strict=True,
            )
        ]
        bodies.append(orjson.dumps({"predictions": rows}))
    return bodies


def send_windows(
    api: Api,
    *,
    model: str,
    windows: Iterable[WindowData],
    batch_size: int,
    concurrency: int,
    on_batch: Callable[[WindowData, int], None] = lambda _data, _rows: None,
    on_window: Callable[[WindowData, SendTotals], None] = lambda _data, _totals: None,
    labelled: Callable[[WindowData], bool] = lambda _data: True,
) -> list[SendTotals]:
    """POST every window's predictions, window after window, ``concurrency`` batches at a time.

    A window is complete on the server before the next one starts. ``on_batch(data, rows)``
    runs after each accepted batch (in the sending thread), ``on_window(data, totals)`` after
    each window. A window for which ``labelled(data)`` is false is sent without its labels
    (see :func:`send_labels`). Raises :class:`calmon_client.ApiError` on the first batch that
    fails for good.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    totals: list[SendTotals] = []

    def post(data: WindowData, body: bytes, rows: int) -> tuple[int, int]:
        answer = api.post_predictions(model, body)
        on_batch(data, rows)
        return answer

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="simulate") as pool:
        for data in windows:
            bodies = encode_batches(data, batch_size=batch_size, labels=labelled(data))
            sizes = [min(batch_size, len(data.ids) - k * batch_size) for k in range(len(bodies))]
            futures: list[Future[tuple[int, int]]] = [
                pool.submit(post, data, body, rows)
                for body, rows in zip(bodies, sizes, strict=True)
            ]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for future in pending:
                future.cancel()
            answers = [future.result() for future in futures if future in done]
            window_totals = SendTotals(
                new=sum(a[0] for a in answers), duplicates=sum(a[1] for a in answers)
            )
            totals.append(window_totals)
            on_window(data, window_totals)
    return totals


def send_labels(
    api: Api,
    *,
    model: str,
    windows: Iterable[WindowData],
    batch_size: int,
) -> int:
    """POST the labels of ``windows`` (sent earlier without them), ``batch_size`` per request;
    returns how many were sent. Raises :class:`calmon_client.ApiError` on a request that fails
    for good."""
    if not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
    sent = 0
    for data in windows:
        values = data.labels.tolist()
        for first in range(0, len(data.ids), batch_size):
            last = first + batch_size
            rows = [
                {"id": i, "label": y}
                for i, y in zip(data.ids[first:last], values[first:last], strict=True)
            ]
            api.post_labels(model, orjson.dumps({"labels": rows}))
            sent += len(rows)
    return sent
