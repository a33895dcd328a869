"""Headers every answer carries: ``X-Content-Type-Options: nosniff`` on JSON, errors (routed
and answered before routing), pages, static files and ``/metrics``; a Content-Security-Policy
on every answer, and on the HTML pages one that runs no inline script (``/docs`` and
``/redoc`` included, whose start-up script is a static file)."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.testclient import TestClient

from calmon.api.server import HEAD_TOO_LARGE, MALFORMED, REQUEST_TIMEOUT
from tests.support.clients import ClientFactory

#: a script element without a ``src``: inline code
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)


def _directives(policy: str) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    for part in policy.split(";"):
        name, *values = part.split()
        parsed[name] = values
    return parsed


def _assert_strict_page_policy(response: httpx.Response) -> None:
    assert response.headers["content-type"].startswith("text/html")
    policy = _directives(response.headers["content-security-policy"])
    assert policy["default-src"] in (["'self'"], ["'none'"])
    scripts = policy.get("script-src", policy["default-src"])
    assert "'unsafe-inline'" not in scripts
    assert "'unsafe-eval'" not in scripts
    assert policy["frame-ancestors"] == ["'none'"]
    assert INLINE_SCRIPT.findall(response.text) == []


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", "/v1/models", {}),
        ("GET", "/healthz", {}),
        ("GET", "/openapi.json", {}),
        ("GET", "/metrics", {}),
        ("GET", "/ui", {}),
        ("GET", "/ui/models/nobody", {}),
        ("GET", "/ui/static/favicon.svg", {}),
        ("GET", "/ui/static/vendor/swagger-ui/swagger-ui.css", {}),
        ("GET", "/ui/static/docs/swagger-init.js", {}),
        ("GET", "/docs", {}),
        ("GET", "/redoc", {}),
        ("GET", "/nowhere", {}),
        ("GET", "/v1/models/Bad Name", {}),
        ("POST", "/v1/models/m/predictions", {"content": b"{", "headers": {"Content-Type": "x"}}),
        ("POST", "/v1/models/m/predictions", {"headers": {"Content-Length": "999999999"}}),
        ("DELETE", "/ui", {}),
    ],
)
def test_every_answer_says_nosniff(
    sqlite_client: TestClient, method: str, path: str, kwargs: dict[str, object]
) -> None:
    response = sqlite_client.request(method, path, **kwargs)  # type: ignore[arg-type]
    assert response.headers["x-content-type-options"] == "nosniff", (response.status_code, path)
    assert response.headers["content-security-policy"]
    if response.headers["content-type"].startswith("application/json"):
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


def test_static_files_have_their_types(sqlite_client: TestClient) -> None:
    script = sqlite_client.get("/ui/static/docs/swagger-init.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert "SwaggerUIBundle" in script.text
    icon = sqlite_client.get("/ui/static/favicon.svg")
    assert icon.headers["content-type"].startswith("image/svg+xml")
    # an SVG opened on its own is a document: it runs nothing either
    assert "default-src 'none'" in icon.headers["content-security-policy"]


@pytest.mark.parametrize("path", ["/ui", "/ui/models/nobody", "/docs", "/redoc"])
def test_pages_run_no_inline_script(sqlite_client: TestClient, path: str) -> None:
    _assert_strict_page_policy(sqlite_client.get(path))


def test_the_login_page_runs_no_inline_script(make_client: ClientFactory) -> None:
    client = make_client(api_tokens="read-token-0123456789:read")
    denied = client.get("/ui")
    assert denied.status_code == 401
    assert denied.headers["x-content-type-options"] == "nosniff"
    _assert_strict_page_policy(denied)
    _assert_strict_page_policy(client.get("/ui/login"))


def test_the_docs_load_their_start_up_script_from_the_package(sqlite_client: TestClient) -> None:
    docs = sqlite_client.get("/docs").text
    assert '<script src="/ui/static/docs/swagger-init.js"></script>' in docs
    assert 'data-openapi-url="/openapi.json"' in docs
    redoc = sqlite_client.get("/redoc").text
    assert '<redoc spec-url="/openapi.json"></redoc>' in redoc
    for page in (docs, redoc):
        for asset in re.findall(r'(?:src|href)="([^"]+)"', page):
            assert asset.startswith("/"), asset
            assert sqlite_client.get(asset).status_code == 200, asset


def test_answers_written_before_the_application_say_nosniff() -> None:
    """The 400, 408 and 431 the server writes to the socket itself (``calmon.api.server``;
    ``tests/e2e/test_slow_clients.py`` provokes them)."""
    for answer in (MALFORMED, REQUEST_TIMEOUT, HEAD_TOO_LARGE):
        head = answer.split(b"\r\n\r\n")[0].lower().split(b"\r\n")
        assert b"x-content-type-options: nosniff" in head, head
