"""The web view's routes on both backends: pages from windows a real scheduler computed, the
segment, window and ``last`` choices, and the tokens rule (bearer header, login cookie, the
API refusing the cookie). SQLite and PostgreSQL. The browser side is in
``tests/e2e/test_web_view.py``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from urllib.parse import unquote_plus

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import event

from calmon.api.routes.ui import COOKIE
from calmon.scheduler.runner import WindowScheduler
from tests.integration.scheduler.helpers import (
    SettledClock,
    create_model,
    iso,
    make_batch,
    send,
)
from tests.support.clients import ClientFactory

READ = "read-token-0123456789"
WRITE = "write-token-0123456789"
ADMIN = "admin-token-0123456789"
TOKENS = f"{READ}:read,{WRITE}:write,{ADMIN}:admin"


def _three_windows(
    clock: SettledClock, client: TestClient, scheduler: WindowScheduler
) -> list[str]:
    """Model ``fraud`` with three computed 5-minute windows (segments a and b); their starts."""
    create_model(client, "fraud", window="5m", grace="0s")
    batch = make_batch(
        prefix="fraud",
        start=clock.recent(4),
        count=3 * 100,
        spacing=timedelta(seconds=3),
        seed=21,
        segments=["b", "a", None],
        unlabelled=0.1,
    )
    send(client, "fraud", batch)
    assert scheduler.tick().computed == 3
    page = client.get("/v1/models/fraud/windows", params={"segment": "*"}).json()
    return [record["start"] for record in page["windows"]]


def _verdict_rows(html: str) -> list[str]:
    """The window starts of the verdict table, in its order (newest first): each row's link
    to its window (the cell shows the start in minutes, UTC)."""
    table = html[html.index('<table id="verdicts"') :]
    return [
        unquote_plus(start)
        for start in re.findall(
            r'<tr(?: class="selected")?><td class="text"><a href="[^"]*window=([^"&]+)">', table
        )
    ]


def test_pages_from_computed_windows(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    starts = _three_windows(clock, client, scheduler)
    root = client.get("/", follow_redirects=False)
    assert (root.status_code, root.headers["location"]) == (307, "/ui")
    index = client.get("/ui")
    assert index.status_code == 200
    assert index.headers["content-type"].startswith("text/html")
    assert "script-src" not in index.headers["content-security-policy"]
    assert "default-src 'none'" in index.headers["content-security-policy"]
    assert '<a href="/ui/models/fraud">fraud</a>' in index.text
    assert f"{starts[-1][:10]} {starts[-1][11:16]}</td>" in index.text  # 2026-11-26 00:40
    assert "log out" not in index.text  # no token, nothing to log out of

    page = client.get("/ui/models/fraud")
    assert page.status_code == 200
    assert _verdict_rows(page.text) == starts[::-1]
    for chart in ("ap", "split", "ratio", "metric", "reliability"):
        assert f'id="{chart}"' in page.text
    assert '<option value="a">a</option>' in page.text
    assert f"Window {starts[-1]}" in page.text

    chosen = client.get("/ui/models/fraud", params={"segment": "a", "window": starts[0]})
    assert _verdict_rows(chosen.text) == starts[::-1]
    assert f"Window {starts[0]}" in chosen.text
    assert '<option value="a" selected>a</option>' in chosen.text
    assert _verdict_rows(client.get("/ui/models/fraud", params={"last": 2}).text) == starts[:0:-1]
    # an unknown second metric falls back to the default
    fallback = client.get("/ui/models/fraud", params={"metric": "x"}).text
    assert "<h2>ROC AUC (0.5 random, 1 best)</h2>" in fallback

    assert client.get("/ui/models/nobody").status_code == 404
    assert client.get("/ui/models/fraud", params={"segment": "a b"}).status_code == 422


def test_a_model_without_windows(client: TestClient) -> None:
    create_model(client, "empty", window="1h")
    assert "no window computed yet" in client.get("/ui").text
    assert "No window of segment" in client.get("/ui/models/empty").text


def test_tokens_rule(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    denied = client.get("/ui/models/fraud?segment=*")
    assert denied.status_code == 401
    assert denied.headers["www-authenticate"] == 'Bearer realm="calmon"'
    assert 'name="next" value="/ui/models/fraud?segment=*"' in denied.text
    assert client.get("/ui", headers={"Authorization": f"Bearer {READ}"}).status_code == 200
    admin = client.get("/ui", headers={"Authorization": f"Bearer {ADMIN}"})
    assert admin.status_code == 200
    assert '<form class="logout" method="post" action="/ui/logout">' in admin.text
    assert client.get("/ui", headers={"Authorization": f"Bearer {WRITE}"}).status_code == 401

    def login(token: str, target: str = "/ui") -> httpx.Response:
        response: httpx.Response = client.post(
            "/ui/login",
            content=f"token={token}&next={target}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            follow_redirects=False,
        )
        return response

    assert login("a&b=1&c=2&d=3&e=4&f=5").status_code == 401  # more fields than the form
    wrong = login("nope-nope-nope-nope")
    assert wrong.status_code == 401
    assert "unknown token" in wrong.text
    assert "lacks the read scope" in login(WRITE).text
    # never sent to another host after logging in
    assert login(READ, "//elsewhere.example/ui").headers["location"] == "/ui"
    good = login(READ, "/ui/models/x")
    assert good.status_code == 303
    assert good.headers["location"] == "/ui/models/x"
    cookie = good.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert READ not in cookie  # a session id (tests/integration/api/test_web_login.py)
    for attribute in ("HttpOnly", "Path=/ui", "SameSite=strict"):
        assert attribute.lower() in cookie.lower()
    assert "secure" not in cookie.lower()  # plain http here

    session_id = good.cookies[COOKIE]
    client.cookies.clear()
    jar = {"Cookie": f"{COOKIE}={session_id}"}
    assert client.get("/ui", headers=jar).status_code == 200
    assert client.get("/v1/models", headers=jar).status_code == 401
    out = client.post("/ui/logout", headers=jar, follow_redirects=False)
    assert out.headers["location"] == "/ui/login"
    assert "Max-Age=0" in out.headers["set-cookie"] or "expires" in out.headers["set-cookie"]
    ended = client.get("/ui", headers=jar)
    assert ended.status_code == 401
    assert "your session has ended" in ended.text
    assert client.get("/ui/login").status_code == 200


def test_open_without_tokens(client: TestClient) -> None:
    assert client.get("/ui").status_code == 200
    login = client.get("/ui/login", follow_redirects=False)
    assert (login.status_code, login.headers["location"]) == (303, "/ui")


def test_the_cookie_is_secure_over_https(make_client: ClientFactory) -> None:
    client = make_client(api_tokens=TOKENS)
    client.base_url = httpx.URL("https://testserver")
    response = client.post(
        "/ui/login",
        content=f"token={READ}&next=/ui",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert "; secure" in response.headers["set-cookie"].lower()


def test_a_quiet_segment_reads_only_its_last_windows(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    create_model(client, "fraud", window="5m", grace="0s")
    for ago in (12, 11, 10):
        batch = make_batch(
            prefix=f"q{ago}",
            start=clock.recent(ago),
            count=40,
            spacing=timedelta(seconds=5),
            seed=ago,
            segments=["quiet"],
        )
        send(client, "fraud", batch)
    recent_batch = make_batch(
        prefix="now", start=clock.recent(2), count=40, spacing=timedelta(seconds=5), seed=2
    )
    send(client, "fraud", recent_batch)
    assert scheduler.tick().computed == 4
    # the segment's latest window is too old for it to be exported: the page has no start
    # to bound its history by
    assert '<option value="quiet">' not in client.get("/ui/models/fraud").text
    engine = client.app.state.engine  # type: ignore[attr-defined]
    reads: list[list[Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_args: Any) -> None:
        values = list(parameters.values() if isinstance(parameters, dict) else parameters)
        if "window_results" in statement and "quiet" in values:
            reads.append(values)

    event.listen(engine, "before_cursor_execute", record)
    try:
        page = client.get("/ui/models/fraud", params={"segment": "quiet", "last": 2})
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert page.status_code == 200
    assert _verdict_rows(page.text) == [iso(clock.recent(10)), iso(clock.recent(11))]
    # one read of the segment's records, limited to the two it shows
    [values] = reads
    assert 2 in values
    assert all(not isinstance(value, int) or value <= 2 for value in values)
