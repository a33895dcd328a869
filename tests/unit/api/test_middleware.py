"""RequestContextMiddleware: the body limit counts bytes without keeping the body."""

from __future__ import annotations

import asyncio
import tracemalloc

from starlette.types import Message, Receive, Scope, Send

from calmon.api.middleware import RequestContextMiddleware, remember_body

CHUNK = 64 * 1024
CHUNKS = 128  # an 8 MiB body


async def _discarding_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Read the whole body a chunk at a time, keep none of it, and reject the request."""
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 422, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def _serve(app: RequestContextMiddleware, scope: Scope) -> tuple[int, int]:
    """Stream an 8 MiB body through ``app``; return (status, peak bytes allocated meanwhile)."""
    sent = 0
    statuses: list[int] = []

    async def receive() -> Message:
        nonlocal sent
        sent += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": sent < CHUNKS}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    tracemalloc.start()
    try:
        asyncio.run(app(scope, receive, send))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return statuses[0], peak


def _scope() -> Scope:
    return {
        "type": "http",
        "method": "POST",
        "path": "/v1/models/m/predictions",
        "headers": [(b"content-type", b"application/json")],
    }


def test_streamed_body_is_counted_not_kept() -> None:
    """Before the body was kept chunk by chunk (and joined) only to count a rejection: the
    peak was over 8 MiB. Now it stays a few chunks whatever the body's length."""
    app = RequestContextMiddleware(_discarding_app, max_body_bytes=CHUNK * CHUNKS)
    status, peak = _serve(app, _scope())
    assert status == 422
    assert peak < 16 * CHUNK


def test_remember_body_keeps_a_reference_not_a_copy() -> None:
    scope = _scope()
    body = b'{"predictions": [1, 2, 3]}'
    remember_body(scope, body)
    assert [v for v in scope.values() if v is body] == [body]
