"""Builders shared by the scheduler tests: predictions with known arrays, API calls, reads."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from calmon.arrays import FloatArray, Int8Array
from calmon.db.models import Model, WindowResult, WindowState
from calmon.scheduler.runner import WindowScheduler
from calmon.settings import Settings

#: seconds of overlap between scans; commits in these tests take milliseconds
MARGIN = 5.0


@dataclass
class Batch:
    """Predictions as sent, with their arrays for independent expectations."""

    items: list[dict[str, Any]]
    ts: list[datetime]
    scores: FloatArray
    labels: Int8Array
    segments: list[str | None]

    def where(self, start: datetime, end: datetime, segment: str | None = None) -> Batch:
        """The predictions with start <= ts < end (of one segment when given)."""
        keep = [
            i
            for i, moment in enumerate(self.ts)
            if start <= moment < end and (segment is None or self.segments[i] == segment)
        ]
        return Batch(
            items=[self.items[i] for i in keep],
            ts=[self.ts[i] for i in keep],
            scores=self.scores[keep],
            labels=self.labels[keep],
            segments=[self.segments[i] for i in keep],
        )

    def labelled(self) -> tuple[FloatArray, Int8Array]:
        """Scores and labels of the labelled predictions (label -1 = none)."""
        mask = self.labels >= 0
        return self.scores[mask], self.labels[mask]


def make_batch(
    *,
    prefix: str,
    start: datetime,
    count: int,
    spacing: timedelta,
    seed: int,
    prior: float = 0.3,
    shift: float = 1.5,
    segments: list[str | None] | None = None,
    unlabelled: float = 0.0,
) -> Batch:
    """``count`` predictions from ``start`` every ``spacing``: labels with rate ``prior``,
    scores = logistic(N(0, 1) + shift·y - 1), rounded to 3 decimals (ties happen);
    a share ``unlabelled`` sent without a label; segments cycled from ``segments``."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(count) < prior).astype(np.int8)
    scores = np.round(1.0 / (1.0 + np.exp(-(rng.normal(size=count) + shift * labels - 1.0))), 3)
    hidden = rng.random(count) < unlabelled
    labels[hidden] = -1
    names = segments or [None]
    items: list[dict[str, Any]] = []
    ts: list[datetime] = []
    seg: list[str | None] = []
    for i in range(count):
        moment = start + i * spacing
        item: dict[str, Any] = {
            "id": f"{prefix}-{i}",
            "timestamp": moment.isoformat(),
            "score": float(scores[i]),
        }
        if labels[i] >= 0:
            item["label"] = int(labels[i])
        name = names[i % len(names)]
        if name is not None:
            item["segment"] = name
        items.append(item)
        ts.append(moment)
        seg.append(name)
    return Batch(items=items, ts=ts, scores=scores, labels=labels, segments=seg)


def chunks(items: list[dict[str, Any]], size: int = 5000) -> Iterator[list[dict[str, Any]]]:
    """``items`` in request-sized pieces."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def create_model(client: TestClient, name: str, **config: Any) -> None:
    """PUT a model (created)."""
    response = client.put(f"/v1/models/{name}", json=config)
    assert response.status_code == 201, response.text


def send(client: TestClient, model: str, batch: Batch) -> None:
    """POST every prediction of ``batch``."""
    for part in chunks(batch.items):
        response = client.post(f"/v1/models/{model}/predictions", json={"predictions": part})
        assert response.status_code == 200, response.text


def send_labels(client: TestClient, model: str, labels: dict[str, int]) -> None:
    """POST labels for predictions sent earlier."""
    items = [{"id": key, "label": value} for key, value in labels.items()]
    for part in chunks(items):
        response = client.post(f"/v1/models/{model}/labels", json={"labels": part})
        assert response.status_code == 200, response.text


def windows(client: TestClient, model: str, **params: Any) -> list[dict[str, Any]]:
    """Every stored window record of ``model`` through the API (all pages)."""
    records: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = client.get(f"/v1/models/{model}/windows", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        records += body["windows"]
        cursor = body["next_cursor"]
        if cursor is None:
            return records


def by_window(records: list[dict[str, Any]], segment: str = "*") -> dict[str, dict[str, Any]]:
    """Records of one segment keyed by their start."""
    return {r["start"]: r for r in records if r["segment"] == segment}


def iso(moment: datetime) -> str:
    """The API's form of an instant."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


FIVE_MINUTES = timedelta(minutes=5)


@dataclass
class SetClock:
    """A clock that stands still at ``at`` (monotonic seconds: ``seconds``)."""

    at: datetime
    seconds: float = 0.0

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return self.seconds


@dataclass(frozen=True)
class SettledClock:
    """The clock of one test (the ``clock`` fixture, made by :func:`settle`): the machine's
    clock set back by ``behind`` (monotonic time is left alone), given to the test's
    schedulers, and the start of the window open when the test began, which :meth:`recent`
    counts back from."""

    window: datetime
    behind: timedelta = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) - self.behind

    def monotonic(self) -> float:
        return time.monotonic()

    def recent(self, windows_ago: int, length: timedelta = FIVE_MINUTES) -> datetime:
        """Start of the window ``windows_ago`` windows before the one open at :func:`settle`."""
        return self.window - windows_ago * length


def settle(length: timedelta = FIVE_MINUTES, room: float = 40.0) -> SettledClock:
    """A clock that fixes "now" for :meth:`SettledClock.recent` at the start of a test so that
    which windows are open does not change while the test runs: when the next window boundary
    is less than ``room`` seconds away, the clock (that the test's schedulers get) is set back
    so that they see ``room`` seconds left in the window, instead of sleeping past the
    boundary."""
    now = datetime.now(UTC)
    seconds = length.total_seconds()
    left = seconds - now.timestamp() % seconds
    behind = room - left if left < room else 0.0
    return SettledClock(window=floor(now, length), behind=timedelta(seconds=behind))


def floor(moment: datetime, length: timedelta) -> datetime:
    """Start of the epoch-aligned window of ``length`` holding ``moment``."""
    seconds = int(length.total_seconds())
    return datetime.fromtimestamp(int(moment.timestamp()) // seconds * seconds, tz=UTC)


@dataclass
class Env:
    """A migrated database, an API on it, and schedulers to run ticks with, on ``clock``."""

    url: str
    client: TestClient
    settings: Settings
    session_factory: sessionmaker[Session]
    clock: SettledClock
    schedulers: list[WindowScheduler] = field(default_factory=list)

    def scheduler(
        self, *, before_commit: Callable[[], None] | None = None, **overrides: Any
    ) -> WindowScheduler:
        """A scheduler on the database (shut down at the end of the test); ``before_commit``
        runs in each window's transaction after everything is written."""
        settings = self.settings.model_copy(update=overrides) if overrides else self.settings
        scheduler = WindowScheduler(
            settings,
            instance=f"test-{len(self.schedulers)}",
            clock=self.clock,
            before_commit=before_commit,
        )
        self.schedulers.append(scheduler)
        return scheduler

    def model_id(self, name: str) -> int:
        """The database id of the model called ``name``."""
        with self.session_factory() as session:
            found = session.scalar(select(Model.id).where(Model.name == name))
            assert found is not None
            return found

    def states(self, model_id: int) -> dict[datetime, WindowState]:
        """The window states of a model by start."""
        with self.session_factory() as session:
            rows = session.scalars(select(WindowState).where(WindowState.model_id == model_id))
            return {row.starts_at: row for row in rows}

    def _read_session(self) -> Session:
        """A session for reading what the processes under test stored. On SQLite it does not
        take the write lock (the service's sessions begin ``IMMEDIATE``): a test polling for
        results must not queue behind a scheduler that writes window after window."""
        if not self.url.startswith("sqlite"):
            return self.session_factory()
        return Session(create_engine(self.url, poolclass=NullPool))

    def results(self, model_id: int, segment: str = "*") -> dict[datetime, WindowResult]:
        """The stored results of one segment of a model by window start."""
        with self._read_session() as session:
            rows = session.scalars(
                select(WindowResult).where(
                    WindowResult.model_id == model_id, WindowResult.segment == segment
                )
            )
            return {row.starts_at: row for row in rows}
