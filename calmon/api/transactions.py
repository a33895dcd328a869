"""One request's database work as a transaction, retried when PostgreSQL aborts it for a
concurrent one.

PostgreSQL breaks a lock cycle by aborting one of its transactions (``deadlock_detected``,
SQLSTATE 40P01) and aborts a transaction whose snapshot can no longer be kept
(``serialization_failure``, 40001). Neither says anything about the database being down, and
the same work succeeds when run again: it is run again, from the start, up to
``TRANSACTION_ATTEMPTS`` times, after a short random pause (so that the transactions that
collided do not collide again). Only if every attempt is aborted is the request answered 503
``transaction_conflict`` with ``Retry-After: 1`` (nothing of it is stored). Ingestion takes its
locks in one order, so these aborts are not expected; this is the bound if one happens anyway.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Final, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from calmon.api.errors import ApiError
from calmon.db.sqlstate import aborted_for_concurrency, sqlstate

T = TypeVar("T")

#: runs of the work before the request is answered ``transaction_conflict``
TRANSACTION_ATTEMPTS: Final = 5
#: longest random pause before a new attempt, in seconds (doubled at each attempt)
RETRY_PAUSE: Final = 0.02

logger = logging.getLogger(__name__)


def in_transaction(session: Session, work: Callable[[], T]) -> T:
    """Run ``work`` (which uses ``session``) and commit; when the transaction is aborted for a
    concurrent one, roll back and run it again, up to ``TRANSACTION_ATTEMPTS`` times in all,
    then raise 503 ``transaction_conflict``. Other errors propagate (the request's session
    rolls back)."""
    for attempt in range(TRANSACTION_ATTEMPTS):
        try:
            result = work()
            session.commit()
            return result
        except DBAPIError as exc:
            if not aborted_for_concurrency(exc):
                raise
            session.rollback()
            logger.warning(
                "transaction aborted for a concurrent one (%s), attempt %d of %d",
                sqlstate(exc),
                attempt + 1,
                TRANSACTION_ATTEMPTS,
            )
            time.sleep(random.uniform(0, RETRY_PAUSE * 2**attempt))  # noqa: S311
    raise ApiError(
        503,
        "transaction_conflict",
        "the request collided with concurrent writes of the same rows; nothing of it was "
        "stored: send it again",
        headers={"Retry-After": "1"},
    )
