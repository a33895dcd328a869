"""A TCP proxy on 127.0.0.1 that a test can cut, to take a real database away and bring it back.

Modes: ``up`` forwards to the target; ``refuse`` closes every connection and refuses new ones
(a stopped server); ``blackhole`` closes every connection and accepts new ones without ever
answering (an unreachable host); ``freeze`` keeps every connection open but holds all data
back, and accepts new ones without answering (a paused server, whose kernel still
acknowledges TCP), until the mode returns to ``up``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Literal

Mode = Literal["up", "refuse", "blackhole", "freeze"]


class TcpProxy:
    """Forward ``127.0.0.1:port`` to ``target``; switch with :meth:`set_mode`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode: Mode = "up"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def set_mode(self, mode: Mode) -> None:
        """Switch mode; leaving ``up`` cuts every open connection."""
        with self._lock:
            self.mode = mode
            if mode in ("refuse", "blackhole"):
                for sock in self._sockets:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
                self._sockets.clear()

    def close(self) -> None:
        """Stop accepting and cut everything."""
        self._closed = True
        self.set_mode("refuse")
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                mode = self.mode
                if mode == "refuse":
                    client.close()
                    continue
                self._sockets.append(client)
                if mode in ("blackhole", "freeze"):
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                while self.mode == "freeze":
                    time.sleep(0.02)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
