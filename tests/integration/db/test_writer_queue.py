"""SQLite writers of one process take the write lock in turn, first come, first served
(``WriterQueue``): a writer that waits is not overtaken by one that asked later, however
quickly that one begins again, and a turn not granted within the busy timeout is SQLite's
"database is locked"."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from calmon.db.session import (
    WriterQueue,
    create_db_engine,
    create_session_factory,
    writer_queue,
)
from calmon.db.sqlstate import is_sqlite_busy
from calmon.settings import Settings
from tests.support import wait_for


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """An engine on a new SQLite file holding one table ``log (who)``."""
    path = tmp_path / "queue.db"
    engine = create_db_engine(Settings(database_url=f"sqlite:///{path}", sqlite_busy_timeout=10.0))
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE log (who TEXT)"))
    yield engine
    engine.dispose()


def _write(engine: Engine, who: str) -> None:
    with create_session_factory(engine)() as session:
        session.execute(text("INSERT INTO log VALUES (:who)"), {"who": who})
        session.commit()


def _waiting(queue: WriterQueue, count: int) -> Callable[[], bool]:
    return lambda: queue.waiting == count


def _log(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(connection.execute(text("SELECT who FROM log ORDER BY rowid")).scalars())


def test_writers_waiting_for_the_lock_get_it_in_the_order_they_asked(engine: Engine) -> None:
    queue = writer_queue(engine.url.database)
    assert queue is not None
    holder = create_session_factory(engine)()
    holder.execute(text("INSERT INTO log VALUES ('holder')"))
    threads = []
    for who in ["first", "second", "third"]:
        thread = threading.Thread(target=_write, args=(engine, who))
        thread.start()
        threads.append(thread)
        wait_for(f"{who} to wait", _waiting(queue, len(threads)), timeout=10)
    holder.commit()
    holder.close()
    for thread in threads:
        thread.join()
    assert _log(engine) == ["holder", "first", "second", "third"]


def test_a_writer_beginning_again_at_once_does_not_keep_a_waiting_one_out(
    engine: Engine, tmp_path: Path
) -> None:
    patient = create_db_engine(
        Settings(database_url=f"sqlite:///{tmp_path / 'queue.db'}", sqlite_busy_timeout=1.0)
    )
    stop = threading.Event()
    errors: list[BaseException] = []

    def greedy() -> None:
        # back-to-back transactions, each holding the lock for 20 ms
        while not stop.is_set():
            with create_session_factory(engine)() as session:
                session.execute(text("INSERT INTO log VALUES ('greedy')"))
                time.sleep(0.02)
                session.commit()

    thread = threading.Thread(target=greedy)
    thread.start()
    try:
        time.sleep(0.1)
        for _ in range(5):
            try:
                _write(patient, "patient")
            except OperationalError as exc:
                errors.append(exc)
    finally:
        stop.set()
        thread.join()
        patient.dispose()
    assert not errors, [type(e).__name__ for e in errors]
    assert _log(engine).count("patient") == 5


def test_a_turn_not_granted_within_the_busy_timeout_is_database_is_locked(
    tmp_path: Path, engine: Engine
) -> None:
    impatient = create_db_engine(
        Settings(database_url=f"sqlite:///{tmp_path / 'queue.db'}", sqlite_busy_timeout=0.3)
    )
    holder = create_session_factory(engine)()
    holder.execute(text("INSERT INTO log VALUES ('holder')"))
    try:
        started = time.monotonic()
        with pytest.raises(OperationalError) as raised:
            _write(impatient, "late")
        assert time.monotonic() - started >= 0.3
        assert is_sqlite_busy(raised.value)
    finally:
        holder.rollback()
        holder.close()
        impatient.dispose()
    # the queue moves on: the next writer gets its turn
    _write(engine, "after")
    assert _log(engine) == ["after"]
