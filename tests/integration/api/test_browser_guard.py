"""What another site's page cannot make a browser do to calmon: state-changing requests sent
cross-site are refused with tokens or without, a form reaches no body-less POST, and a
server without tokens answers only its own names (DNS rebinding). Nothing refused is stored.
SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from calmon.api.browser_guard import host_name, parse_allowed_hosts
from tests.integration.api.helpers import error_of
from tests.integration.scheduler.helpers import create_model
from tests.support.clients import ClientFactory

RECOMPUTE = "/v1/models/m/recompute?start=2026-01-01T00:00:00Z&end=2026-01-02T00:00:00Z"
CROSS_SITE = [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
]


@pytest.mark.parametrize("headers", CROSS_SITE)
def test_a_cross_site_write_is_refused_and_stores_nothing(
    client: TestClient, headers: dict[str, str]
) -> None:
    create_model(client, "m")
    refused = client.post(RECOMPUTE, headers=headers)
    assert refused.status_code == 403
    assert error_of(refused)["code"] == "cross_site_request"
    put = client.put("/v1/models/other", json={"window": "1h"}, headers=headers)
    assert put.status_code == 403
    assert client.get("/v1/models/other").status_code == 404
    # the same request from the server's own page, or from no browser, passes
    assert client.post(RECOMPUTE, headers={"Origin": "http://testserver"}).status_code == 202
    assert client.post(RECOMPUTE).status_code == 202


def test_a_cross_site_write_is_refused_with_tokens_too(make_client: ClientFactory) -> None:
    admin = "admin-token-0123456789"
    client = make_client(api_tokens=f"{admin}:admin")
    bearer = {"Authorization": f"Bearer {admin}"}
    assert client.put("/v1/models/m", json={}, headers=bearer).status_code == 201
    refused = client.post(RECOMPUTE, headers={**bearer, "Origin": "http://evil.example"})
    assert refused.status_code == 403


@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"]
)
def test_a_form_reaches_no_body_less_post(client: TestClient, content_type: str) -> None:
    create_model(client, "m")
    refused = client.post(RECOMPUTE, headers={"Content-Type": content_type})
    assert refused.status_code == 415
    assert error_of(refused)["code"] == "unsupported_media_type"


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.2", "[::2]:80"])
def test_a_server_without_tokens_refuses_a_foreign_host(client: TestClient, host: str) -> None:
    create_model(client, "m")
    refused = client.get("/v1/models/m", headers={"Host": host})
    assert refused.status_code == 421
    assert error_of(refused)["code"] == "misdirected_request"
    assert client.get("/ui", headers={"Host": host}).status_code == 421


@pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1", "[::1]:8000", "testserver"])
def test_its_own_names_pass(client: TestClient, host: str) -> None:
    create_model(client, "m")
    assert client.get("/v1/models/m", headers={"Host": host}).status_code == 200


def test_allowed_hosts_add_names_and_tokens_lift_the_host_check(
    make_client: ClientFactory,
) -> None:
    named = make_client(allowed_hosts="calmon.internal, monitor.example:8000")
    assert named.get("/healthz", headers={"Host": "calmon.internal:8000"}).status_code == 200
    assert named.get("/healthz", headers={"Host": "monitor.example"}).status_code == 200
    assert named.get("/healthz", headers={"Host": "evil.example"}).status_code == 421
    tokens = make_client(api_tokens="read-token-0123456789:read")
    assert tokens.get("/healthz", headers={"Host": "evil.example"}).status_code == 200


def test_host_names() -> None:
    assert host_name("LocalHost:8000") == "localhost"
    assert host_name("[::1]:8000") == "::1"
    assert host_name("::1") == "::1"
    assert parse_allowed_hosts("a.example,b.example:80 c") == {"a.example", "b.example", "c"}
