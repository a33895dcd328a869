"""``/docs`` (Swagger UI) and ``/redoc`` served with the package's own copies of their files.

FastAPI's built-in pages load their script, style sheet, favicon and (ReDoc) fonts from other
hosts, so they render blank on a network without internet access, and Swagger UI's page starts
with an inline script. These routes give the same pages with every asset under ``/ui/static``
(``calmon/ui/static/vendor/README.md`` names the versions) and Swagger UI's start-up script as a
file of the package (``static/docs/swagger-init.js``, which reads the document's URL from a
``data-`` attribute), so :data:`DOCS_POLICY` runs scripts from the server only, none inline.
The OpenAPI document stays at ``/openapi.json``. The application is built with
``docs_url=None, redoc_url=None`` so that these are the only ones.
"""

from __future__ import annotations

from html import escape
from typing import Final

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

VENDOR: Final = "/ui/static/vendor"
FAVICON: Final = "/ui/static/favicon.svg"
SWAGGER_INIT: Final = "/ui/static/docs/swagger-init.js"
#: scripts from this server only, never inline; styles may be inline (both tools set element
#: styles); nothing from another host: ReDoc's side menu shows its maker's logo from theirs,
#: which this blocks (the image then hides itself)
DOCS_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)

router = APIRouter(include_in_schema=False)


def _page(title: str, head: str, body: str) -> HTMLResponse:
    """A whole page under :data:`DOCS_POLICY`."""
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{escape(title)}</title><link rel="icon" href="{FAVICON}" type="image/svg+xml">'
        f"{head}</head><body>{body}</body></html>"
    )
    return HTMLResponse(text, headers={"Content-Security-Policy": DOCS_POLICY})


def _openapi_url(request: Request) -> str:
    return escape(request.app.openapi_url or "/openapi.json")


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over ``/openapi.json``, from the package's files."""
    return _page(
        f"{request.app.title} API - Swagger UI",
        f'<link rel="stylesheet" href="{VENDOR}/swagger-ui/swagger-ui.css">',
        f'<div id="swagger-ui" data-openapi-url="{_openapi_url(request)}"></div>'
        f'<script src="{VENDOR}/swagger-ui/swagger-ui-bundle.js"></script>'
        f'<script src="{SWAGGER_INIT}"></script>',
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    """ReDoc over ``/openapi.json``, from the package's files, with the system's fonts (ReDoc
    starts itself on its ``<redoc>`` element)."""
    return _page(
        f"{request.app.title} API - ReDoc",
        "<style>body{margin:0;padding:0}</style>",
        f'<redoc spec-url="{_openapi_url(request)}"></redoc>'
        f'<script src="{VENDOR}/redoc/redoc.standalone.js"></script>',
    )
