"""The one error body of the API and the handlers that produce it.

Every error answer is ``{"error": {"code": ..., "message": ..., "details": [...]}}``.
Validation details name the field with its position, e.g. ``predictions[17].score``.
A malformed JSON document is 400 ``invalid_json``; a well-formed one that breaks the schema is
422 ``validation_error``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from calmon.db.sqlstate import is_lock_timeout, is_sqlite_busy
from calmon.services.errors import ServiceError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: where FastAPI puts request parts in a location; dropped from field names
_REQUEST_PARTS: Final = frozenset({"body", "path", "query", "header", "cookie"})
_HTTP_CODES: Final[dict[int, str]] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
    503: "unavailable",
}
DB_UNAVAILABLE_ERRORS: Final = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


class ApiError(ServiceError):
    """An error answer raised from routes and dependencies: a :class:`ServiceError` with the
    status (and headers) given where it is raised."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Sequence[dict[str, Any]] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(code, message, list(details))
        self.status = status
        self.headers = headers


class BodyTooLargeError(Exception):
    """The request body grew past the configured limit while it was being read."""


def error_response(
    status: int,
    code: str,
    message: str,
    details: Sequence[dict[str, Any]] = (),
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The JSON error answer."""
    body = {"error": {"code": code, "message": message, "details": list(details)}}
    return JSONResponse(body, status_code=status, headers=headers)


def field_name(loc: Sequence[str | int]) -> str:
    """``("predictions", 17, "score")`` -> ``predictions[17].score``; ``()`` -> ``body``."""
    parts = list(loc)
    if parts and parts[0] in _REQUEST_PARTS and (len(parts) > 1 or parts[0] == "body"):
        parts = parts[1:]
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else str(part)
    return name or "body"


def validation_error(errors: Sequence[Any]) -> ApiError:
    """Turn pydantic errors into a 422 (or 400 when the JSON itself is malformed)."""
    if any(err["type"] == "json_invalid" for err in errors):
        message = next(err["msg"] for err in errors if err["type"] == "json_invalid")
        return ApiError(400, "invalid_json", message)
    details = [
        {"field": field_name(err["loc"]), "message": err["msg"], "type": err["type"]}
        for err in errors
    ]
    count = len(details)
    return ApiError(
        422,
        "validation_error",
        f"{count} invalid field{'s' if count != 1 else ''}: {details[0]['field']}"
        + (" …" if count > 1 else ""),
        details,
    )


def field_error(field: str, message: str, error_type: str = "value_error") -> ApiError:
    """A 422 on one field, for rules checked after the schema."""
    return ApiError(
        422,
        "validation_error",
        f"1 invalid field: {field}",
        [{"field": field, "message": message, "type": error_type}],
    )


def parse_json(validate: Callable[[bytes], T], body: bytes) -> T:
    """Validate a raw JSON body in one pass with ``validate`` (pydantic's Rust parser and
    validator: ``TypeAdapter.validate_json`` or the like)."""
    try:
        return validate(body)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False, include_input=False)) from None


def _service_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)


def _request_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _service_error(_request, validation_error(exc.errors()))


def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return error_response(
        exc.status_code, code, message, headers=dict(exc.headers) if exc.headers else None
    )


def _too_large(request: Request, _exc: Exception) -> JSONResponse:
    limit = request.app.state.settings.max_body_bytes
    return payload_too_large(limit)


def payload_too_large(limit: int) -> JSONResponse:
    """413 for a body over ``limit`` bytes."""
    return error_response(
        413, "payload_too_large", f"request body is larger than {limit} bytes", headers=None
    )


def _db_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    if is_sqlite_busy(exc):
        logger.warning("the SQLite write lock was not granted within the busy timeout")
        return error_response(
            503,
            "database_busy",
            "the database is busy with another write; nothing was stored: retry",
            headers={"Retry-After": "1"},
        )
    if is_lock_timeout(exc):
        logger.warning("a row lock was not granted within the lock timeout")
        return error_response(
            503,
            "transaction_conflict",
            "the request waited too long for rows that concurrent writes hold; nothing of it "
            "was stored: send it again",
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, sa_exc.TimeoutError):
        logger.warning("no database connection free within the pool timeout")
        return error_response(
            503,
            "database_busy",
            "every database connection of this process is in use; retry later",
            headers={"Retry-After": "1"},
        )
    logger.warning("database unavailable: %s", type(exc).__name__)
    return error_response(
        503,
        "database_unavailable",
        "the database is not reachable or did not answer in time; retry later",
        headers={"Retry-After": "1"},
    )


def install_error_handlers(app: FastAPI) -> None:
    """Route every error the application can raise to the one error body."""
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(BodyTooLargeError, _too_large)
    for error_type in DB_UNAVAILABLE_ERRORS:
        app.add_exception_handler(error_type, _db_unavailable)
