"""The SQLSTATEs calmon tells apart, read off errors a real PostgreSQL raised through
SQLAlchemy: a deadlock and a serialisation failure are both "aborted for a concurrent
transaction" (run again), a lock wait beyond ``lock_timeout`` is not."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from calmon.db.sqlstate import aborted_for_concurrency, is_lock_timeout

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(postgres_database: str) -> Engine:
    url = postgres_database.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE t (id int PRIMARY KEY, v int)"))
        connection.execute(text("INSERT INTO t VALUES (1, 0), (2, 0)"))
    return engine


def test_a_deadlock_victim_is_aborted_for_concurrency(engine: Engine) -> None:
    both_hold = threading.Barrier(2)
    errors: list[BaseException] = []

    def update(first: int, second: int) -> None:
        try:
            with engine.begin() as connection:
                connection.execute(text("UPDATE t SET v = 1 WHERE id = :id"), {"id": first})
                both_hold.wait()
                connection.execute(text("UPDATE t SET v = 1 WHERE id = :id"), {"id": second})
        except DBAPIError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=update, args=pair) for pair in ((1, 2), (2, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(errors) == 1
    assert aborted_for_concurrency(errors[0])
    assert not is_lock_timeout(errors[0])


def test_a_serialisation_failure_is_aborted_for_concurrency(engine: Engine) -> None:
    with engine.connect() as reader, engine.begin() as writer:
        reader = reader.execution_options(isolation_level="REPEATABLE READ")
        reader.begin()
        reader.execute(text("SELECT v FROM t WHERE id = 1"))
        writer.execute(text("UPDATE t SET v = 2 WHERE id = 1"))
        writer.commit()
        with pytest.raises(DBAPIError) as raised:
            reader.execute(text("UPDATE t SET v = 3 WHERE id = 1"))
    assert aborted_for_concurrency(raised.value)


def test_a_lock_timeout_is_contention_not_a_conflict(engine: Engine) -> None:
    with engine.begin() as holder, engine.connect() as waiter:
        holder.execute(text("SELECT 1 FROM t WHERE id = 1 FOR UPDATE"))
        waiter.execute(text("SET lock_timeout = '50ms'"))
        with pytest.raises(DBAPIError) as raised:
            waiter.execute(text("UPDATE t SET v = 4 WHERE id = 1"))
    assert is_lock_timeout(raised.value)
    assert not aborted_for_concurrency(raised.value)
