"""Bearer tokens and scopes: 401 without or with an unknown token, 403 without the scope."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from calmon.log import JsonFormatter
from calmon.settings import ConfigError, Settings, get_settings, parse_tokens
from tests.integration.api.helpers import error_of, prediction
from tests.support.clients import ClientFactory

READ = "read-token-0123456789"
WRITE = "write-token-0123456789"
ADMIN = "admin-token-0123456789"
READ_WRITE = "rw-token-0123456789+/="


@pytest.fixture
def secured(make_client: ClientFactory) -> TestClient:
    return make_client(
        api_tokens=f"{READ}:read, {WRITE}:write,{ADMIN}:admin,{READ_WRITE}:read+write"
    )


def _auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _put(client: TestClient, token: str | None) -> int:
    headers = _auth(token) if token else {}
    status: int = client.put("/v1/models/m1", json={}, headers=headers).status_code
    return status


def test_missing_or_unknown_token_is_401(secured: TestClient) -> None:
    for headers in ({}, {"authorization": "Basic abc"}, _auth("nope-nope-nope-nope"), _auth("")):
        response = secured.get("/v1/models", headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert error_of(response)["code"] == "unauthorized"


def test_scopes(secured: TestClient) -> None:
    assert _put(secured, READ) == 403
    assert _put(secured, WRITE) == 403
    assert _put(secured, ADMIN) == 201
    for token in (READ, ADMIN, READ_WRITE):
        assert secured.get("/v1/models/m1", headers=_auth(token)).status_code == 200
    denied = secured.get("/v1/models/m1", headers=_auth(WRITE))
    assert denied.status_code == 403
    assert error_of(denied)["code"] == "forbidden"
    assert error_of(denied)["message"] == (
        "this token lacks the 'read' scope; the server's CALMON_API_TOKENS gives a token its"
        " scopes (TOKEN:read, or TOKEN:admin for every scope)"
    )
    body = {"predictions": [prediction("a")]}
    url = "/v1/models/m1/predictions"
    assert secured.post(url, json=body, headers=_auth(READ)).status_code == 403
    assert secured.post(url, json=body, headers=_auth(WRITE)).json()["new"] == 1
    assert secured.post(url, json=body, headers=_auth(ADMIN)).json()["duplicates"] == 1
    labels = {"labels": [{"id": "a", "label": 1}]}
    assert secured.post("/v1/models/m1/labels", json=labels, headers=_auth(READ)).status_code == 403
    assert (
        secured.post("/v1/models/m1/labels", json=labels, headers=_auth(READ_WRITE)).json()[
            "updated"
        ]
        == 1
    )


def test_auth_is_checked_before_the_body(secured: TestClient) -> None:
    response = secured.post(
        "/v1/models/m1/predictions", content=b"not json", headers={"content-type": "text/plain"}
    )
    assert response.status_code == 401


def test_probes_and_metrics_need_no_token(secured: TestClient) -> None:
    assert secured.get("/healthz").status_code == 200
    assert secured.get("/readyz").status_code == 200
    assert secured.get("/metrics").status_code == 200


def test_tokens_never_reach_the_logs(secured: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secured.get("/v1/models", headers=_auth(ADMIN))
    secured.get("/v1/models", headers=_auth(ADMIN + "x"))
    formatter = JsonFormatter()
    text = "\n".join(formatter.format(record) for record in caplog.records)
    assert "/v1/models" in text
    assert ADMIN not in text


def test_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text(f"# operators\n{ADMIN}:admin\n\n{READ}:read\n", encoding="utf-8")
    monkeypatch.setenv("CALMON_API_TOKENS_FILE", str(token_file))
    monkeypatch.setenv("CALMON_API_TOKENS", f"{WRITE}:write")
    assert get_settings().tokens == {
        WRITE: frozenset({"write"}),
        ADMIN: frozenset({"admin"}),
        READ: frozenset({"read"}),
    }


@pytest.mark.parametrize(
    "text",
    [
        "short:read",
        f"{READ}",
        f"{READ}:",
        f"{READ}:root",
        f"{READ}:read,{READ}:write",
        "has space in it 0123:read",
        "control-\x01-character-0123:read",
        "no-break\u00a0space-0123456789:read",
    ],
)
def test_bad_token_configuration_is_refused_without_echoing_it(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="CALMON_API_TOKENS"):
        parse_tokens(text, source="CALMON_API_TOKENS")
    monkeypatch.setenv("CALMON_API_TOKENS", text)
    with pytest.raises(ConfigError) as caught:
        get_settings()
    assert READ not in str(caught.value)
    assert "short" not in str(caught.value)


def test_settings_repr_hides_tokens() -> None:
    assert READ not in repr(Settings(api_tokens=f"{READ}:read"))
