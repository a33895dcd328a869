""":class:`Api`: the calmon API's requests one at a time, blocking, each retried with the
monitor's back-off, and raising what fails for good.

Where :class:`~calmon_client.Monitor` queues and never raises (production code that must not
wait), ``Api`` is for tools that make a request and want its answer or its error: creating a
model, sending prepared batches, reading window records, asking for a recompute. Every request
goes through the core's :func:`~calmon_client._core.call_steps` (the same statuses retried, the
same pauses, ``Retry-After`` obeyed), so there is one retry policy for both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Literal
from urllib.parse import quote

import httpx

from calmon_client._core import (
    ENSURE_ATTEMPTS,
    MAX_BATCH,
    Backoff,
    Call,
    ModelInfo,
    Reply,
    call_steps,
    decoded,
    ensure_steps,
    refused,
    root_url,
)
from calmon_client._sync import headers_for, run_steps

Method = Literal["GET", "PUT", "POST"]
#: the records read per request by :meth:`Api.windows` (the server's largest page)
WINDOWS_PAGE: Final = 1000


def _instant(value: datetime | str) -> str:
    """An instant as the API takes it: text as given, an aware datetime in UTC with ``Z``."""
    if isinstance(value, str):
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("an instant must be an aware datetime (with a tzinfo)")
    return value.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def _json_body(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


class Api:
    """Blocking requests of the calmon API at ``url`` (the server's root, e.g.
    ``http://calmon:8000``; a trailing ``/v1`` is ignored), with a bearer ``token`` when the
    server has tokens.

    Each request is made at most ``attempts`` times: connection errors, timeouts, 408, 429,
    502, 503, 504 and other server errors are tried again after a pause of the monitor's
    back-off (``0.1 s · 2^k``, capped at ``max_retry_delay``, jittered; a ``Retry-After`` is
    obeyed); any other error answer raises :class:`~calmon_client.ApiError` at once, and so
    does the last attempt without a usable answer. Every request of the API that this class
    makes is safe to repeat (the server stores a prediction id once).

    ``timeout``: seconds for one request (connect, send, answer), past which it is retried.
    ``client``: an ``httpx.Client`` to send through instead of one of its own (its base URL,
    headers and timeout as they are; ``url`` and ``token`` are then not given, and closing the
    ``Api`` leaves it open). The methods may be called from several threads at once.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        attempts: int = ENSURE_ATTEMPTS,
        max_retry_delay: float = 5.0,
        client: httpx.Client | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        if (url is None) == (client is None):
            raise ValueError("give either url or client")
        if client is not None and token is not None:
            raise ValueError("give the token to the client's headers")
        self.attempts = attempts
        self._backoff = Backoff(cap=max_retry_delay)
        self._owned = client is None
        self.http: httpx.Client = client or httpx.Client(
            base_url=root_url(url or ""), headers=headers_for(token), timeout=timeout
        )

    def request(
        self,
        method: Method,
        path: str,
        *,
        content: bytes | None = None,
        json: object = None,
        params: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Make one request of the API (``path`` from the root: ``/v1/models/fraud``) with a
        JSON body, given encoded (``content``) or as a value (``json``); returns the answer's
        status and its decoded JSON body (None when empty). Raises
        :class:`~calmon_client.ApiError` for an error answer or when no attempt got one."""
        if content is not None and json is not None:
            raise ValueError("give content or json, not both")
        body = content if json is None else _json_body(json)
        call = Call(method, path, body, tuple((params or {}).items()))
        steps = call_steps(call, self._backoff, self.attempts)
        reply: Reply = run_steps(self.http, steps, timeout=None)
        if reply.status >= 400:
            url = str(self.http.build_request(method, path).url.copy_with(query=None))
            raise refused(call, reply, url)
        return reply.status, decoded(reply)

    def get_model(self, model: str) -> dict[str, Any]:
        """The model as the server shows it (``GET /v1/models/{model}``; a missing one is
        :class:`~calmon_client.ApiError` 404 ``model_not_found``)."""
        answer: dict[str, Any] = self.request("GET", _model_path(model))[1]
        return answer

    def put_model(self, model: str, *, config: Mapping[str, Any]) -> ModelInfo:
        """Create the model with ``config``, or replace the configuration of the one that
        exists (``PUT /v1/models/{model}``; ``created`` says which); the server's view."""
        status, answer = self.request("PUT", _model_path(model), json=dict(config))
        return ModelInfo(model, status == 201, answer)

    def ensure_model(self, model: str, *, config: Mapping[str, Any] | None = None) -> ModelInfo:
        """What :func:`~calmon_client.ensure_model` does, through this connection: create the
        model with ``config`` when it is missing, change nothing when it exists (raising
        :class:`~calmon_client.ModelConfigMismatchError` when a given field differs)."""
        steps = ensure_steps(model, config, self._backoff, self.attempts)
        return run_steps(self.http, steps, timeout=None)

    def post_predictions(
        self, model: str, predictions: Sequence[Mapping[str, Any]] | bytes
    ) -> tuple[int, int]:
        """Send one batch of at most 10,000 predictions (``POST
        /v1/models/{model}/predictions``): dicts with ``id``, ``timestamp``, ``score`` and
        optionally ``label`` and ``segment``, or the JSON body already encoded (``bytes``:
        ``{"predictions": [...]}``). Returns the server's (new, duplicates); a batch refused in
        part or in whole raises :class:`~calmon_client.ApiError` (nothing of it is stored)."""
        if not isinstance(predictions, bytes):
            _check_size(len(predictions))
            predictions = _json_body({"predictions": list(predictions)})
        answer = self.request("POST", f"{_model_path(model)}/predictions", content=predictions)[1]
        return int(answer["new"]), int(answer["duplicates"])

    def post_labels(
        self, model: str, labels: Sequence[Mapping[str, Any]] | bytes
    ) -> dict[str, int]:
        """Send one batch of at most 10,000 labels (``POST /v1/models/{model}/labels``): dicts
        with ``id`` and ``label``, or the JSON body already encoded (``{"labels": [...]}``).
        Returns the server's counts (``updated``, ``unchanged``, ``pending``, ``expired``)."""
        if not isinstance(labels, bytes):
            _check_size(len(labels))
            labels = _json_body({"labels": list(labels)})
        answer: dict[str, int] = self.request(
            "POST", f"{_model_path(model)}/labels", content=labels
        )[1]
        return answer

    def windows(
        self,
        model: str,
        *,
        segment: str | None = None,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        page: int = WINDOWS_PAGE,
    ) -> Iterator[dict[str, Any]]:
        """The stored window records of ``model`` (``GET /v1/models/{model}/windows``), oldest
        first, of one ``segment`` (None: every segment) and of the windows overlapping
        [``start``, ``end``) when given; read ``page`` records per request, the next page
        only when the iteration gets there."""
        params = {"limit": str(page)}
        if segment is not None:
            params["segment"] = segment
        if start is not None:
            params["start"] = _instant(start)
        if end is not None:
            params["end"] = _instant(end)
        path = f"{_model_path(model)}/windows"
        while True:
            answer = self.request("GET", path, params=params)[1]
            yield from answer["windows"]
            cursor = answer["next_cursor"]
            if cursor is None:
                return
            params = {**params, "cursor": cursor}

    def recompute(
        self, model: str, *, start: datetime | str, end: datetime | str
    ) -> dict[str, Any]:
        """Have the windows overlapping [``start``, ``end``) recomputed at the scheduler's next
        tick (``POST /v1/models/{model}/recompute``, ``admin`` scope); the server's answer."""
        params = {"start": _instant(start), "end": _instant(end)}
        answer: dict[str, Any] = self.request(
            "POST", f"{_model_path(model)}/recompute", params=params
        )[1]
        return answer

    def close(self) -> None:
        """Close the HTTP client (unless it was given)."""
        if self._owned:
            self.http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _model_path(model: str) -> str:
    """The path of a model's routes; the name is quoted, so that a name the server refuses
    stays one path segment (and gets its 404 or 422)."""
    return f"/v1/models/{quote(model, safe='')}"


def _check_size(count: int) -> None:
    if count > MAX_BATCH:
        raise ValueError(f"a batch holds at most {MAX_BATCH} items, not {count}")
