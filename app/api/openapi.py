"""OpenAPI for routes that read their JSON body raw (to validate it in one Rust pass).

Such routes declare their body with :func:`json_request_body`; :func:`install_openapi` adds the
schemas of those bodies to the document's components so ``/docs`` shows them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

REF_TEMPLATE = "#/components/schemas/{model}"
_BODIES: dict[str, TypeAdapter[Any]] = {}


def json_request_body(name: str, adapter: TypeAdapter[Any]) -> dict[str, Any]:
    """``openapi_extra`` of a route whose JSON body ``adapter`` validates, shown as ``name``."""
    _BODIES[name] = adapter
    schema = {"$ref": REF_TEMPLATE.format(model=name)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def install_openapi(app: FastAPI) -> None:
    """Build the OpenAPI document once, with the raw-body schemas in its components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for name, adapter in _BODIES.items():
            schema = adapter.json_schema(ref_template=REF_TEMPLATE)
            for def_name, definition in schema.pop("$defs", {}).items():
                schemas.setdefault(def_name, definition)
            schemas[name] = schema
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
