"""The advisory locks around a window's computation: the claim that opens a window's
transaction, and the model lock a change scan waits for.

Why these locks, their keys and what they guarantee: ``docs/scheduler.md`` ("Scaling out").
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlalchemy import text
from sqlalchemy.orm import Session

from calmon.db import locks
from calmon.db.backend import has_advisory_locks
from calmon.db.models import Model
from calmon.db.session import begin_read_only
from calmon.timeline import EPOCH

#: PostgreSQL statement timeout inside a window's transaction (large windows read long)
COMPUTE_STATEMENT_TIMEOUT_MS: Final = 600_000


def window_claim_key(model: Model, start: datetime) -> tuple[int, int]:
    """The two-key advisory lock that claims one window: (-model id, the window's start in
    Unix seconds as a signed 32-bit integer). The negative first key keeps it apart from the
    model lock ``(locks.WINDOW, model id)``; starts are unique within 136 years."""
    seconds = int((start - EPOCH).total_seconds()) % 2**32
    return -model.id, seconds - 2**32 if seconds >= 2**31 else seconds


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
    otherwise, and the window's own lock (:func:`window_claim_key`). The change scan takes
    the model lock exclusively (:func:`lock_model_for_scan`), so it never runs while a window
    of the model is being computed. The locks are the transaction's first statement, so its
    snapshot is taken just before they are granted: a computation committed in between makes
    this one fail when it writes the window's state (a serialisation failure), never store
    twice. While the transaction lasts its ``application_name`` names the scheduler instance
    (``pg_stat_activity`` shows who computes what).
    """
    if not has_advisory_locks(session):
        begin_read_only(session)
        return True
    session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    key, window = window_claim_key(model, start)
    claimed = locks.try_window_claim(
        session,
        model_id=model.id,
        key=key,
        window=window,
        exclusive_model=model.reference_kind == "trailing",
    )
    session.execute(
        text(
            "SELECT set_config('statement_timeout', :value, true),"
            " set_config('application_name', :name, true)"
        ),
        {"value": str(COMPUTE_STATEMENT_TIMEOUT_MS), "name": f"calmon-window {instance}"[:63]},
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
