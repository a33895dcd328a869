"""A real calmon API for the client's tests: the app on uvicorn in a thread of the test process,
on a migrated SQLite file, with what is stored read back from that file."""

from __future__ import annotations

import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from bench.harness.processes import free_port, wait_for
from calmon.api.app import create_app
from calmon.settings import Settings
from tests.support.databases import upgraded
from tests.support.servers import server_started

MODEL = "fraud"


@dataclass
class Server:
    """A running API: its URL, its database file, and a way to stop it."""

    url: str
    database: Path
    server: uvicorn.Server
    thread: threading.Thread

    def stored(self) -> dict[str, tuple[float, int | None]]:
        """Score and label stored for each id of :data:`MODEL`."""
        with sqlite3.connect(self.database) as conn:
            rows = conn.execute(
                "SELECT p.client_id, p.score, p.label FROM predictions p"
                " JOIN models m ON m.id = p.model_id WHERE m.name = ?",
                (MODEL,),
            ).fetchall()
        return {str(client_id): (float(score), label) for client_id, score, label in rows}

    def count(self) -> int:
        with sqlite3.connect(self.database) as conn:
            row = conn.execute("SELECT count(*) FROM predictions").fetchone()
        return int(row[0])

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


ServerFactory = Callable[..., Server]


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
