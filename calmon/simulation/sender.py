"""The HTTP side of ``calmon simulate``: JSON requests with retries, and the batched upload.

Every request the simulator makes is safe to repeat (``PUT`` of a model, a prediction batch
whose repeat is a no-op, reads), so connection errors and answers 429, 502, 503 and 504 are
retried with exponential back-off (or the server's ``Retry-After``), a bounded number of times.
Any other error answer stops the run with the server's error code and message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Final

import httpx
import numpy as np
import orjson

from calmon.services.ingest_schemas import MAX_BATCH
from calmon.simulation.stream import WindowData

RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})


class SendError(Exception):
    """The server refused a request (``status``: its answer's status), or stayed unreachable
    through every retry (``status`` None, or the last retried status)."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        #: the server's error code and message, or what went wrong with the connection
        self.reason = reason or message


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry: delays first_delay·2^k, capped at max_delay."""

    attempts: int = 8
    first_delay: float = 0.25
    max_delay: float = 5.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 0)."""
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), self.max_delay)
            except ValueError:
                pass
        return min(self.first_delay * 2.0**attempt, self.max_delay)


def make_client(url: str, *, token: str | None, timeout: float = 60.0) -> httpx.Client:
    """A client for the server at ``url`` (its root, e.g. ``http://127.0.0.1:8000``)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, headers=headers, timeout=timeout)


#: the message of a 404 for a path the server does not serve (a missing model names itself)
UNKNOWN_PATH: Final = "Not Found"


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        text = f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason_phrase
    if response.status_code == 404 and error["message"] == UNKNOWN_PATH:
        text += (
            f" ({response.request.url.copy_with(query=None)} is not a path of the calmon API:"
            " is --url the server's root URL, such as http://127.0.0.1:8000?)"
        )
    return text


def request_json(
    client: httpx.Client,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    params: Mapping[str, str] | None = None,
    retry: RetryPolicy = RetryPolicy(),
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, Any]:
    """Send one request (``body`` is JSON already encoded); return (status, decoded body).

    Raises :class:`SendError` for an error answer that is not retried, or when the last
    attempt still fails.
    """
    headers = {"Content-Type": "application/json"} if body is not None else None
    problem = ""
    for attempt in range(retry.attempts):
        retry_after: str | None = None
        try:
            response = client.request(method, path, content=body, params=params, headers=headers)
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if response.status_code < 400:
                return response.status_code, orjson.loads(response.content or b"null")
            problem = f"{response.status_code} {_error_text(response)}"
            if response.status_code not in RETRY_STATUSES:
                raise SendError(
                    f"{method} {path}: {problem}",
                    status=response.status_code,
                    reason=_error_text(response),
                )
            retry_after = response.headers.get("Retry-After")
        if attempt + 1 < retry.attempts:
            sleep(retry.delay(attempt, retry_after))
    raise SendError(
        f"{method} {path}: gave up after {retry.attempts} attempts: {problem}", reason=problem
    )


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
    client: httpx.Client,
    *,
    model: str,
    windows: Iterable[WindowData],
    batch_size: int,
    concurrency: int,
    on_batch: Callable[[WindowData, int], None] = lambda _data, _rows: None,
    on_window: Callable[[WindowData, SendTotals], None] = lambda _data, _totals: None,
    retry: RetryPolicy = RetryPolicy(),
    labelled: Callable[[WindowData], bool] = lambda _data: True,
) -> list[SendTotals]:
    """POST every window's predictions, window after window, ``concurrency`` batches at a time.

    A window is complete on the server before the next one starts. ``on_batch(data, rows)``
    runs after each accepted batch (in the sending thread), ``on_window(data, totals)`` after
    each window. A window for which ``labelled(data)`` is false is sent without its labels
    (see :func:`send_labels`). Raises :class:`SendError` on the first batch that fails for
    good.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    path = f"/v1/models/{model}/predictions"
    totals: list[SendTotals] = []

    def post(data: WindowData, body: bytes, rows: int) -> tuple[int, int]:
        _, answer = request_json(client, "POST", path, body=body, retry=retry)
        on_batch(data, rows)
        return int(answer["new"]), int(answer["duplicates"])

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
    client: httpx.Client,
    *,
    model: str,
    windows: Iterable[WindowData],
    batch_size: int,
    retry: RetryPolicy = RetryPolicy(),
) -> int:
    """POST the labels of ``windows`` (sent earlier without them), ``batch_size`` per request;
    returns how many were sent. Raises :class:`SendError` on a request that fails for good."""
    if not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
    path = f"/v1/models/{model}/labels"
    sent = 0
    for data in windows:
        values = data.labels.tolist()
        for first in range(0, len(data.ids), batch_size):
            last = first + batch_size
            rows = [
                {"id": i, "label": y}
                for i, y in zip(data.ids[first:last], values[first:last], strict=True)
            ]
            request_json(client, "POST", path, body=orjson.dumps({"labels": rows}), retry=retry)
            sent += len(rows)
    return sent
