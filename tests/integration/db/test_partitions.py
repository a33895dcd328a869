"""PostgreSQL day partitions: made ahead and on demand (also by two writers at once), ids
unique across days through the registry, labels found in any day, whole days expired."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, Engine, event, func, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from calmon.db import migrate, partitions
from calmon.db.models import Model, Prediction, prediction_keys
from calmon.db.partitions import (
    AHEAD_DAYS,
    DayState,
    attached_days,
    day_tables,
    detach_expired_days,
    ensure_days,
    ensure_partitions,
    expire_partitions,
    expired_tables,
    forget,
    partition_name,
)
from calmon.db.session import create_db_engine, create_session_factory
from calmon.services.errors import ConflictError
from calmon.services.ingest import ingest_labels, ingest_predictions
from calmon.services.ingest_schemas import PredictionRow
from calmon.services.model_registry import ModelConfig, put_model
from calmon.services.retention import run_retention
from calmon.services.windows.planning import fingerprint, scan_model
from calmon.services.windows.rows import load_rows
from calmon.settings import Settings
from harness.processes import wait_for

NOW = datetime(2026, 3, 10, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def engine(postgres_database: str) -> Iterator[Engine]:
    engine = create_db_engine(Settings(database_url=postgres_database))
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return create_session_factory(engine)


def _model(sessions: sessionmaker[Session], name: str = "m") -> Model:
    with sessions() as session:
        model, _ = put_model(session, name=name, config=ModelConfig(), now=NOW, max_models=10)
        session.commit()
        return model


def _days(engine: Engine) -> set[date]:
    with engine.connect() as conn:
        return attached_days(conn)


def _rows(prefix: str, moment: datetime, n: int) -> list[PredictionRow]:
    return [(f"{prefix}-{k}", moment + timedelta(seconds=k), 0.25, None, None) for k in range(n)]


def test_scheduler_upkeep_makes_today_and_the_next_days(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    later = NOW + timedelta(days=400)
    with sessions() as session:
        made = ensure_partitions(session, now=later)
        session.commit()
    first = later.date()
    wanted = {first + timedelta(days=k) for k in range(AHEAD_DAYS + 1)}
    assert set(made) == wanted
    assert wanted <= _days(engine)
    with sessions() as session:
        forget(session.connection())
        assert ensure_partitions(session, now=later) == []


def test_two_writers_make_a_new_day_together(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """Both miss the day in their cache; one makes it, the other waits and finds it; ids
    both send are stored once."""
    model = _model(sessions)
    day = datetime(2024, 2, 29, 6, tzinfo=UTC)
    assert day.date() not in _days(engine)
    barrier = threading.Barrier(2)
    results: list[int] = []
    errors: list[BaseException] = []

    def write(first: int) -> None:
        rows = [
            (f"id-{k}", day + timedelta(seconds=k), 0.5, None, None)
            for k in range(first, first + 600)
        ]
        try:
            with sessions() as session:
                forget(session.connection())
                barrier.wait(timeout=10)
                result = ingest_predictions(session, model=model, rows=rows, now=NOW)
                session.commit()
                results.append(result.new)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(first,)) for first in (0, 300)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sum(results) == 900
    assert day.date() in _days(engine)
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Prediction)) == 900
        assert session.scalar(select(func.count()).select_from(prediction_keys)) == 900


def test_an_id_is_unique_across_days_and_labels_find_any_day(
    sessions: sessionmaker[Session],
) -> None:
    model = _model(sessions)
    first = datetime(2025, 1, 1, 1, tzinfo=UTC)
    with sessions() as session:
        ingest_predictions(session, model=model, rows=[("x", first, 0.5, None, None)], now=NOW)
        session.commit()
    with sessions() as session:
        other_day = [("x", first + timedelta(days=30), 0.5, None, None)]
        with pytest.raises(ConflictError) as caught:
            ingest_predictions(session, model=model, rows=other_day, now=NOW)
        assert caught.value.details == [{"id": "x"}]
        session.rollback()
    with sessions() as session:
        again = ingest_predictions(
            session, model=model, rows=[("x", first, 0.5, None, None)], now=NOW
        )
        assert (again.new, again.duplicates) == (0, 1)
        labelled = ingest_labels(session, model=model, labels=[{"id": "x", "label": 1}], now=NOW)
        session.commit()
    assert (labelled.updated, labelled.pending) == (1, [])
    with sessions() as session:
        assert session.scalar(select(Prediction.label).where(Prediction.client_id == "x")) == 1


def test_a_pending_label_reaches_a_back_filled_day(sessions: sessionmaker[Session]) -> None:
    model = _model(sessions)
    old = datetime(2023, 7, 4, tzinfo=UTC)
    with sessions() as session:
        ingest_labels(session, model=model, labels=[{"id": "late", "label": 0}], now=NOW)
        session.commit()
    with sessions() as session:
        result = ingest_predictions(
            session, model=model, rows=[("late", old, 0.5, None, None)], now=NOW
        )
        session.commit()
    assert result.pending_labels_applied == 1
    with sessions() as session:
        assert session.scalar(select(Prediction.label).where(Prediction.client_id == "late")) == 0


def test_a_rolled_back_day_is_made_again(engine: Engine, sessions: sessionmaker[Session]) -> None:
    """The process remembers a day it made in a batch that then rolled back; the next batch
    of that day finds it missing and makes it."""
    model = _model(sessions)
    day = datetime(2022, 5, 5, tzinfo=UTC)
    with sessions() as session:
        ingest_predictions(session, model=model, rows=_rows("a", day, 3), now=NOW)
        session.rollback()
    assert day.date() not in _days(engine)
    with sessions() as session:
        result = ingest_predictions(session, model=model, rows=_rows("b", day, 3), now=NOW)
        session.commit()
    assert result.new == 3
    assert day.date() in _days(engine)


def _fill_day(engine: Engine, model_id: int, day: date, n: int) -> None:
    """``n`` predictions of one day, written in bulk (registry too)."""
    with engine.begin() as conn:
        ensure_days(conn, [day])
        conn.execute(
            text(
                "WITH k AS (INSERT INTO prediction_keys SELECT :m, 'bulk-' || g,"
                " CAST(:day AS timestamptz) + g * interval '1 ms' FROM generate_series(1, :n) g)"
                " INSERT INTO predictions SELECT :m, 'bulk-' || g,"
                " CAST(:day AS timestamptz) + g * interval '1 ms', 0.5, NULL, NULL, now(),"
                " NULL, now() FROM generate_series(1, :n) g"
            ),
            {"m": model_id, "day": day.isoformat() + "T00:00:00Z", "n": n},
        )


def test_an_expired_day_goes_with_one_drop_whatever_its_rows(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    model = _model(sessions)
    old = date(2026, 1, 2)
    with sessions() as session:
        ingest_predictions(
            session, model=model, rows=_rows("kept", NOW - timedelta(days=1), 5), now=NOW
        )
        ingest_predictions(
            session, model=model, rows=_rows("old", datetime(2026, 1, 2, tzinfo=UTC), 1), now=NOW
        )
        session.commit()
    _fill_day(engine, model.id, old, 40_000)
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        result = run_retention(sessions, now=NOW, retention_days=30)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert result.predictions == 40_001
    assert old not in _days(engine)
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(prediction_keys)) == 5
        assert session.scalar(select(func.count()).select_from(Prediction)) == 5
        assert expired_tables(session) == []
        # the expired id is free again
        again = ingest_predictions(
            session, model=model, rows=_rows("old", datetime(2026, 1, 2, tzinfo=UTC), 1), now=NOW
        )
        assert again.new == 1
        session.rollback()
    expired = "expired_" + partition_name(old)
    drops = [s for s in statements if s.lstrip().upper().startswith("DROP")]
    assert drops == [f'DROP TABLE "{expired}"']
    deletes = [s for s in statements if s.lstrip().upper().startswith("DELETE")]
    # the rows themselves are never deleted, only their ids, a few batches of pages
    assert all(s.startswith("DELETE FROM prediction_keys") for s in deletes if expired in s)
    assert not [s for s in deletes if "FROM predictions" in s]
    assert 1 <= len([s for s in deletes if expired in s]) <= 2
    with engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT to_regclass(:name)"), {"name": "expired_" + partition_name(old)}
            ).scalar_one()
            is None
        )


def test_an_interrupted_expiry_is_finished_by_the_next_run(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    model = _model(sessions)
    old = date(2026, 1, 3)
    _fill_day(engine, model.id, old, 2_000)
    assert detach_expired_days(sessions, before=NOW - timedelta(days=30)) == [
        "expired_" + partition_name(old)
    ]
    with sessions() as session:
        assert expired_tables(session) == ["expired_" + partition_name(old)]
    result = run_retention(sessions, now=NOW, retention_days=30)
    assert result.predictions == 2_000
    with sessions() as session:
        assert expired_tables(session) == []
        assert session.scalar(select(func.count()).select_from(prediction_keys)) == 0


def _relations(plan: Any) -> set[str]:
    """Every relation a JSON plan reads or writes."""
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Relation Name" in plan:
            found.add(str(plan["Relation Name"]))
        for value in plan.values():
            found |= _relations(value)
    elif isinstance(plan, list):
        for item in plan:
            found |= _relations(item)
    return found


class PlanRecorder:
    """Plans (``EXPLAIN``, not run) of the statements an engine executes that name
    ``predictions``, made on the same connection with the same parameters just before each
    runs: the day partitions each one would touch."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.plans: list[tuple[str, set[str]]] = []

    def __enter__(self) -> PlanRecorder:
        event.listen(self.engine, "before_cursor_execute", self._explain)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._explain)

    def _explain(
        self, _conn: object, cursor: Any, statement: str, parameters: Any, *_: object
    ) -> None:
        words = statement.lstrip().split(None, 1)
        if " predictions " not in f" {statement} ".replace("\n", " ") or words[0].upper() not in {
            "SELECT",
            "UPDATE",
            "WITH",
        }:
            return
        with cursor.connection.cursor() as explain:
            explain.execute("EXPLAIN (FORMAT JSON) " + statement, parameters)
            plan = explain.fetchone()[0]
        days = {name for name in _relations(plan) if name.startswith("predictions_")}
        self.plans.append((statement, days))

    def days(self, needle: str) -> list[set[str]]:
        """Partitions touched by each recorded statement that contains ``needle``."""
        return [days for statement, days in self.plans if needle in statement]


def test_reads_and_label_updates_touch_only_their_days(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    model = _model(sessions)
    days = [datetime(2026, 2, d, tzinfo=UTC) for d in (1, 2, 3, 4)]
    with sessions() as session:
        for k, day in enumerate(days):
            rows = [
                (f"d{k}-{j}", day + timedelta(hours=j % 24, minutes=j), 0.5, j % 2, None)
                for j in range(48)
            ]
            ingest_predictions(session, model=model, rows=rows, now=NOW)
        session.commit()
    names = [partition_name(day.date()) for day in days]
    hour = timedelta(hours=1)
    with sessions() as session, PlanRecorder(engine) as plans:
        load_rows(session, model=model, start=days[1] + hour, end=days[1] + 2 * hour)
        load_rows(session, model=model, start=days[2] - hour, end=days[2] + hour, label=1)
        fingerprint(session, model_id=model.id, start=days[3], end=days[3] + hour, since=NOW - hour)
        reads = plans.days("array_send")
        counted = plans.days("count(*) FILTER")
        ingest_labels(session, model=model, labels=[{"id": "d0-3", "label": 1}], now=NOW)
        ingest_labels(
            session,
            model=model,
            labels=[{"id": "d1-3", "label": 0}, {"id": "d2-3", "label": 0}],
            now=NOW,
        )
        updates = plans.days("UPDATE predictions")
        session.rollback()
    assert reads == [{names[1]}, {names[1], names[2]}]
    assert counted[-1] == {names[3]}
    assert updates == [{names[0]}, {names[1], names[2]}]


def test_registry_expiry_stops_at_its_budget_and_the_next_run_goes_on(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """With no time budget each run deletes one batch of pages and records how far it got;
    the runs together delete every id once and then drop the day."""
    model = _model(sessions)
    old = date(2026, 1, 4)
    _fill_day(engine, model.id, old, 3_000)
    removed: list[int] = []
    for _ in range(40):
        removed.append(
            expire_partitions(sessions, before=NOW - timedelta(days=30), pages=4, budget=0.0)
        )
        with sessions() as session:
            if not expired_tables(session):
                break
    assert len(removed) > 3
    assert all(count > 0 for count in removed[:-1])
    assert sum(removed) == 3_000
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(prediction_keys)) == 0
    assert old not in _days(engine)


def test_the_change_scan_reads_the_change_record_and_only_the_days_it_found(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """A first scan, and a second one after a label changed one window: their plans (``EXPLAIN``
    of each query as executed) read the change record, and of ``predictions`` only the day
    partitions of the windows found (their fingerprints), never the other days. The first scan
    deleted the records the second cannot read again (before its start minus the margin)."""
    model = _model(sessions)
    with engine.begin() as conn:
        ensure_days(conn, [date(2026, 1, 1) + timedelta(days=k) for k in range(60)])
    with sessions() as session:
        for k in range(4):
            moment = datetime(2026, 2, 1 + k, tzinfo=UTC)
            ingest_predictions(session, model=model, rows=_rows(f"d{k}", moment, 3), now=NOW)
        session.commit()
    touched: set[str] = set()

    def explain(_conn: object, cursor: Any, statement: str, parameters: Any, *_: object) -> None:
        if statement.lstrip().split(None, 1)[0].upper() not in {"SELECT", "DELETE"}:
            return
        with cursor.connection.cursor() as plan:
            plan.execute("EXPLAIN (FORMAT JSON) " + statement, parameters)
            touched.update(_relations(plan.fetchone()[0]))

    def scan(now: datetime) -> tuple[tuple[int, int], set[str]]:
        touched.clear()
        with sessions() as session:
            stored = session.get_one(Model, model.id)
            event.listen(engine, "before_cursor_execute", explain)
            try:
                found = scan_model(session, model=stored, now=now, margin=timedelta(minutes=1))
            finally:
                event.remove(engine, "before_cursor_execute", explain)
            session.commit()
        return (found.new, found.changed), set(touched)

    tables = {"model_scans", "window_changes", "window_states"}
    first, read = scan(NOW + timedelta(minutes=10))
    assert first == (4, 0)
    assert read - tables == {f"predictions_202602{day:02d}" for day in range(1, 5)}
    with sessions() as session:
        stored = session.get_one(Model, model.id)
        later = NOW + timedelta(minutes=11)
        ingest_labels(session, model=stored, labels=[{"id": "d2-1", "label": 1}], now=later)
        session.commit()
    second, read = scan(NOW + timedelta(minutes=12))
    assert second == (0, 1)
    assert read - tables == {"predictions_20260203"}


def _timed_together(*actions: Callable[[], object]) -> list[float]:
    """Run ``actions`` at once, each in a thread; returns the seconds each one took."""
    taken = [float("inf")] * len(actions)

    def run(k: int) -> None:
        began = time.monotonic()
        actions[k]()
        taken[k] = time.monotonic() - began

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return taken


@pytest.mark.parametrize("window_reads", ["the expired day", "another day"])
def test_a_detach_behind_a_long_window_stalls_neither_ingestion_nor_reads(
    engine: Engine, sessions: sessionmaker[Session], window_reads: str
) -> None:
    """A window computation holds a REPEATABLE READ transaction that has read predictions (of
    the day that expires, or of a day kept) while retention detaches the expired day: ingestion
    of another model (into a known day and into a back-filled day it must make) and a plain
    read answer at once all along; the same run detaches and drops the day once the window's
    transaction ends."""
    model, other = _model(sessions), _model(sessions, "other")
    old = date(2026, 1, 5)
    _fill_day(engine, model.id, old, 1_000)
    kept = NOW - timedelta(days=1)
    with sessions() as session:
        ingest_predictions(session, model=model, rows=_rows("kept", kept, 10), now=NOW)
        ingest_predictions(session, model=other, rows=_rows("warm", NOW - HOUR, 1), now=NOW)
        session.commit()
    read_from = datetime(2026, 1, 5, tzinfo=UTC) if window_reads == "the expired day" else kept
    detaching = threading.Event()

    def watch(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "DETACH PARTITION" in statement:
            detaching.set()

    outcome: list[int | BaseException] = []

    def retention() -> None:
        try:
            outcome.append(expire_partitions(sessions, before=NOW - timedelta(days=30)))
        except BaseException as exc:
            outcome.append(exc)

    def ingest(k: int) -> None:
        with sessions() as session:
            rows = _rows(f"during-{k}", NOW - HOUR + timedelta(minutes=k), 100)
            # a back-filled day this process has not seen: ingestion attaches its partition
            rows += _rows(f"back-{k}", NOW - timedelta(days=10 + k), 1)
            ingest_predictions(session, model=other, rows=rows, now=NOW)
            session.commit()

    def read() -> None:
        with sessions() as session:
            session.scalar(
                select(func.count()).select_from(Prediction).where(Prediction.model_id == other.id)
            )

    event.listen(engine, "before_cursor_execute", watch)
    worker = threading.Thread(target=retention)
    with engine.connect() as window:
        window = window.execution_options(isolation_level="REPEATABLE READ")
        window.begin()
        assert window.execute(
            select(func.count())
            .select_from(Prediction)
            .where(
                Prediction.model_id == model.id,
                Prediction.ts >= read_from,
                Prediction.ts < read_from + timedelta(days=1),
            )
        ).scalar_one() == (1_000 if window_reads == "the expired day" else 10)
        try:
            worker.start()
            assert detaching.wait(timeout=10)
            time.sleep(0.2)
            ingests, reads = [], []
            for k in range(5):
                ingested, was_read = _timed_together(functools.partial(ingest, k), read)
                ingests.append(ingested)
                reads.append(was_read)
                time.sleep(0.1)
            assert max(ingests + reads) < 0.5, {"ingestion": ingests, "read": reads}
            # all of it happened while the detach was still waiting for the window
            assert worker.is_alive()
            assert old in _days(engine)
        finally:
            event.remove(engine, "before_cursor_execute", watch)
            window.rollback()
    worker.join(timeout=60)
    # the same run detached the day once the window ended, deleted its ids and dropped it
    assert outcome == [1_000]
    assert old not in _days(engine)
    with sessions() as session:
        assert expired_tables(session) == []
        assert (
            session.scalar(
                select(func.count())
                .select_from(prediction_keys)
                .where(prediction_keys.c.model_id == model.id)
            )
            == 10
        )
        assert (
            session.scalar(
                select(func.count()).select_from(Prediction).where(Prediction.model_id == other.id)
            )
            == 1 + 5 * 101
        )


def _state(engine: Engine, day: date) -> DayState | None:
    with engine.connect() as conn:
        return day_tables(conn).get(day)


def _window_transaction(engine: Engine, model_id: int) -> Connection:
    """An open REPEATABLE READ transaction that has read predictions, as a window computation
    holds while it evaluates (it writes only at its end)."""
    conn = engine.connect().execution_options(isolation_level="REPEATABLE READ")
    conn.begin()
    conn.execute(
        select(func.count()).select_from(Prediction).where(Prediction.model_id == model_id)
    )
    return conn


def test_a_detach_left_pending_is_finished_by_the_next_run(
    engine: Engine, sessions: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    """A run whose wait ends while a window transaction is still open leaves the day detach
    pending (new queries no longer see it) and says so; the next run finalises it, renames it
    and drops it."""
    model = _model(sessions)
    old = date(2026, 1, 6)
    _fill_day(engine, model.id, old, 500)
    window = _window_transaction(engine, model.id)
    try:
        with caplog.at_level(logging.WARNING, logger="calmon.db.partitions"):
            assert detach_expired_days(sessions, before=NOW - timedelta(days=30), wait=0.5) == []
        assert _state(engine, old) is DayState.DETACH_PENDING
        assert [(r.partition, r.state) for r in caplog.records] == [  # type: ignore[attr-defined]
            (partition_name(old), "detach pending")
        ]
        with sessions() as session:
            assert session.scalar(select(func.count()).select_from(Prediction)) == 0
    finally:
        window.rollback()
        window.close()
    assert expire_partitions(sessions, before=NOW - timedelta(days=30)) == 500
    assert _state(engine, old) is None
    with sessions() as session:
        assert expired_tables(session) == []
        assert session.scalar(select(func.count()).select_from(prediction_keys)) == 0


def test_a_day_detached_but_not_renamed_is_finished_by_the_next_run(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """A run stopped between the detach (which commits by itself) and the rename leaves a
    table ``predictions_yyyymmdd`` of its own; the next run renames it and drops it."""
    model = _model(sessions)
    old = date(2026, 1, 7)
    _fill_day(engine, model.id, old, 300)
    with engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE predictions DETACH PARTITION {partition_name(old)}"))
    assert _state(engine, old) is DayState.DETACHED
    assert run_retention(sessions, now=NOW, retention_days=30).predictions == 300
    assert _state(engine, old) is None
    with sessions() as session:
        assert expired_tables(session) == []


def _xmin(engine: Engine, pid: int | None = None) -> int:
    """The oldest transaction id the snapshot of backend ``pid`` holds back (a new snapshot's
    when None)."""
    with engine.connect() as conn:
        if pid is None:
            query = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
            return int(conn.execute(query).scalar_one())
        query = text("SELECT backend_xmin::text::bigint FROM pg_stat_activity WHERE pid = :pid")
        return int(conn.execute(query, {"pid": pid}).scalar_one())


def test_windows_computed_back_to_back_do_not_put_the_detach_off(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """A window transaction is open when the detach starts; a second one starts before the
    first ends (once the writes under way when the detach took its snapshot are over). The
    detach finishes once the first ends, while the second still runs: a ``FINALIZE`` with a
    new snapshot at each attempt would wait for the second too, and for every window that
    starts while it waits."""
    model = _model(sessions)
    other = _model(sessions, "other")
    old = date(2026, 1, 8)
    _fill_day(engine, model.id, old, 200)
    finalizing: list[int] = []

    def watch(_conn: object, cursor: Any, statement: str, *_: object) -> None:
        if "FINALIZE" in statement and not finalizing:
            finalizing.append(cursor.connection.info.backend_pid)

    outcome: list[list[str] | BaseException] = []

    def detach() -> None:
        try:
            outcome.append(detach_expired_days(sessions, before=NOW - timedelta(days=30), wait=30))
        except BaseException as exc:
            outcome.append(exc)

    first = _window_transaction(engine, model.id)
    second: Connection | None = None
    event.listen(engine, "before_cursor_execute", watch)
    worker = threading.Thread(target=detach)
    try:
        worker.start()
        wait_for("a FINALIZE attempt", lambda: finalizing, timeout=10, interval=0.01)
        snapshot = _xmin(engine, finalizing[0])
        # other work commits, and the next window starts while the first still runs
        with sessions() as session:
            ingest_predictions(session, model=other, rows=_rows("x", NOW - HOUR, 5), now=NOW)
            session.commit()
        wait_for(
            "the writes older than the detach's snapshot",
            lambda: _xmin(engine) > snapshot,
            timeout=20,
        )
        second = _window_transaction(engine, model.id)
        time.sleep(0.2)  # the measured thing: a while into the second, the detach still waits
        assert _state(engine, old) is DayState.DETACH_PENDING
        first.rollback()
        worker.join(timeout=25)
        assert not worker.is_alive()
        assert outcome == [["expired_" + partition_name(old)]]
        assert _state(engine, old) is None
    finally:
        event.remove(engine, "before_cursor_execute", watch)
        first.rollback()
        first.close()
        if second is not None:
            second.rollback()
            second.close()
        worker.join(timeout=60)


def _failing_detach(monkeypatch: pytest.MonkeyPatch, error: type[psycopg.Error]) -> list[str]:
    """Make every ``DETACH`` statement of retention fail with ``error``; the statements tried."""
    real = partitions._driver_execute
    tried: list[str] = []

    def execute(session: Session, statement: Any, params: Any = None) -> int:
        text_ = repr(statement)
        if "DETACH" in text_:
            tried.append(text_)
            raise OperationalError("ALTER TABLE … DETACH", None, error("failed"))
        return real(session, statement, params)

    monkeypatch.setattr(partitions, "_driver_execute", execute)
    return tried


def test_a_detach_waiting_for_a_lock_is_left_to_the_next_run(
    engine: Engine,
    sessions: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = _model(sessions)
    old = date(2026, 1, 4)
    _fill_day(engine, model.id, old, 10)
    tried = _failing_detach(monkeypatch, psycopg.errors.LockNotAvailable)
    with caplog.at_level(logging.DEBUG, logger="calmon.db.partitions"):
        assert detach_expired_days(sessions, before=NOW - timedelta(days=30), wait=0.3) == []
    assert len(tried) > 1  # tried again within the run
    contended = [
        r for r in caplog.records if r.getMessage() == "partition detach contended; tried again"
    ]
    assert contended
    assert all(r.levelno == logging.DEBUG for r in contended)
    assert _state(engine, old) is DayState.ATTACHED


def test_a_detach_failing_otherwise_stops_retention_loudly(
    engine: Engine,
    sessions: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = _model(sessions)
    old = date(2026, 1, 4)
    _fill_day(engine, model.id, old, 10)
    tried = _failing_detach(monkeypatch, psycopg.errors.AdminShutdown)
    with (
        caplog.at_level(logging.DEBUG, logger="calmon.db.partitions"),
        pytest.raises(OperationalError),
    ):
        run_retention(sessions, now=NOW, retention_days=30)
    assert len(tried) == 1  # not tried again: an outage is no lock to wait for
    [failed] = [r for r in caplog.records if r.getMessage() == "partition detach failed"]
    assert failed.levelno == logging.WARNING
    assert failed.__dict__["partition"] == partition_name(old)
    assert failed.__dict__["sqlstate"] == "57P01"
