"""The failed-login limit counts the peer, not what a header claims, unless the peer is a proxy
that ``CALMON_FORWARDED_ALLOW_IPS`` trusts. Real uvicorn servers (the options `calmon api` and
`calmon serve` run with) on a migrated SQLite file."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from calmon.api.app import create_app
from calmon.api.server import server_options
from calmon.settings import Settings
from harness.processes import wait_for
from tests.support.databases import upgraded
from tests.support.servers import server_started

TOKENS = "read-token-0123456789:read"
GUESSES = 15


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start the API with ``server_options`` of the given settings; its base URL."""
    url = upgraded(f"sqlite:///{tmp_path / 'calmon.db'}")
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(forwarded_allow_ips: str = "") -> str:
        settings = Settings(
            database_url=url, api_tokens=TOKENS, forwarded_allow_ips=forwarded_allow_ips
        )
        options = {**server_options(settings), "lifespan": "on", "ws": "none"}
        server = uvicorn.Server(uvicorn.Config(create_app(settings), **options))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        wait_for("the server to start", lambda: server_started(server, thread), timeout=10)
        servers.append((server, thread))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


def _wrong_guesses(base: str) -> list[int]:
    """Statuses of wrong logins, each claiming another client address."""
    codes = []
    with httpx.Client(base_url=base) as client:
        for i in range(GUESSES):
            response = client.post(
                "/ui/login",
                data={"token": f"wrong-guess-{i:04d}-0123456789", "next": "/ui"},
                headers={"Origin": base, "X-Forwarded-For": f"203.0.113.{i + 1}"},
                follow_redirects=False,
            )
            codes.append(response.status_code)
    return codes


def test_a_rotating_forwarded_for_from_loopback_is_not_believed(
    serve: Callable[..., str],
) -> None:
    codes = _wrong_guesses(serve())
    # the burst of 10, then the peer (127.0.0.1) is limited whatever the header says
    assert codes[:10] == [401] * 10
    assert codes[10:] == [429] * (GUESSES - 10)


def test_a_trusted_proxy_names_the_client(serve: Callable[..., str]) -> None:
    codes = _wrong_guesses(serve(forwarded_allow_ips="127.0.0.1"))
    # each forwarded address is a client of its own, with its own burst
    assert codes == [401] * GUESSES
