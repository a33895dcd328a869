"""The API's transaction runner against real PostgreSQL aborts: a transaction aborted as a
deadlock (40P01) or a serialization failure (40001) is run again; any other error is not."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from calmon.api.errors import ApiError
from calmon.api.transactions import TRANSACTION_ATTEMPTS, in_transaction
from calmon.db.session import create_db_engine, create_session_factory
from calmon.settings import Settings

pytestmark = pytest.mark.parametrize("migrated_url", ["postgresql"], indirect=True)


@pytest.fixture
def session(migrated_url: str) -> Iterator[Session]:
    engine = create_db_engine(Settings(database_url=migrated_url))
    with create_session_factory(engine)() as session:
        session.execute(text("CREATE TABLE IF NOT EXISTS attempt_log (n int)"))
        session.execute(text("DELETE FROM attempt_log"))
        session.commit()
        yield session
        session.rollback()
        session.execute(text("DROP TABLE attempt_log"))
        session.commit()
    engine.dispose()


def _abort(session: Session, sqlstate: str) -> None:
    """Have the server abort the transaction with ``sqlstate``."""
    session.execute(
        text(f"DO $$ BEGIN RAISE EXCEPTION 'aborted' USING ERRCODE = '{sqlstate}'; END $$")
    )


def _work(session: Session, aborts: int, sqlstate: str) -> tuple[list[int], Callable[[], int]]:
    attempts: list[int] = []

    def work() -> int:
        attempts.append(len(attempts) + 1)
        session.execute(text("INSERT INTO attempt_log VALUES (:n)"), {"n": len(attempts)})
        if len(attempts) <= aborts:
            _abort(session, sqlstate)
        return len(attempts)

    return attempts, work


def _logged(session: Session) -> list[int]:
    return list(session.scalars(text("SELECT n FROM attempt_log ORDER BY n")))


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
def test_an_aborted_transaction_is_run_again_and_only_the_last_run_is_stored(
    session: Session, sqlstate: str
) -> None:
    attempts, work = _work(session, 2, sqlstate)
    assert in_transaction(session, work) == 3
    assert attempts == [1, 2, 3]
    assert _logged(session) == [3]


def test_after_every_attempt_aborted_the_answer_is_a_retryable_503(session: Session) -> None:
    attempts, work = _work(session, TRANSACTION_ATTEMPTS, "40P01")
    with pytest.raises(ApiError) as raised:
        in_transaction(session, work)
    assert (raised.value.status, raised.value.code) == (503, "transaction_conflict")
    assert raised.value.headers == {"Retry-After": "1"}
    assert len(attempts) == TRANSACTION_ATTEMPTS
    session.rollback()
    assert _logged(session) == []


def test_other_database_errors_are_not_run_again(session: Session) -> None:
    attempts, work = _work(session, 1, "57014")
    with pytest.raises(DBAPIError):
        in_transaction(session, work)
    assert attempts == [1]
