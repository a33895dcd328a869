"""Servers in a thread of the test process: uvicorn's start, and a throwaway HTTP server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn


def server_started(server: uvicorn.Server, thread: threading.Thread) -> bool:
    """Whether the uvicorn ``server`` that ``thread`` runs has started (for :func:`wait_for`);
    an AssertionError once the thread has ended without starting it."""
    assert server.started or thread.is_alive(), "the server did not start"
    return bool(server.started)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (pytest shows what the test asserts instead)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served on a free port of 127.0.0.1 in a thread; yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
