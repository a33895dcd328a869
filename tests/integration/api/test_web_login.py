"""The web view's login on both backends: server-side sessions (the cookie holds a random id,
never the token; the database only its hash), logout that revokes a copied cookie, sessions
that expire and never outlive or outgrow their token, login CSRF refused, failed guesses rate
limited per client address, and tokens outside Latin-1 working in the form and the bearer
header alike. SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from calmon.api.routes.ui import COOKIE
from tests.integration.api.helpers import error_of
from tests.support.clients import ClientFactory

READ = "read-token-0123456789"
WRITE = "write-token-0123456789"
ADMIN = "admin-token-0123456789"
#: outside Latin-1 ("€") and outside ASCII ("ü"), as ``parse_tokens`` accepts it
UNICODE = "grüße-€-token-0123456789"
TOKENS = f"{READ}:read,{WRITE}:write,{ADMIN}:admin,{UNICODE}:read"
SAME_ORIGIN = {"Origin": "http://testserver"}


def login(client: TestClient, token: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST the login form as a browser on the server's own page would."""
    response: httpx.Response = client.post(
        "/ui/login",
        data={"token": token, "next": "/ui"},
        headers={**SAME_ORIGIN, **(headers or {})},
        follow_redirects=False,
    )
    return response


def session_cookie(response: httpx.Response) -> str:
    """The value of the session cookie a login answer sets."""
    cookie = httpx.Cookies()
    cookie.extract_cookies(response)
    value = cookie.get(COOKIE)
    assert value, response.headers.get("set-cookie")
    return value


def opens_ui(client: TestClient, value: str) -> int:
    """The status of ``/ui`` with only the session cookie ``value``."""
    client.cookies.clear()
    status: int = client.get("/ui", headers={"Cookie": f"{COOKIE}={value}"}).status_code
    return status


def stored_sessions(client: TestClient) -> list[Any]:
    """Every stored web session."""
    from calmon.db.models import WebSession

    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        return list(session.scalars(select(WebSession)).all())


def test_a_token_outside_latin1_logs_in_and_works_as_bearer(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    response = login(client, UNICODE)
    assert response.status_code == 303, response.text
    assert opens_ui(client, session_cookie(response)) == 200
    # curl and browsers send header bytes as they are: UTF-8 here
    bearer = {"Authorization": f"Bearer {UNICODE}".encode()}
    assert client.get("/ui", headers=bearer).status_code == 200
    assert client.get("/v1/models", headers=bearer).status_code == 200
    wrong = {"Authorization": f"Bearer {UNICODE[:-1]}x".encode()}
    assert client.get("/v1/models", headers=wrong).status_code == 401


def test_the_cookie_holds_a_session_id_never_the_token(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    response = login(client, READ)
    assert response.status_code == 303
    set_cookie = response.headers["set-cookie"]
    assert READ not in set_cookie
    value = session_cookie(response)
    assert len(value) >= 43  # 32 random bytes, URL-safe base64
    for attribute in ("HttpOnly", "Path=/ui", "SameSite=strict", "Max-Age=43200"):
        assert attribute.lower() in set_cookie.lower()
    (stored,) = stored_sessions(client)
    assert stored.id_hash == hashlib.sha256(value.encode()).hexdigest()
    assert value not in {stored.id_hash, stored.token_key}
    assert READ not in stored.token_key
    assert stored.scopes == "read"
    assert stored.expires_at - stored.created_at == timedelta(hours=12)
    assert opens_ui(client, value) == 200
    assert opens_ui(client, READ) == 401  # the token itself is no cookie
    assert client.get("/v1/models", headers={"Cookie": f"{COOKIE}={value}"}).status_code == 401


def test_logout_revokes_a_copied_cookie(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    value = session_cookie(login(client, READ))
    other = session_cookie(login(client, READ))
    assert opens_ui(client, value) == 200
    client.cookies.clear()
    out = client.post(
        "/ui/logout",
        headers={**SAME_ORIGIN, "Cookie": f"{COOKIE}={value}"},
        follow_redirects=False,
    )
    assert (out.status_code, out.headers["location"]) == (303, "/ui/login")
    assert "max-age=0" in out.headers["set-cookie"].lower()
    assert opens_ui(client, value) == 401
    assert opens_ui(client, other) == 200  # another login's session lives on
    assert len(stored_sessions(client)) == 1


def test_logout_over_get_is_refused(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    value = session_cookie(login(client, READ))
    client.cookies.clear()
    out = client.get("/ui/logout", headers={"Cookie": f"{COOKIE}={value}"})
    assert out.status_code == 405
    assert error_of(out)["code"] == "method_not_allowed"
    assert opens_ui(client, value) == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://testserver.evil.example"},
        {"Origin": "http://testserver:8080"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_cross_site_login_and_logout_are_refused(
    make_client: ClientFactory, headers: dict[str, str]
) -> None:
    client = make_client(api_tokens=TOKENS)
    value = session_cookie(login(client, READ))
    client.cookies.clear()
    refused = client.post(
        "/ui/login",
        data={"token": READ, "next": "/ui"},
        headers=headers,
        follow_redirects=False,
    )
    assert refused.status_code == 403
    assert error_of(refused)["code"] == "cross_site_request"
    assert "set-cookie" not in refused.headers
    assert len(stored_sessions(client)) == 1
    out = client.post(
        "/ui/logout", headers={**headers, "Cookie": f"{COOKIE}={value}"}, follow_redirects=False
    )
    assert out.status_code == 403
    assert "set-cookie" not in out.headers
    assert opens_ui(client, value) == 200


def test_same_origin_requests_pass(make_client: ClientFactory) -> None:
    """A browser on the page sends its own origin, or only ``Sec-Fetch-Site``; a client that is
    no browser sends neither."""
    client = make_client(api_tokens=TOKENS)
    assert login(client, READ).status_code == 303
    assert login(client, READ, {"Sec-Fetch-Site": "same-origin"}).status_code == 303
    plain = client.post(
        "/ui/login", data={"token": READ, "next": "/ui"}, follow_redirects=False
    ).status_code
    assert plain == 303


def test_the_eleventh_wrong_guess_in_a_minute_is_429(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    statuses = [login(client, f"wrong-guess-{i:04d}-0123456789").status_code for i in range(10)]
    assert statuses == [401] * 10
    limited = login(client, "wrong-guess-9999-0123456789")
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["retry-after"]) <= 12
    assert "too many failed logins" in limited.text
    # the good token too: the answer says nothing about a guess once the address is limited
    assert login(client, READ).status_code == 429
    assert stored_sessions(client) == []
    # the pages' bearer header is not the login form's business
    assert client.get("/ui", headers={"Authorization": f"Bearer {READ}"}).status_code == 200


def test_good_logins_are_not_limited(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    assert [login(client, READ).status_code for _ in range(15)] == [303] * 15


def test_an_admin_token_gets_a_read_session(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    value = session_cookie(login(client, ADMIN))
    assert [s.scopes for s in stored_sessions(client)] == ["read"]
    assert opens_ui(client, value) == 200
    jar = {"Cookie": f"{COOKIE}={value}"}
    assert client.put("/v1/models/m", json={}, headers=jar).status_code == 401


def test_a_session_expires(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS, ui_session_ttl=60)
    response = login(client, READ)
    assert "max-age=60" in response.headers["set-cookie"].lower()
    value = session_cookie(response)
    assert opens_ui(client, value) == 200
    from calmon.db.models import WebSession

    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        session.execute(update(WebSession).values(expires_at=datetime.now(UTC)))
        session.commit()
    assert opens_ui(client, value) == 401
    # expired sessions are deleted by the next login
    session_cookie(login(client, READ))
    assert len(stored_sessions(client)) == 1


def test_a_session_never_outlives_its_token(make_client: ClientFactory) -> None:
    """Another server on the same database (another worker, or after a restart) without the
    token, or with it stripped of ``read``, refuses the token's sessions."""
    client = make_client(api_tokens=TOKENS)
    value = session_cookie(login(client, READ))
    assert opens_ui(make_client(api_tokens=TOKENS), value) == 200
    assert opens_ui(make_client(api_tokens=f"{ADMIN}:admin"), value) == 401
    assert opens_ui(make_client(api_tokens=f"{READ}:write"), value) == 401


def test_a_removed_token_configured_again_does_not_revive_its_sessions(
    make_client: ClientFactory,
) -> None:
    value = session_cookie(login(make_client(api_tokens=TOKENS), READ))
    make_client(api_tokens=f"{ADMIN}:admin")  # a restart without the token forgets its sessions
    again = make_client(api_tokens=TOKENS)
    assert opens_ui(again, value) == 401
    assert stored_sessions(again) == []


def test_sessions_per_token_are_bounded_the_oldest_ending(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS, ui_max_sessions=3)
    values = [session_cookie(login(client, READ)) for _ in range(5)]
    other = session_cookie(login(client, ADMIN))
    assert len(stored_sessions(client)) == 4  # three of READ's, one of ADMIN's
    assert [opens_ui(client, value) for value in values] == [401, 401, 200, 200, 200]
    assert opens_ui(client, other) == 200


def test_the_retention_run_deletes_expired_sessions(make_client: ClientFactory) -> None:
    from calmon.services.retention import run_retention

    client = make_client(api_tokens=TOKENS, ui_session_ttl=60)
    session_cookie(login(client, READ))
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    run_retention(factory, now=datetime.now(UTC), retention_days=0)
    assert len(stored_sessions(client)) == 1
    run_retention(factory, now=datetime.now(UTC) + timedelta(seconds=61), retention_days=0)
    assert stored_sessions(client) == []


def test_pages_check_the_read_scope_first_as_the_api_does(make_client: ClientFactory) -> None:
    """Pages and API routes share the scopes and their order: without the ``read`` scope a
    request learns nothing, not even that its query is invalid (API: 401 or 403 before 422;
    pages: the login form), and a token with the scope gets the query's error."""
    client = make_client(api_tokens=TOKENS)
    bad_page = "/ui/models/absent?last=0"
    bad_api = "/v1/models/absent/windows?limit=0"
    for headers, api_status in (({}, 401), ({"Authorization": f"Bearer {WRITE}"}, 403)):
        page = client.get(bad_page, headers=headers)
        assert page.status_code == 401
        assert 'name="token"' in page.text
        assert client.get(bad_api, headers=headers).status_code == api_status
    reader = {"Authorization": f"Bearer {READ}"}
    assert client.get(bad_page, headers=reader).status_code == 422
    assert client.get(bad_api, headers=reader).status_code == 422
    session = session_cookie(login(client, ADMIN))
    client.cookies.clear()
    page = client.get(bad_page, headers={"Cookie": f"{COOKIE}={session}"})
    assert page.status_code == 422
