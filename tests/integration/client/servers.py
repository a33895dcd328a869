"""The API the client's tests send to: a running server and what is stored in its SQLite
file, read back from that file."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvicorn

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
