"""The OpenAPI document: error answers of each kind of route, and raw JSON request bodies.

Every status a route can answer is in its ``responses``: routes combine the dictionaries
below (:data:`V1_ERRORS`, :data:`MODEL_ERRORS`, :data:`BODY_ERRORS`, :data:`WRITE_ERRORS`)
and add their own with :func:`error_responses`; every error has the one error body
(:class:`~calmon.api.schemas.ErrorBody`).

Routes that read their JSON body raw (to validate it in one Rust pass) declare it with
:func:`json_request_body`; :func:`install_openapi` adds the schemas of those bodies to the
document's components so ``/docs`` shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from calmon.api.schemas import ErrorBody

REF_TEMPLATE = "#/components/schemas/{model}"
#: the name of the bearer scheme (:data:`calmon.api.deps.bearer`) of every ``/v1`` route; the
#: document makes it optional, since tokens may not be configured
BEARER: Final = "bearer"
_BODIES: dict[str, TypeAdapter[Any]] = {}

Responses = dict[int | str, dict[str, Any]]

#: what each error status means, wherever it is answered
ERROR_DESCRIPTIONS: Final[dict[int, str]] = {
    400: "`invalid_json`: the body is not well-formed JSON (`bad_request`: nor is the "
    "`Content-Length` a number; `invalid_arrow`: an Arrow body is no readable IPC stream)",
    401: "`unauthorized`: tokens are configured and none or an unknown one was presented",
    403: "`forbidden`: the token lacks the scope of this route",
    404: "`model_not_found`: no model of this name",
    409: "`conflict`: the request contradicts what is stored",
    413: "`payload_too_large`: the body is over `CALMON_MAX_BODY_BYTES`",
    415: "`unsupported_media_type`: the body is not `application/json` (nor, on the ingestion "
    "routes of a server with pyarrow, `application/vnd.apache.arrow.stream`)",
    422: "`validation_error`: a path, query or body field breaks its rule; details name each",
    429: "`too_many_requests`: over the write rate of this token; retry after `Retry-After`",
    503: "`database_unavailable`, `database_busy` or `transaction_conflict`: nothing was "
    "stored; retry after `Retry-After` seconds",
}


def error_responses(*statuses: int, descriptions: Mapping[int, str] | None = None) -> Responses:
    """``responses`` entries for error ``statuses``, with the error body and the description
    of :data:`ERROR_DESCRIPTIONS` unless ``descriptions`` gives another."""
    described = {**ERROR_DESCRIPTIONS, **(descriptions or {})}
    return {status: {"model": ErrorBody, "description": described[status]} for status in statuses}


def described_error(status: int, description: str) -> Responses:
    """The ``responses`` entry of error ``status`` with a description of the route's own."""
    return error_responses(status, descriptions={status: description})


#: any route under ``/v1``: tokens and the database
V1_ERRORS: Final = error_responses(401, 403, 503)
#: a route on the model named in its path (``/v1/models/{model}…``)
MODEL_ERRORS: Final = {**V1_ERRORS, **error_responses(404, 422)}
#: a route that reads a JSON body
BODY_ERRORS: Final = error_responses(400, 413, 415, 422)
#: an ingestion route: a JSON body on an existing model, under the write rate limit
WRITE_ERRORS: Final = {**MODEL_ERRORS, **BODY_ERRORS, **error_responses(429)}


def operation_id(route: APIRoute) -> str:
    """The ``operationId`` of a route: its function's name, which says what it does
    (``read_windows``); names are unique across the routers."""
    return route.name


def json_request_body(name: str, adapter: TypeAdapter[Any]) -> dict[str, Any]:
    """``openapi_extra`` of a route whose JSON body ``adapter`` validates, shown as ``name``."""
    _BODIES[name] = adapter
    schema = {"$ref": REF_TEMPLATE.format(model=name)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def arrow_request_body(
    name: str, adapter: TypeAdapter[Any], media_type: str, description: str
) -> dict[str, Any]:
    """``openapi_extra`` of a route that takes its batch as JSON (``adapter``, shown as
    ``name``) or as a binary stream of ``media_type``, which ``description`` describes."""
    extra = json_request_body(name, adapter)
    body = extra["requestBody"]
    body["description"] = description
    body["content"][media_type] = {"schema": {"type": "string", "format": "binary"}}
    return extra


def install_openapi(app: FastAPI) -> None:
    """Build the OpenAPI document once, with the raw-body schemas in its components, each
    operation's responses in the order of their status, and the bearer scheme that the routes
    declare (``Security`` dependencies, with the route's scope) made optional by an empty
    alternative: ``[{"bearer": ["read"]}, {}]``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                operation["responses"] = dict(sorted(operation.get("responses", {}).items()))
                security = operation.get("security", [])
                if any(BEARER in requirement for requirement in security):
                    security.append({})
        components = document.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for name, adapter in _BODIES.items():
            schema = adapter.json_schema(ref_template=REF_TEMPLATE)
            for def_name, definition in schema.pop("$defs", {}).items():
                schemas.setdefault(def_name, definition)
            schemas[name] = schema
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
