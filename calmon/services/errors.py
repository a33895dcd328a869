"""Errors raised by services; the API turns each into its status code and error body.

The API's own errors (:class:`calmon.api.errors.ApiError`) are of this family too: one type, one
handler, one body."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A request that cannot be served as asked; ``code`` is stable, ``message`` is for people."""

    status = 400
    #: headers of the error answer (the API's own errors may set some, e.g. ``Retry-After``)
    headers: dict[str, str] | None = None

    def __init__(self, code: str, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or []


class NotFoundError(ServiceError):
    """The named thing does not exist (404)."""

    status = 404


class ConflictError(ServiceError):
    """The request contradicts stored data (409); nothing was stored."""

    status = 409
