"""ASGI middleware around every request: request id, body size limit, access log, metrics,
and the headers every answer carries.

Every answer says ``X-Content-Type-Options: nosniff`` (a browser never runs a JSON body or a
static file as another type), and one without its own Content-Security-Policy gets
:data:`DEFAULT_POLICY`, which lets nothing run or load (pages set theirs).

The body limit applies before the application parses anything: an announced
``Content-Length`` over it, or a streamed body as it crosses it (:class:`BodyTooLargeError`),
is answered 413. ``calmon_ingest_rejected_total`` counts rejected *predictions*
(``docs/reference/api.md``): the JSON body dependency leaves the body it read in the request's scope
(:func:`remember_body`), parsed only when the request is rejected. A client that leaves before
its body arrived is logged and counted with status 499 (``docs/measurements/ingestion.md``).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Sequence
from typing import Any, Final

import orjson
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from calmon import instruments
from calmon.api.errors import BodyTooLargeError, error_response, payload_too_large
from calmon.log import request_id_var
from calmon.services.ingest_arrow import stream_rows

logger = logging.getLogger("calmon.access")

REQUEST_ID_HEADER: Final = "x-request-id"
#: status recorded (never sent) for a request whose client left before sending all of it
CLIENT_CLOSED_REQUEST: Final = 499
#: the policy of answers that set none: JSON, static files (an SVG opened alone is a document)
DEFAULT_POLICY: Final = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
_CSP: Final = b"content-security-policy"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_DOC_PATHS: Final = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
_PREDICTIONS_PATH = re.compile(r"^/v1/models/[^/]+/predictions$")
#: where :func:`remember_body` leaves the body the application read
BODY_SCOPE_KEY: Final = "calmon.body"


class RequestContextMiddleware:
    """Give each request an id (``X-Request-ID`` in, or a new one; echoed back), bound its body,
    log it as one JSON line, and count it in the service metrics.

    Metrics and logs name a request by its route template. A request answered before routing
    (413, or 400 for a bad ``Content-Length``) is matched against ``routes`` for it, as the
    router would match it; a path no route matches is ``unmatched``, which keeps the label
    values bounded.
    """

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, routes: Sequence[BaseRoute] = ()
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.routes = [(route, path) for route in routes if (path := _path_of(route))]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        offered = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = offered if _REQUEST_ID.match(offered) else uuid.uuid4().hex
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        state: dict[str, Any] = {"status": 500, "started": False}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
                message["headers"] = with_safe_headers(
                    [
                        *message.get("headers", []),
                        (REQUEST_ID_HEADER.encode(), request_id.encode()),
                    ]
                )
            await send(message)

        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                received += len(chunk)
                if received > self.max_body_bytes:
                    raise BodyTooLargeError
            return message

        try:
            early = self._early_answer(headers)
            if early is not None:
                await early(scope, receive, send_with_id)
            else:
                await self.app(scope, limited_receive, send_with_id)
        except ClientDisconnect:
            state["status"] = CLIENT_CLOSED_REQUEST
        except Exception:
            logger.exception("unhandled error")
            if not state["started"]:
                response = error_response(500, "internal_error", "internal server error")
                await response(scope, receive, send_with_id)
        finally:
            self._record(scope, state["status"], time.perf_counter() - started)
            request_id_var.reset(token)

    def _early_answer(self, headers: dict[bytes, bytes]) -> Any:
        length = headers.get(b"content-length")
        if length is None:
            return None
        try:
            size = int(length)
        except ValueError:
            return error_response(400, "bad_request", "Content-Length is not a number")
        if size > self.max_body_bytes:
            return payload_too_large(self.max_body_bytes)
        return None

    def _template(self, scope: Scope) -> str:
        """The template of the route that serves (or would serve) the request."""
        routed = _path_of(scope.get("route"))
        if routed:
            return routed
        if scope["path"] in _DOC_PATHS:
            return str(scope["path"])
        other_method = None
        for route, path in self.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return path
            if match is Match.PARTIAL and other_method is None:
                other_method = path
        return other_method or "unmatched"

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        template = self._template(scope)
        method = scope["method"] if scope["method"] in instruments.HTTP_METHODS else "other"
        instruments.HTTP_REQUESTS.labels(template, method, f"{status // 100}xx").inc()
        instruments.HTTP_DURATION.labels(template, method).observe(seconds)
        rejected = status >= 400 and status != CLIENT_CLOSED_REQUEST
        if rejected and method == "POST" and _PREDICTIONS_PATH.match(scope["path"]):
            instruments.INGEST_REJECTED.labels(instruments.reject_reason(status)).inc(
                predictions_in(scope.get(BODY_SCOPE_KEY, b""))
            )
        level = logging.WARNING if status >= 500 else logging.INFO
        logger.log(
            level,
            "%s %s %d",
            scope["method"],
            template,
            status,
            extra={
                "method": scope["method"],
                "path": scope["path"],
                "route": template,
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
            },
        )


def with_safe_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` with ``X-Content-Type-Options: nosniff``, and :data:`DEFAULT_POLICY` unless
    they carry a Content-Security-Policy."""
    out = [(name, value) for name, value in headers if name.lower() != b"x-content-type-options"]
    out.append((b"x-content-type-options", b"nosniff"))
    if not any(name.lower() == _CSP for name, _ in out):
        out.append((_CSP, DEFAULT_POLICY.encode()))
    return out


def _path_of(route: Any) -> str | None:
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else None


def remember_body(scope: Scope, body: bytes) -> None:
    """Leave a reference to the request ``body`` the application read (no copy) in ``scope``,
    for the rejection count of :class:`RequestContextMiddleware`."""
    scope[BODY_SCOPE_KEY] = body


def predictions_in(body: bytes) -> int:
    """How many predictions a request body carries: the length of its ``predictions`` array,
    the rows of an Arrow stream, or 1 when the body is neither (cut, or never read)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return stream_rows(body) or 1
    if isinstance(document, dict) and isinstance(document.get("predictions"), list):
        return len(document["predictions"])
    return 1
