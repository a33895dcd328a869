"""Errors of the engines made by :func:`calmon.db.session.create_db_engine` carry no statement
parameters (they hold model data), so neither do the log lines that report them."""

from __future__ import annotations

import io
import logging

import pytest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from calmon.db.session import create_db_engine
from calmon.log import JsonFormatter
from calmon.settings import Settings

SECRET = "client-7f3a-never-logged"


def test_a_failed_statement_is_logged_without_its_parameters(migrated_url: str) -> None:
    engine = create_db_engine(Settings(database_url=migrated_url))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.engine_errors")
    logger.addHandler(handler)
    try:
        with engine.connect() as connection:
            with pytest.raises(SQLAlchemyError) as caught:
                connection.execute(
                    text("SELECT client_id FROM no_such_table WHERE client_id = :id"),
                    {"id": SECRET},
                )
            logger.error("query failed", exc_info=caught.value)
    finally:
        logger.removeHandler(handler)
        engine.dispose()
    line = stream.getvalue()
    assert "no_such_table" in line
    assert SECRET not in line
    assert SECRET not in str(caught.value)
