"""The HTTP server layer: uvicorn's h11 protocol with bounds on what a client may hold open.

So that a client cannot tie up a worker with a request it never finishes, every connection of
``calmon api`` and ``calmon serve`` bounds the size of the head (``CALMON_MAX_HEADER_BYTES``:
431, read no further than that plus one socket read), the time to the end of the head
(``CALMON_HEADER_TIMEOUT``: 408) and the time to the end of the body (``CALMON_BODY_TIMEOUT``:
408 unless a response has started; the application sees the client leave, 499); each closes
the connection. The answers are in ``docs/reference/api.md`` ("Errors"). h11 rather than httptools,
uvicorn's default parser, because httptools does not bound the size of a head.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from typing import Any, Final, Literal

import h11
import orjson
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from calmon.settings import Settings, get_settings

Phase = Literal["headers", "body"]


def raw_error(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 error answer that closes the connection, with the JSON error body every
    answer of the API has; written straight to the socket when there is no request to answer
    through the application (a head too large, malformed or too slow)."""
    body = orjson.dumps({"error": {"code": code, "message": message, "details": []}})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        "x-content-type-options: nosniff\r\n"
        f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


REQUEST_TIMEOUT: Final = raw_error(
    408, "Request Timeout", "request_timeout", "the request was not sent in time"
)
HEAD_TOO_LARGE: Final = raw_error(
    431,
    "Request Header Fields Too Large",
    "headers_too_large",
    "the request line and headers are over CALMON_MAX_HEADER_BYTES",
)
MALFORMED: Final = raw_error(400, "Bad Request", "bad_request", "malformed HTTP request")


@functools.cache
def _read_bounds() -> dict[Phase, float]:
    """Seconds each phase of a request may take, read once per process (worker processes
    read the same environment as the parent)."""
    settings = get_settings()
    return {"headers": settings.header_timeout, "body": settings.body_timeout}


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request head or body is not sent in
    time. The one timer of a connection follows the phase of the current request: armed when
    the client starts to owe a head (connection made, response sent) or a body (head
    received), cancelled when it owes nothing (request complete)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: Phase | None = None
        self._read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the head's clock."""
        super().connection_made(transport)
        self._follow_phase()

    def data_received(self, data: bytes) -> None:
        """Parse, then move the clock to the phase the request is now in."""
        super().data_received(data)
        self._follow_phase()

    def on_response_complete(self) -> None:
        """The next request's head is owed from now on."""
        super().on_response_complete()
        self._follow_phase()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the clock."""
        self._set_phase(None)
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """Answer a head h11 cannot parse, and close: 431 when it outgrew the size bound,
        else 400 (uvicorn answers both with a plain-text 400)."""
        buffered, _ = self.conn.trailing_data
        limit = self.config.h11_max_incomplete_event_size
        too_large = limit is not None and len(buffered) > limit
        self.transport.write(HEAD_TOO_LARGE if too_large else MALFORMED)
        self.transport.close()

    def _follow_phase(self) -> None:
        if self.transport.is_closing():
            self._set_phase(None)
            return
        state = self.conn.their_state
        self._set_phase(
            "headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        )

    def _set_phase(self, phase: Phase | None) -> None:
        if phase == self._phase:
            return
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        self._phase = phase
        if phase is not None:
            self._read_timer = self.loop.call_later(_read_bounds()[phase], self._read_timeout)

    def _read_timeout(self) -> None:
        """The client did not send the head or body in time: answer 408 unless this request
        was answered already (the application may answer before reading the body), and
        close."""
        self._read_timer = None
        if self.transport.is_closing():
            return
        answered = self._phase == "body" and self.cycle is not None and self.cycle.response_started
        if not answered:
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()


def server_options(settings: Settings) -> dict[str, Any]:
    """The uvicorn options both `calmon api` and `calmon serve` run with. Forwarded headers
    are read only from the proxies ``CALMON_FORWARDED_ALLOW_IPS`` names: uvicorn's own default
    trusts 127.0.0.1, which let any local tunnel (ssh -L, kubectl port-forward, a TCP proxy)
    pass a client address of its choosing to the failed-login limit."""
    return {
        "proxy_headers": bool(settings.forwarded_allow_ips),
        "forwarded_allow_ips": settings.forwarded_allow_ips or "",
        "http": BoundedH11Protocol,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "timeout_keep_alive": settings.keep_alive_timeout,
        "log_config": None,
        "access_log": False,
        "server_header": False,
        "timeout_graceful_shutdown": 10,
    }


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server that says, once it listens, where to open the web view: the one line
    a newcomer needs among the start-up logs."""

    def __init__(self, config: uvicorn.Config, *, address: str) -> None:
        super().__init__(config)
        self.address = address

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start as uvicorn does, then log the web view's and the API docs' addresses."""
        await super().startup(sockets=sockets)
        if self.started:
            logging.getLogger("calmon.serve").info(
                f"open {self.address}/ui for the web view, {self.address}/docs for the API",
                extra={"url": f"{self.address}/ui"},
            )
