"""``CALMON_DB_TRANSACTION_POOLER``: the engine for a transaction-pooling PgBouncer keeps
nothing on the server session between transactions (no prepared statement, no timeout set
for the session) and still bounds every transaction's statements and lock waits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from calmon.db.session import create_db_engine
from calmon.settings import Settings


@pytest.fixture(params=[False, True], ids=["direct", "pooler"])
def engine_and_mode(
    request: pytest.FixtureRequest, postgres_database: str
) -> Iterator[tuple[Engine, bool]]:
    """An engine with and without ``db_transaction_pooler`` (and which)."""
    url = postgres_database.replace("postgresql://", "postgresql+psycopg://", 1)
    made = create_db_engine(
        Settings(database_url=url, db_statement_timeout=20, db_transaction_pooler=request.param)
    )
    yield made, request.param
    made.dispose()


def test_timeouts_in_each_transaction_and_nothing_on_the_session(
    engine_and_mode: tuple[Engine, bool],
) -> None:
    engine, pooler = engine_and_mode
    with engine.connect() as conn:
        for _ in range(8):
            conn.execute(text("SELECT 1 + :n"), {"n": 1})
        inside = conn.execute(
            text("SELECT current_setting('statement_timeout'), current_setting('lock_timeout')")
        ).one()
        prepared = conn.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar()
        conn.commit()
        raw = conn.connection.dbapi_connection
        assert raw is not None
        raw.autocommit = True
        session = raw.execute(
            "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
        ).fetchone()
        raw.autocommit = False
    assert tuple(inside) == ("20s", "18s")
    if pooler:
        # Set for the transaction only: the session (the next client's, behind PgBouncer)
        # keeps the server's defaults, and psycopg prepares nothing.
        assert session == ("0", "0")
        assert prepared == 0
    else:
        assert session == ("20s", "18s")
        assert prepared is not None
        assert prepared > 0
