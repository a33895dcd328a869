"""A real calmon API for the client's tests: the app on uvicorn in a thread of the test process,
on a migrated SQLite file (:class:`~tests.integration.client.servers.Server`)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from calmon.api.app import create_app
from calmon.settings import Settings
from harness.processes import free_port, wait_for
from tests.integration.client.servers import MODEL as MODEL
from tests.integration.client.servers import Server as Server
from tests.integration.client.servers import ServerFactory as ServerFactory
from tests.support.databases import upgraded
from tests.support.servers import server_started


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start the API on a migrated SQLite file (``port``: a given one, e.g. one a client
    already tries; other keyword arguments are settings), with a ``probability`` model
    :data:`MODEL`; every server is stopped after the test."""
    database = tmp_path / "calmon.db"
    url = upgraded(f"sqlite:///{database}")
    started: list[Server] = []

    def factory(*, port: int | None = None, **overrides: Any) -> Server:
        app = create_app(Settings(database_url=url, **overrides))
        server = uvicorn.Server(
            uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", ws="none")
        )
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port or 0))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        wait_for(
            "the server to start", lambda: server_started(server, thread), timeout=10, interval=0.01
        )
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        running = Server(url=base, database=database, server=server, thread=thread)
        started.append(running)
        token = overrides.get("api_tokens", "").split(":")[0]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = httpx.put(
            f"{base}/v1/models/{MODEL}",
            json={"score_kind": "probability", "window": "1h"},
            headers=headers,
        )
        assert response.status_code in (200, 201), response.text
        return running

    yield factory
    for server in started:
        server.stop()


@pytest.fixture
def server(start_server: ServerFactory) -> Server:
    """The API with default settings."""
    return start_server()


@pytest.fixture
def unused_url() -> str:
    """A local URL nothing listens on (connections are refused)."""
    return f"http://127.0.0.1:{free_port()}"
