"""OpenAPI for routes that read their JSON body raw (to validate it in one Rust pass).

Such routes declare their body with :func:`json_request_body`; :func:`install_openapi` adds the
schemas of those bodies to the document's components so ``/docs`` shows them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

REF_TEMPLATE = "#/components/schemas/{model}"
_BODY_MODELS: list[type[BaseModel]] = []


def json_request_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` of a route whose JSON body is ``model``."""
    if model not in _BODY_MODELS:
        _BODY_MODELS.append(model)
    schema = {"$ref": REF_TEMPLATE.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def install_openapi(app: FastAPI) -> None:
    """Build the OpenAPI document once, with the raw-body schemas in its components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        _, definitions = models_json_schema(
            [(model, "validation") for model in _BODY_MODELS], ref_template=REF_TEMPLATE
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for name, schema in definitions.get("$defs", {}).items():
            schemas.setdefault(name, schema)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
