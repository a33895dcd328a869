"""Every PostgreSQL advisory lock calmon takes: its keys, and the statements that take them.

Each class is a first key of four ASCII letters, so that ``pg_locks`` shows whose lock it is;
the second key names the object. All but the migration lock are transaction-level (released at
commit, rollback or a dead connection alike), so nothing stays on a server session for the next
client of a transaction pooler. SQLite has no advisory locks: it serialises writing
transactions whole, and the callers skip these (:func:`calmon.db.backend.has_advisory_locks`).

- :data:`MODEL` ("calm"), key (class, model id): a batch of predictions or labels takes it
  shared, a batch of labels with ids not stored yet exclusively, so that a label waiting for
  its prediction and that prediction's batch are ordered.
- :data:`REGISTRY` ("calR"), key (class, 0): a model's creation, so that concurrent creations
  count the models one after the other against ``CALMON_MAX_MODELS``.
- :data:`WINDOW` ("calW"), key (class, model id): a window's computation (shared, exclusive
  with a trailing reference) and the model's change scan (exclusive).
- the window's own key (-model id, window start; :func:`window_claim_key`): one computation
  per window, taken with the model's :data:`WINDOW` lock (:func:`try_window_claim`). Its
  class is the negated model id, so it never meets the positive four-letter classes.
- :data:`PARTITION` ("calp"), key (class, 0): the makers of day partitions.
- :data:`MIGRATION` ("calmon"), one key, session-level: ``calmon migrate``, one at a time.

Not an advisory lock, but the one other lock kept in the database: the scheduler's leader lease,
a row of ``scheduler_leader`` per role (:func:`claim_lease`, :func:`end_lease`), which needs no
session of its own (``docs/reference/scheduler.md``, "The leader lock").
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import Connection, Interval, case, delete, func, literal, or_, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from calmon.db.models import SchedulerLeader
from calmon.timeline import EPOCH

#: two-key class per model, taken around ingestion ("calm")
MODEL: Final = 0x63616C6D
#: two-key class around a model's creation ("calR")
REGISTRY: Final = 0x63616C52
#: two-key class of a model's window computations and change scan ("calW")
WINDOW: Final = 0x63616C57
#: two-key class of the partition makers ("calp")
PARTITION: Final = 0x63616C70
#: one-key session lock held while migrating ("calmon")
MIGRATION: Final = 0x63616C6D6F6E

_EXCLUSIVE: Final = text("SELECT pg_advisory_xact_lock(:cls, :obj)")
_SHARED: Final = text("SELECT pg_advisory_xact_lock_shared(:cls, :obj)")
_TRY_CLAIM: Final = {
    exclusive: text(
        f"SELECT {'pg_try_advisory_xact_lock' if exclusive else 'pg_try_advisory_xact_lock_shared'}"
        "(:cls, :obj)"
        " AND pg_try_advisory_xact_lock(CAST(:key AS integer), CAST(:window AS integer))"
    )
    for exclusive in (True, False)
}
#: :data:`_SHARED` and :data:`_EXCLUSIVE` with psycopg's placeholders
_DRIVER_TEXT: Final = {
    True: "SELECT pg_advisory_xact_lock_shared(%(cls)s, %(obj)s)",
    False: "SELECT pg_advisory_xact_lock(%(cls)s, %(obj)s)",
}
_MIGRATION_LOCK: Final = text("SELECT pg_advisory_lock(:key)")
_MIGRATION_UNLOCK: Final = text("SELECT pg_advisory_unlock(:key)")


def wait_for(bind: Connection | Session, cls: int, obj: int = 0, *, shared: bool = False) -> None:
    """Wait for the transaction-level lock (``cls``, ``obj``), shared or exclusive."""
    bind.execute(_SHARED if shared else _EXCLUSIVE, {"cls": cls, "obj": obj})


def driver_statement(cls: int, obj: int = 0, *, shared: bool = False) -> tuple[str, dict[str, int]]:
    """The statement of :func:`wait_for` as psycopg takes it (text and parameters), for
    statements sent together in one round trip past SQLAlchemy (a pipeline)."""
    return _DRIVER_TEXT[shared], {"cls": cls, "obj": obj}


def window_claim_key(model_id: int, start: datetime) -> tuple[int, int]:
    """The two-key advisory lock that claims one window: (-model id, the window's start in
    Unix seconds as a signed 32-bit integer). The negative first key keeps it apart from the
    model lock ``(WINDOW, model id)``; starts are unique within 136 years."""
    seconds = int((start - EPOCH).total_seconds()) % 2**32
    return -model_id, seconds - 2**32 if seconds >= 2**31 else seconds


def try_window_claim(
    session: Session, *, model_id: int, start: datetime, exclusive_model: bool
) -> bool:
    """Take, without waiting, the model's :data:`WINDOW` lock (exclusive or shared) and the
    window's own lock (:func:`window_claim_key`); False when either is held elsewhere."""
    key, window = window_claim_key(model_id, start)
    params = {"cls": WINDOW, "obj": model_id, "key": key, "window": window}
    return bool(session.scalar(_TRY_CLAIM[exclusive_model], params))


def lock_migrations(connection: Connection) -> None:
    """Wait for the session-level :data:`MIGRATION` lock."""
    connection.execute(_MIGRATION_LOCK, {"key": MIGRATION})


def unlock_migrations(connection: Connection) -> None:
    """Release the session-level :data:`MIGRATION` lock."""
    connection.execute(_MIGRATION_UNLOCK, {"key": MIGRATION})


def claim_lease(connection: Connection, *, role: str, instance: str, seconds: float) -> bool:
    """Take or renew the lease of ``role`` for ``instance`` until ``seconds`` after the server's
    ``now()``, when it is free, expired or ``instance``'s already (one ``INSERT … ON CONFLICT DO
    UPDATE … WHERE``; renewing keeps ``acquired_at``). True when ``instance`` holds it
    afterwards."""
    row = SchedulerLeader
    values = insert(row).values(
        role=role,
        instance=instance,
        acquired_at=func.now(),
        expires_at=func.now() + literal(timedelta(seconds=seconds), Interval()),
    )
    ours = row.instance == values.excluded.instance
    statement = values.on_conflict_do_update(
        index_elements=[row.role],
        set_={
            "instance": values.excluded.instance,
            "acquired_at": case((ours, row.acquired_at), else_=values.excluded.acquired_at),
            "expires_at": values.excluded.expires_at,
        },
        where=or_(ours, row.expires_at <= func.now()),
    ).returning(row.instance)
    return connection.execute(statement).first() is not None


def end_lease(connection: Connection, *, role: str, instance: str) -> None:
    """End the lease of ``role`` now if ``instance`` holds it (another holder's is left)."""
    connection.execute(
        delete(SchedulerLeader).where(
            SchedulerLeader.role == role, SchedulerLeader.instance == instance
        )
    )
