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
  with a trailing reference) and the model's change scan (exclusive); with the window's own
  key (-model id, window start), one computation per window.
- :data:`PARTITION` ("calp"), key (class, 0): the makers of day partitions.
- :data:`MIGRATION` ("calmon"), one key, session-level: ``calmon migrate``, one at a time.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

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


def try_window_claim(
    session: Session, *, model_id: int, key: int, window: int, exclusive_model: bool
) -> bool:
    """Take, without waiting, the model's :data:`WINDOW` lock (exclusive or shared) and the
    window's own lock (``key``, ``window``); False when either is held elsewhere."""
    params = {"cls": WINDOW, "obj": model_id, "key": key, "window": window}
    return bool(session.scalar(_TRY_CLAIM[exclusive_model], params))


def lock_migrations(connection: Connection) -> None:
    """Wait for the session-level :data:`MIGRATION` lock."""
    connection.execute(_MIGRATION_LOCK, {"key": MIGRATION})


def unlock_migrations(connection: Connection) -> None:
    """Release the session-level :data:`MIGRATION` lock."""
    connection.execute(_MIGRATION_UNLOCK, {"key": MIGRATION})
