"""An HTTP/1.1 TCP proxy that cuts connections at random points, on both sides of the server's
commit.

Each accepted connection gets a fate, drawn from a seeded generator:

- ``pass``: forwarded whole, both ways;
- ``request``: only a random prefix of the request reaches the server (anywhere from nothing
  to all but its last byte), then both sides are closed: the server never has the whole
  request, so it must not store anything of it;
- ``response``: the whole request reaches the server, and when its answer starts to come back
  (so the work is done and committed), a random prefix of the answer's first chunk reaches the
  client (possibly nothing) and both sides are closed: the client never learns the outcome.

One request per connection: clients open a new connection for each attempt.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from collections import Counter
from typing import Final, Literal

Fate = Literal["pass", "request", "response"]
FATES: Final[tuple[Fate, ...]] = ("pass", "request", "response")
_HEADER_END: Final = b"\r\n\r\n"


class CuttingProxy:
    """Forward ``127.0.0.1:port`` to ``127.0.0.1:target_port``, cutting with the given odds."""

    def __init__(self, target_port: int, *, seed: int, weights: tuple[float, float, float]) -> None:
        self.target_port = target_port
        self.counts: Counter[Fate] = Counter()
        self._random = random.Random(seed)
        self._weights = weights
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def close(self) -> None:
        """Stop accepting."""
        self._listener.close()

    def _draw(self) -> tuple[Fate, float]:
        with self._lock:
            fate = self._random.choices(FATES, self._weights)[0]
            self.counts[fate] += 1
            return fate, self._random.random()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            fate, position = self._draw()
            threading.Thread(target=self._serve, args=(client, fate, position), daemon=True).start()

    def _serve(self, client: socket.socket, fate: Fate, position: float) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=30)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        if fate == "request":
            self._cut_request(client, upstream, position)
            return
        back = threading.Thread(
            target=self._answer, args=(upstream, client, fate, position), daemon=True
        )
        back.start()
        _pump(client, upstream)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)
        back.join()

    def _cut_request(self, client: socket.socket, upstream: socket.socket, position: float) -> None:
        """Forward ``position`` (a fraction) of the request, then close both sides."""
        received = b""
        try:
            while _HEADER_END not in received or len(received) < _request_length(received):
                data = client.recv(65536)
                if not data:
                    break
                received += data
            cut = int(position * min(len(received), _request_length(received)))
            upstream.sendall(received[:cut])
        except OSError:
            pass
        finally:
            _close(upstream, client)

    def _answer(
        self, upstream: socket.socket, client: socket.socket, fate: Fate, position: float
    ) -> None:
        """Forward the answer; for ``response``, only a prefix of its first chunk."""
        try:
            while data := upstream.recv(65536):
                if fate == "response":
                    client.sendall(data[: int(position * len(data))])
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(upstream, client)


def _request_length(received: bytes) -> int:
    """Length of the request whose start is ``received`` (headers and Content-Length)."""
    head, found, _ = received.partition(_HEADER_END)
    if not found:
        return len(received) + 1
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return len(head) + len(_HEADER_END) + length


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
