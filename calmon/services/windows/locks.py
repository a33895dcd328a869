"""The advisory locks around a window's computation: the claim that opens a window's
transaction, and the model lock a change scan waits for.

Why these locks, their keys and what they guarantee: ``docs/reference/scheduler.md`` ("Scaling
out").
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlalchemy.orm import Session

from calmon.db import locks
from calmon.db.backend import has_advisory_locks
from calmon.db.models import Model
from calmon.db.session import begin_read_only, set_transaction_config

#: PostgreSQL statement timeout inside a window's transaction (large windows read long)
COMPUTE_STATEMENT_TIMEOUT_MS: Final = 600_000


def begin_window(session: Session, *, model: Model, start: datetime, instance: str) -> bool:
    """Open the window's transaction and claim the window: one snapshot for every read
    (PostgreSQL: repeatable read and a long statement timeout). SQLite transactions are
    serialisable already, and SQLite has a single scheduler: there the transaction only reads
    (:func:`~calmon.db.session.begin_read_only`), so the window's rows are read beside the
    API's writes instead of holding the write lock against them.

    On PostgreSQL the claim is two transaction-level advisory locks, taken without waiting
    (False when either is taken elsewhere) and released when the transaction ends, commit,
    rollback or a dead connection alike: the model lock ``(locks.WINDOW, model id)``,
    exclusive for a model with a trailing reference (its windows are computed one at a time,
    oldest first, as each one's reference is made of the windows before it) and shared
    otherwise, and the window's own lock (:func:`calmon.db.locks.window_claim_key`). The change
    scan takes the model lock exclusively (:func:`lock_model_for_scan`), so it never runs while a
    window of the model is being computed. The locks are the transaction's first statement, so its
    snapshot is taken just before they are granted: a computation committed in between makes
    this one fail when it writes the window's state (a serialisation failure), never store
    twice. While the transaction lasts its ``application_name`` names the scheduler instance
    (``pg_stat_activity`` shows who computes what).
    """
    if not has_advisory_locks(session):
        begin_read_only(session)
        return True
    session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    claimed = locks.try_window_claim(
        session,
        model_id=model.id,
        start=start,
        exclusive_model=model.reference_kind == "trailing",
    )
    set_transaction_config(
        session,
        statement_timeout_ms=COMPUTE_STATEMENT_TIMEOUT_MS,
        application_name=f"calmon-window {instance}",
    )
    return claimed


def lock_model_for_scan(session: Session, *, model: Model) -> None:
    """Wait for the model lock exclusively (PostgreSQL; nothing on SQLite): the windows of the
    model being computed commit first, and none starts until the session's transaction ends.
    A scan then never races a computation of the same model (it would compare a window's
    fingerprint with a checkpoint being replaced)."""
    if not has_advisory_locks(session):
        return
    locks.wait_for(session, locks.WINDOW, model.id)
