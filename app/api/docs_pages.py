"""``/docs`` (Swagger UI) and ``/redoc`` served with the package's own copies of their files.

FastAPI's built-in pages load their script, style sheet, favicon and (ReDoc) fonts from other
hosts, so they render blank on a network without internet access. These routes give the same
pages with every asset under ``/ui/static`` (``app/ui/static/vendor/README.md`` names the
versions); the OpenAPI document stays at ``/openapi.json``. The application is built with
``docs_url=None, redoc_url=None`` so that these are the only ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

VENDOR: Final = "/ui/static/vendor"
FAVICON: Final = "/ui/static/favicon.svg"
#: Swagger UI's options: FastAPI's defaults, and no badge asking an online validator
SWAGGER_PARAMETERS: Final = {"validatorUrl": None}
#: the browser may load nothing from another host: ReDoc's side menu shows its maker's logo
#: from theirs, which this blocks (the image then hides itself)
DOCS_POLICY: Final = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)

router = APIRouter(include_in_schema=False)


def _offline_page(
    request: Request, render: Callable[..., HTMLResponse], **assets: Any
) -> HTMLResponse:
    """``render``'s page over the application's OpenAPI document with the package's
    ``assets``, under :data:`DOCS_POLICY`."""
    page = render(
        openapi_url=request.app.openapi_url or "/openapi.json",
        title=f"{request.app.title} API",
        **assets,
    )
    page.headers["Content-Security-Policy"] = DOCS_POLICY
    return page


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over ``/openapi.json``, from the package's files."""
    return _offline_page(
        request,
        get_swagger_ui_html,
        swagger_js_url=f"{VENDOR}/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url=f"{VENDOR}/swagger-ui/swagger-ui.css",
        swagger_favicon_url=FAVICON,
        swagger_ui_parameters=SWAGGER_PARAMETERS,
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    """ReDoc over ``/openapi.json``, from the package's files, with the system's fonts."""
    return _offline_page(
        request,
        get_redoc_html,
        redoc_js_url=f"{VENDOR}/redoc/redoc.standalone.js",
        redoc_favicon_url=FAVICON,
        with_google_fonts=False,
    )
