"""Round trips to PostgreSQL of one prediction batch: each costs the server and the worker
about as much CPU as a few hundred rows, so the usual batch (every id new, its partitions
known, its model cached) sends the fewest that keep the contract. Counted on the wire, from
libpq's trace of every connection of the API's engine: one round trip per simple query,
per ``Sync`` (a statement, or a pipeline of them) and per end of ``COPY`` data."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from psycopg import pq
from sqlalchemy import Engine, event, func, select

from calmon.api.app import create_app
from calmon.db.models import Model, Prediction, WindowChange
from calmon.services.ingest_arrow import ARROW_MEDIA_TYPE
from calmon.settings import Settings
from tests.integration.api.helpers import create_model, post_labels
from tests.support.databases import empty_postgres

#: frontend messages that wait for the server's answer
_ROUND_TRIP_ENDS = frozenset({"Query", "Sync", "CopyDone"})


class WireTrace:
    """libpq's trace of every connection ``engine`` opens, one file each in ``folder``."""

    def __init__(self, engine: Engine, folder: Path) -> None:
        self.folder = folder
        self._files: list[IO[str]] = []
        event.listen(engine, "connect", self._trace)

    def _trace(self, dbapi_connection: Any, _record: Any) -> None:
        file = (self.folder / f"connection-{len(self._files)}.trace").open("w")
        self._files.append(file)
        dbapi_connection.pgconn.trace(file.fileno())
        dbapi_connection.pgconn.set_trace_flags(
            pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE
        )

    def mark(self) -> list[int]:
        """Where each connection's trace ends now."""
        for file in self._files:
            file.flush()
        return [Path(file.name).stat().st_size for file in self._files]

    def batch_since(self, marks: list[int]) -> list[str]:
        """The frontend messages that wait for an answer, with their statement where they
        carry one, sent since ``marks`` on the one connection that staged a batch (others
        of the process, such as the metrics' reads, may have run meanwhile)."""
        sent = []
        for index, file in enumerate(self._files):
            file.flush()
            with Path(file.name).open() as trace:
                trace.seek(marks[index] if index < len(marks) else 0)
                lines = trace.read().splitlines()
            ends = []
            for line in lines:
                direction, _length, kind, *rest = [*line.split("\t"), "", "", ""]
                if direction == "F" and kind in _ROUND_TRIP_ENDS:
                    ends.append(f"{kind} {' '.join(rest).strip()}".strip())
            if any("calmon_prediction_stage" in end for end in ends):
                sent.append(ends)
        assert len(sent) == 1, sent
        return sent[0]

    def close(self) -> None:
        for file in self._files:
            file.close()


@pytest.fixture
def api(shared_postgres_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, WireTrace]]:
    empty_postgres(shared_postgres_url)
    app = create_app(Settings(database_url=shared_postgres_url, retention_days=0))
    trace = WireTrace(app.state.engine, tmp_path)
    with TestClient(app) as client:
        yield client, trace
    trace.close()


def _stream(prefix: str, n: int = 1000, *, start: datetime | None = None) -> bytes:
    """An Arrow stream of ``n`` predictions with new ids, a label on some, over a few
    hours of one day."""
    first = start or datetime.now(UTC).replace(hour=1, minute=0, second=0, microsecond=0)
    table = pa.table(
        {
            "id": pa.array([f"{prefix}-{i}" for i in range(n)], pa.utf8()),
            "timestamp": pa.array(
                [first + timedelta(seconds=7 * i) for i in range(n)], pa.timestamp("us", "UTC")
            ),
            "score": pa.array([(i % 10) / 10 for i in range(n)], pa.float64()),
            "label": pa.array([i % 2 if i % 3 else None for i in range(n)], pa.int8()),
            "segment": pa.array(["country=FR"] * n, pa.utf8()).dictionary_encode(),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _send(client: TestClient, body: bytes) -> dict[str, Any]:
    response = client.post(
        "/v1/models/fraud/predictions", content=body, headers={"content-type": ARROW_MEDIA_TYPE}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_new_batch_takes_seven_round_trips(api: tuple[TestClient, WireTrace]) -> None:
    client, trace = api
    create_model(client, "fraud")
    assert _send(client, _stream("warm"))["new"] == 1000
    marks = trace.mark()
    assert _send(client, _stream("next")) == {
        "new": 1000,
        "duplicates": 0,
        "pending_labels_applied": 0,
    }
    sent = trace.batch_since(marks)
    # the pooled connection's ping; BEGIN; in one pipeline the model's row locked FOR SHARE
    # (its copy checked), its advisory lock, the stage emptied and a savepoint; the COPY (its
    # statement, then its rows); the insert with its change record and the pending-label
    # check; COMMIT. Before: 13 (the model read alone, each lock and savepoint alone, the
    # pending-label check and the change record each a statement of their own)
    assert len(sent) == 7, sent
    kinds = [end.split()[0] for end in sent]
    assert kinds == ["Query", "Sync", "Sync", "Query", "CopyDone", "Sync", "Query"]
    assert sent[-1] == 'Query "COMMIT"'


def test_a_repeated_batch_still_stores_nothing_twice(api: tuple[TestClient, WireTrace]) -> None:
    client, _trace = api
    create_model(client, "fraud")
    body = _stream("again")
    assert _send(client, body)["new"] == 1000
    assert _send(client, body) == {"new": 0, "duplicates": 1000, "pending_labels_applied": 0}
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(Prediction)) == 1000


def test_the_one_statement_insert_records_windows_and_finds_pending_labels(
    api: tuple[TestClient, WireTrace],
) -> None:
    client, _trace = api
    create_model(client, "fraud", window="1h")
    first = datetime(2026, 3, 2, 1, tzinfo=UTC)
    answer = post_labels(client, [{"id": "late-3", "label": 1}, {"id": "late-6", "label": 0}])
    assert answer.json()["pending"] == ["late-3", "late-6"]
    assert _send(client, _stream("late", 10, start=first))["pending_labels_applied"] == 2
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        labels = dict(
            session.execute(
                select(Prediction.client_id, Prediction.label).where(
                    Prediction.client_id.in_(["late-3", "late-6"])
                )
            ).all()
        )
        assert labels == {"late-3": 1, "late-6": 0}
        model_id = session.scalars(select(Model.id).where(Model.name == "fraud")).one()
        starts = session.scalars(
            select(WindowChange.starts_at).where(WindowChange.model_id == model_id)
        ).all()
        assert sorted(starts) == [first]
