"""Ingestion of predictions and labels: batch, all or nothing, idempotent.

A batch is loaded into a per-connection temporary *stage* table and moved with set-based
statements (:mod:`calmon.db.ingest_statements`), ids in client-id order so that concurrent batches
cannot deadlock. A repeat with other content is a :class:`ConflictError` naming the ids (the
caller rolls back); a label for an unknown id is kept as a pending label. Request bodies are
validated before they get here (:mod:`calmon.services.ingest_schemas`). The statements, the locks
(advisory per model, rows in id order, the model row ``FOR SHARE`` taken by the caller) and what
counts as a repeat are in ``docs/reference/storage.md`` ("Ingestion path") and
``docs/reference/api.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from calmon.db.backend import partitions_predictions
from calmon.db.changes import PG_RECORD_STAGED, record_changes, record_stored_predictions
from calmon.db.ingest_statements import (
    APPLY_PENDING,
    CONFLICTING_IDS,
    DROP_APPLIED_PENDING,
    EXPIRED_LABELS,
    HAS_PENDING,
    INSERT_NEW_ONLY,
    PG_APPLY_PENDING,
    PG_CONFLICTING_IDS,
    PG_EXPIRED_LABELS,
    PG_INSERT_NEW_ONLY,
    PG_LABELLED_RANGE,
    PG_LOCK_LABELLED,
    PG_REPEATED_PENDING,
    PG_STORED_RANGE,
    PG_UNKNOWN_LABEL_IDS,
    PG_UPDATE_LABELS,
    PG_UPSERT_PENDING,
    REPEATED_PENDING,
    UNKNOWN_LABEL_IDS,
    UPDATE_LABELS,
    UPSERT_PENDING,
    ModelLock,
    ModelRow,
    get_model_row,
    label_stage,
    load_stage,
    lock_model,
    pg_insert_all_or_fail,
    prediction_stage,
    rollback_to_batch_savepoint,
)
from calmon.db.models import Model
from calmon.db.partitions import ensure_days, forget
from calmon.db.sqlstate import CHECK_VIOLATION, UNIQUE_VIOLATION, sqlstate
from calmon.services.errors import ConflictError
from calmon.services.ingest_batches import LabelColumns, PredictionColumns
from calmon.services.ingest_schemas import LabelIn, PredictionRow
from calmon.services.model_registry import ModelChangedError
from calmon.timeline import EPOCH, WINDOW_SECONDS

#: the all-new insert of a batch with its change record and the pending-label check
_PG_INSERT_ALL_OR_FAIL = pg_insert_all_or_fail(PG_RECORD_STAGED)


@dataclass(frozen=True, slots=True)
class PredictionsResult:
    """Outcome of a prediction batch: ``new + duplicates`` = batch size."""

    new: int
    duplicates: int
    pending_labels_applied: int


@dataclass(frozen=True, slots=True)
class LabelsResult:
    """Outcome of a label batch (distinct ids): ``updated + unchanged + expired +
    len(pending)``; ``expired`` counts labels of predictions older than retention keeps
    (ignored: their windows are expired or about to be).

    ``pending_changed`` counts the pending ids whose label was not pending already (new, or
    replacing the other label); ``updated + pending_changed`` labels changed something.
    """

    updated: int
    unchanged: int
    pending: list[str]
    pending_changed: int
    expired: int = 0


def _insert_partitioned(
    connection: Connection,
    params: dict[str, Any],
    batch: PredictionColumns,
    days: set[date],
    *,
    model: Model,
) -> tuple[int, bool | None]:
    """PostgreSQL: insert the staged predictions whose id is new, registry first; returns how
    many, and, when every id was new, whether the model has pending labels (None otherwise:
    then the windows are not recorded yet either).

    The first attempt, a plain insert with its change record (every id new, the usual case),
    runs in the savepoint :func:`~calmon.db.ingest_statements.load_stage` opened before the
    ``COPY``; after a failure there the batch is staged again, and each further attempt runs
    in a savepoint of its own. On a unique violation the ``ON CONFLICT`` form follows. An
    insert that finds a day without its partition (this process believed it made, but the
    batch that made it rolled back, or it was dropped since) makes it and tries once more.
    """
    params = {**params, "length": WINDOW_SECONDS[model.window]}
    every_new = True
    retried = False
    first = True
    while True:
        try:
            with nullcontext() if first else connection.begin_nested():
                if every_new:
                    pending = connection.execute(_PG_INSERT_ALL_OR_FAIL, params).scalar_one()
                    return len(batch), bool(pending)
                return int(connection.execute(PG_INSERT_NEW_ONLY, params).rowcount), None
        except IntegrityError as exc:
            state = sqlstate(exc)
            if not (state == UNIQUE_VIOLATION and every_new) and not (
                state == CHECK_VIOLATION and not retried
            ):
                raise
        if first:
            rollback_to_batch_savepoint(connection)
        if state == UNIQUE_VIOLATION:
            every_new = False
        else:
            retried = True
            forget(connection)
            ensure_days(connection, days)
        if first:
            load_stage(connection, prediction_stage, batch.stage())
            first = False


def _disagreeing_copies(rows: Sequence[PredictionRow], ids: Sequence[str]) -> set[str]:
    """Those of ``ids`` that the batch itself sends twice with other content: another
    timestamp (instant), score or segment, or two different labels (a copy without a label
    agrees with any)."""
    wanted = set(ids)
    contents: dict[str, tuple[datetime, float, str | None]] = {}
    labels: dict[str, int] = {}
    disagreeing: set[str] = set()
    for client_id, ts, score, label, segment in rows:
        if client_id not in wanted:
            continue
        if contents.setdefault(client_id, (ts, score, segment)) != (ts, score, segment):
            disagreeing.add(client_id)
        if label is not None and labels.setdefault(client_id, label) != label:
            disagreeing.add(client_id)
    return disagreeing


def _conflict_message(conflicting: Sequence[str], rows: Sequence[PredictionRow]) -> str:
    within = len(_disagreeing_copies(rows, conflicting))
    stored = len(conflicting) - within
    parts = []
    if within:
        parts.append(f"{within} prediction id(s) conflict within the batch (copies differ)")
    if stored:
        parts.append(f"{stored} prediction id(s) already exist with other content")
    return "; ".join(parts)


def ingest_predictions(
    session: Session,
    *,
    model: Model,
    rows: PredictionColumns | Sequence[PredictionRow],
    now: datetime,
    confirm_model: bool = False,
) -> PredictionsResult:
    """Store the new predictions of a batch (its columns, or its rows) and apply pending
    labels to them.

    Raises :class:`ConflictError` (details ``[{"id": ...}]``, sorted) when some id is already
    stored, or repeated in the batch, with other content; the caller must then roll back.
    With ``confirm_model`` (``model`` is a copy the batch was validated against, not read
    under the lock of this transaction), the model's row is locked ``FOR SHARE`` with the
    batch's first locks and compared with the copy: :class:`ModelChangedError` when they
    differ (the caller rolls back and runs the batch again from a fresh look-up).
    """
    batch = rows if isinstance(rows, PredictionColumns) else PredictionColumns.of_rows(rows)
    if not len(batch):
        return PredictionsResult(new=0, duplicates=0, pending_labels_applied=0)
    connection = session.connection()
    params: dict[str, Any] = {"model_id": model.id, "now": now}
    if partitions_predictions(connection):
        return _ingest_partitioned(
            connection, params, batch, model=model, confirm_model=confirm_model
        )
    if confirm_model:
        _confirm(model, get_model_row(connection, model.name))
    lock_model(connection, model.id, exclusive=False)
    load_stage(connection, prediction_stage, batch.stage())
    new = int(connection.execute(INSERT_NEW_ONLY, params).rowcount)
    if new < len(batch):
        conflicting = connection.execute(CONFLICTING_IDS, params).scalars().all()
        _raise_conflicts(conflicting, batch)
    applied = 0
    if new and connection.execute(HAS_PENDING, params).first() is not None:
        applied = connection.execute(APPLY_PENDING, params).rowcount
        connection.execute(DROP_APPLIED_PENDING, params)
    if new:
        lo, hi = batch.bounds()
        record_stored_predictions(
            connection, model=model, staged=len(batch), stored=new, lo=lo, hi=hi, now=now
        )
    return PredictionsResult(new=new, duplicates=len(batch) - new, pending_labels_applied=applied)


def _raise_conflicts(conflicting: Sequence[str], batch: PredictionColumns) -> None:
    if conflicting:
        raise ConflictError(
            "prediction_conflict",
            _conflict_message(conflicting, batch.rows()),
            [{"id": client_id} for client_id in conflicting],
        )


def _confirm(model: Model, row: ModelRow | None) -> None:
    """Raise :class:`ModelChangedError` unless ``row`` (as stored now) is ``model``'s."""
    if row != (model.id, model.score_kind, model.window):
        raise ModelChangedError(model.name)


def _ingest_partitioned(
    connection: Connection,
    params: dict[str, Any],
    batch: PredictionColumns,
    *,
    model: Model,
    confirm_model: bool,
) -> PredictionsResult:
    """:func:`ingest_predictions` on PostgreSQL: the partitions of the batch's days are made
    if missing (before any lock of the batch), then ids go into the registry and rows into
    their day partitions in one statement, which records the batch's windows and tells
    whether the model has pending labels when every id is new."""
    lo, hi = batch.bounds()
    days = batch.days()
    ensure_days(connection, days)
    row = load_stage(
        connection,
        prediction_stage,
        batch.stage(),
        lock=ModelLock(model.id, exclusive=False, row_of=model.name if confirm_model else None),
        savepoint=True,
    )
    if confirm_model:
        _confirm(model, row)
    new, pending = _insert_partitioned(connection, params, batch, days, model=model)
    recorded = pending is not None
    if new < len(batch):
        stored_lo, stored_hi = connection.execute(PG_STORED_RANGE, params).one()
        if stored_lo is not None:
            stored = {"lo": stored_lo, "hi": stored_hi}
            conflicting = (
                connection.execute(PG_CONFLICTING_IDS, {**params, **stored}).scalars().all()
            )
            _raise_conflicts(conflicting, batch)
    if new and pending is None:
        pending = connection.execute(HAS_PENDING, params).first() is not None
    applied = 0
    if new and pending:
        applied = connection.execute(PG_APPLY_PENDING, {**params, "lo": lo, "hi": hi}).rowcount
        connection.execute(DROP_APPLIED_PENDING, params)
    if not recorded:
        record_stored_predictions(
            connection,
            model=model,
            staged=len(batch),
            stored=new,
            lo=lo,
            hi=hi,
            now=params["now"],
        )
    return PredictionsResult(new=new, duplicates=len(batch) - new, pending_labels_applied=applied)


def ingest_labels(
    session: Session,
    *,
    model: Model,
    labels: LabelColumns | Sequence[LabelIn],
    now: datetime,
    earliest: datetime = EPOCH,
) -> LabelsResult:
    """Apply a batch of labels (its columns, or its items); ids without a prediction become
    pending labels. Labels of predictions with an event time before ``earliest`` (what
    retention keeps) are ignored and counted as ``expired``: they would bring back windows
    that retention removes."""
    batch = labels if isinstance(labels, LabelColumns) else LabelColumns.of_items(labels)
    if not len(batch):
        return LabelsResult(updated=0, unchanged=0, pending=[], pending_changed=0)
    connection = session.connection()
    params: dict[str, Any] = {"model_id": model.id, "now": now, "earliest": earliest}
    partitioned = partitions_predictions(connection)
    find_unknown = PG_UNKNOWN_LABEL_IDS if partitioned else UNKNOWN_LABEL_IDS
    load_stage(connection, label_stage, batch.stage())
    unknown = connection.execute(find_unknown, params).scalars().all()
    if unknown:
        lock_model(connection, model.id, exclusive=True)
    expired = 0
    if partitioned:
        changed: Sequence[datetime] = []
        lo, hi = connection.execute(PG_LABELLED_RANGE, params).one()
        if lo is not None and lo < earliest:
            expired = connection.execute(PG_EXPIRED_LABELS, params).scalar_one()
            lo = earliest
        if lo is not None and lo <= hi:
            bounds = {**params, "lo": lo, "hi": hi}
            connection.execute(PG_LOCK_LABELLED, bounds)
            changed = connection.execute(PG_UPDATE_LABELS, bounds).scalars().all()
    else:
        if earliest > EPOCH:
            expired = connection.execute(EXPIRED_LABELS, params).scalar_one()
        changed = connection.execute(UPDATE_LABELS, params).scalars().all()
    updated = len(changed)
    record_changes(connection, model=model, stamps=changed, now=now)
    pending_changed = 0
    if unknown:
        unknown = connection.execute(find_unknown, params).scalars().all()
        if unknown:
            repeated = connection.execute(
                PG_REPEATED_PENDING if partitioned else REPEATED_PENDING, params
            ).scalar_one()
            pending_changed = len(unknown) - int(repeated)
            connection.execute(PG_UPSERT_PENDING if partitioned else UPSERT_PENDING, params)
    return LabelsResult(
        updated=updated,
        unchanged=len(batch) - updated - expired - len(unknown),
        pending=list(unknown),
        pending_changed=pending_changed,
        expired=expired,
    )
