"""Ingestion of predictions and labels: batch, all or nothing, idempotent.

A batch is loaded into a per-connection temporary *stage* table (binary ``COPY`` on PostgreSQL,
``executemany`` on SQLite) and moved with set-based statements, ids in client-id order so that
concurrent batches cannot deadlock. A repeat with other content is a :class:`ConflictError`
naming the ids (the caller rolls back); a label for an unknown id is kept as a pending label.
The statements, the locks (advisory per model, rows in id order, the model row ``FOR SHARE``
taken by the caller) and what counts as a repeat are in ``docs/storage.md`` ("Ingestion path")
and ``docs/api.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Final, Generic, NotRequired, TypeVar, cast

from psycopg import sql as pg_sql
from pydantic import (
    ConfigDict,
    Field,
    GetPydanticSchema,
    TypeAdapter,
    WithJsonSchema,
    with_config,
)
from pydantic_core import PydanticKnownError, SchemaValidator, core_schema
from sqlalchemy import (
    Column,
    Connection,
    Double,
    MetaData,
    SmallInteger,
    Table,
    Text,
    bindparam,
    insert,
    text,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.schema import CreateTable
from typing_extensions import TypedDict

from app.db.models import Model, UTCDateTime
from app.db.partitions import ensure_days, forget
from app.names import SEGMENT_PATTERN
from app.services.changes import record_changes, record_stored_predictions
from app.services.errors import ConflictError
from app.timeline import iso

MAX_BATCH: Final = 10_000
#: 1 to 128 characters, none of them a control character (C0, DEL or C1)
CLIENT_ID_PATTERN: Final = r"^[^\x00-\x1f\x7f-\x9f]{1,128}$"
#: first key of the two-key advisory locks taken per model ("calm")
MODEL_LOCK_CLASS: Final = 0x63616C6D
#: earliest event time taken: the UTC epoch, where windows are aligned
EARLIEST_TIMESTAMP: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY: Final = date(1970, 1, 1)
#: how far an event time may lie past the server's clock (other hosts' clocks run ahead)
FUTURE_TOLERANCE: Final = timedelta(days=1)

T = TypeVar("T")

ClientId = Annotated[str, Field(max_length=128, pattern=CLIENT_ID_PATTERN)]
Segment = Annotated[str, Field(pattern=SEGMENT_PATTERN)]
#: 0 or 1; JSON booleans are refused, and so is ``0.0`` (the schema says it with an enum)
Label = Annotated[int, Field(strict=True, ge=0, le=1, json_schema_extra={"enum": [0, 1]})]
#: the schema of a batch cannot depend on the model, so it says the [0, 1] bound in words
Score = Annotated[
    float,
    Field(
        allow_inf_nan=False,
        description="finite; in [0, 1] when the model's `score_kind` is `probability`",
    ),
]
Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


def _instant_schema(ge: datetime | None = None) -> core_schema.CoreSchema:
    """ISO 8601 text with an offset, as an aware datetime not before ``ge``.

    Pydantic would read a number, or a string of digits, as Unix time, which has no offset to
    check: a string without ``:`` never gets to the parser. Both steps run in pydantic's core,
    with no Python call per value."""
    return core_schema.chain_schema(
        [
            core_schema.custom_error_schema(
                core_schema.str_schema(pattern=":"),
                custom_error_type="iso_datetime",
                custom_error_message="Input should be an ISO 8601 date and time with an "
                "offset, such as 2026-11-01T10:00:00Z",
            ),
            core_schema.datetime_schema(tz_constraint="aware", strict=False, ge=ge),
        ]
    )


#: an instant as requests give it: ISO 8601 text with an offset
Instant = Annotated[
    datetime,
    GetPydanticSchema(lambda _type, _handler: _instant_schema()),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
#: an event time: an :data:`Instant` not before the epoch; the upper bound moves with the
#: clock and is added by :class:`EventSchema`
Timestamp = Annotated[
    datetime,
    GetPydanticSchema(lambda _type, _handler: _instant_schema(ge=EARLIEST_TIMESTAMP)),
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "description": "event time with an offset, from 1970-01-01T00:00:00Z to one day "
            "after the server's clock",
        }
    ),
]
#: what a stored prediction is made of: (id, timestamp, score, label, segment)
PredictionRow = tuple[str, datetime, float, int | None, str | None]

# Request items are TypedDicts: pydantic validates them straight from JSON about twice as fast
# as model instances, and each becomes one tuple for the database.


@with_config(ConfigDict(extra="forbid", strict=True))
class PredictionIn(TypedDict):
    """One prediction as clients send it (``score_kind = score``: any finite score)."""

    id: ClientId
    timestamp: Timestamp
    score: Score
    label: NotRequired[Label | None]
    segment: NotRequired[Segment | None]


@with_config(ConfigDict(extra="forbid", strict=True))
class ProbabilityPredictionIn(TypedDict):
    """One prediction of a ``probability`` model: the score lies in [0, 1]."""

    id: ClientId
    timestamp: Timestamp
    score: Probability
    label: NotRequired[Label | None]
    segment: NotRequired[Segment | None]


@with_config(ConfigDict(extra="forbid", strict=True))
class PredictionBatch(TypedDict):
    """Body of ``POST /v1/models/{model}/predictions`` (up to 10,000 predictions)."""

    predictions: Annotated[list[PredictionIn], Field(max_length=MAX_BATCH)]


@with_config(ConfigDict(extra="forbid", strict=True))
class ProbabilityPredictionBatch(TypedDict):
    """Body of ``POST /v1/models/{model}/predictions`` for a ``probability`` model."""

    predictions: Annotated[list[ProbabilityPredictionIn], Field(max_length=MAX_BATCH)]


@with_config(ConfigDict(extra="forbid", strict=True))
class LabelIn(TypedDict):
    """One label for a prediction sent earlier (or later)."""

    id: ClientId
    label: Label


@with_config(ConfigDict(extra="forbid", strict=True))
class LabelBatch(TypedDict):
    """Body of ``POST /v1/models/{model}/labels`` (up to 10,000 labels)."""

    labels: Annotated[list[LabelIn], Field(max_length=MAX_BATCH)]


PREDICTION_BATCH = TypeAdapter(PredictionBatch)
PROBABILITY_PREDICTION_BATCH = TypeAdapter(ProbabilityPredictionBatch)
LABEL_BATCH = TypeAdapter(LabelBatch)


def latest_timestamp(now: datetime) -> datetime:
    """The latest event time taken when the server's clock reads ``now``: one day later, to
    the second below."""
    return now.replace(microsecond=0) + FUTURE_TOLERANCE


def check_event_time(moment: datetime, now: datetime) -> None:
    """Refuse an event time out of ``[EARLIEST_TIMESTAMP, latest_timestamp(now)]`` with the
    error pydantic gives a batch item out of that range (for validators of single values)."""
    if moment < EARLIEST_TIMESTAMP:
        raise PydanticKnownError("greater_than_equal", {"ge": iso(EARLIEST_TIMESTAMP)})
    latest = latest_timestamp(now)
    if moment > latest:
        raise PydanticKnownError("less_than_equal", {"le": iso(latest)})


def _bounded_above(node: Any, latest: datetime) -> Any:
    """A copy of a core schema in which every datetime is at most ``latest``."""
    if isinstance(node, dict):
        copied = {key: _bounded_above(value, latest) for key, value in node.items()}
        if copied.get("type") == "datetime":
            copied["le"] = latest
        return copied
    if isinstance(node, list):
        return [_bounded_above(item, latest) for item in node]
    return node


class EventSchema(Generic[T]):
    """The schema of ``adapter`` with every instant at most ``latest_timestamp(now)``.

    That bound moves with the clock, so the validator carrying it is rebuilt from the adapter's
    core schema each time it moves to the next second (some 20 µs). Pydantic's core then checks
    every item's time in the same pass as its other fields, at no cost per item, and an
    instant too late is reported like any other invalid field (``less_than_equal`` at
    ``predictions[i].timestamp``). Only for schemas without pydantic models, which would
    bring their own validator.
    """

    def __init__(self, adapter: TypeAdapter[T]) -> None:
        self.adapter = adapter
        self._built: tuple[datetime, SchemaValidator] | None = None

    def at(self, now: datetime) -> Callable[[bytes], T]:
        """The JSON validator in force when the server's clock reads ``now``."""
        latest = latest_timestamp(now)
        built = self._built
        if built is None or built[0] != latest:
            schema = _bounded_above(self.adapter.core_schema, latest)
            built = (latest, SchemaValidator(schema))
            self._built = built
        validator = built[1]

        def validate(body: bytes) -> T:
            return cast(T, validator.validate_json(body))

        return validate


PREDICTIONS = EventSchema(PREDICTION_BATCH)
PROBABILITY_PREDICTIONS = EventSchema(PROBABILITY_PREDICTION_BATCH)


def prediction_rows(
    items: Sequence[PredictionIn] | Sequence[ProbabilityPredictionIn],
) -> list[PredictionRow]:
    """The stored form of validated request items."""
    return [(p["id"], p["timestamp"], p["score"], p.get("label"), p.get("segment")) for p in items]


@dataclass(frozen=True, slots=True)
class PredictionsResult:
    """Outcome of a prediction batch: ``new + duplicates`` = batch size."""

    new: int
    duplicates: int
    pending_labels_applied: int


@dataclass(frozen=True, slots=True)
class LabelsResult:
    """Outcome of a label batch (distinct ids): ``updated + unchanged + len(pending)``.

    ``pending_changed`` counts the pending ids whose label was not pending already (new, or
    replacing the other label); ``updated + pending_changed`` labels changed something.
    """

    updated: int
    unchanged: int
    pending: list[str]
    pending_changed: int


_stage_metadata = MetaData()
prediction_stage = Table(
    "calmon_prediction_stage",
    _stage_metadata,
    Column("client_id", Text),
    Column("ts", UTCDateTime()),
    Column("score", Double),
    Column("label", SmallInteger),
    Column("segment", Text),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
label_stage = Table(
    "calmon_label_stage",
    _stage_metadata,
    Column("client_id", Text),
    Column("label", SmallInteger),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
_PG_TYPES: Final[dict[str, list[str]]] = {
    prediction_stage.name: ["text", "timestamptz", "float8", "int2", "text"],
    label_stage.name: ["text", "int2"],
}


def _load_stage(connection: Connection, table: Table, rows: Sequence[tuple[Any, ...]]) -> None:
    """Empty ``table`` (created on first use in this connection) and fill it with ``rows``.

    On PostgreSQL the table is also emptied at each commit (``ON COMMIT DELETE ROWS``), so the
    ``DELETE`` here only has work when one transaction ingests several batches.
    """
    connection.execute(CreateTable(table, if_not_exists=True))
    connection.execute(table.delete())
    if connection.dialect.name == "postgresql":
        driver_connection: Any = connection.connection.driver_connection
        statement = pg_sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            pg_sql.Identifier(table.name),
            pg_sql.SQL(", ").join(pg_sql.Identifier(c.name) for c in table.columns),
        )
        with driver_connection.cursor() as cursor, cursor.copy(statement) as copy:
            copy.set_types(_PG_TYPES[table.name])
            for row in rows:
                copy.write_row(row)
        return
    if rows:
        names = [c.name for c in table.columns]
        connection.execute(insert(table), [dict(zip(names, row, strict=True)) for row in rows])


_LOCK_SHARED = text("SELECT pg_advisory_xact_lock_shared(:cls, :obj)")
_LOCK_EXCLUSIVE = text("SELECT pg_advisory_xact_lock(:cls, :obj)")


def _lock_model(connection: Connection, model_id: int, *, exclusive: bool) -> None:
    if connection.dialect.name != "postgresql":
        return
    connection.execute(
        _LOCK_EXCLUSIVE if exclusive else _LOCK_SHARED,
        {"cls": MODEL_LOCK_CLASS, "obj": model_id},
    )


_NOW = bindparam("now", type_=UTCDateTime())
#: the event-time range of a batch: bounds the day partitions a statement may touch
_LO = bindparam("lo", type_=UTCDateTime())
_HI = bindparam("hi", type_=UTCDateTime())

# SQLite: one table keyed by (model_id, client_id).

#: the staged rows into ``predictions`` (a constant: no value is ever part of the text)
_INSERT_STAGED: Final = (
    "INSERT INTO predictions (model_id, client_id, ts, score, label, segment, received_at,"
    " labelled_at, changed_at)"
    " SELECT :model_id, client_id, ts, score, label, segment, :now,"
    " CASE WHEN label IS NULL THEN NULL ELSE :now END, :now"
    " FROM calmon_prediction_stage WHERE true ORDER BY client_id, label IS NULL"
)
_INSERT_NEW_ONLY = text(
    _INSERT_STAGED + " ON CONFLICT (model_id, client_id) DO NOTHING"
).bindparams(_NOW)
UNIQUE_VIOLATION: Final = "23505"

_CONFLICTING_IDS = text(
    "SELECT DISTINCT s.client_id FROM calmon_prediction_stage s"
    " JOIN predictions p ON p.model_id = :model_id AND p.client_id = s.client_id"
    " WHERE p.ts <> s.ts OR p.score <> s.score"
    " OR COALESCE(p.segment, '') <> COALESCE(s.segment, '')"
    " OR (s.label IS NOT NULL AND COALESCE(p.label, -1) <> s.label)"
    " ORDER BY s.client_id"
)

# PostgreSQL: ``predictions`` is partitioned by day and has no unique index; ``prediction_keys``
# holds the ids (and each one's event time, which names its partition). Statements that find a
# stored prediction by id go through the registry and bound ``ts`` to the batch's range, so
# only the partitions of those days are read.

_PG_INSERT_ALL_OR_FAIL = text(
    "WITH keys AS (INSERT INTO prediction_keys (model_id, client_id, ts)"
    " SELECT :model_id, client_id, ts FROM calmon_prediction_stage ORDER BY client_id)"
    " INSERT INTO predictions (model_id, client_id, ts, score, label, segment, received_at,"
    " labelled_at, changed_at)"
    " SELECT :model_id, client_id, ts, score, label, segment, :now,"
    " CASE WHEN label IS NULL THEN NULL ELSE :now END, :now FROM calmon_prediction_stage"
).bindparams(_NOW)
_PG_INSERT_NEW_ONLY = text(
    "WITH new AS (INSERT INTO prediction_keys (model_id, client_id, ts)"
    " SELECT :model_id, client_id, ts FROM calmon_prediction_stage"
    " ORDER BY client_id, label IS NULL ON CONFLICT (model_id, client_id) DO NOTHING"
    " RETURNING client_id, ts)"
    " INSERT INTO predictions (model_id, client_id, ts, score, label, segment, received_at,"
    " labelled_at, changed_at)"
    " SELECT DISTINCT ON (s.client_id) :model_id, s.client_id, s.ts, s.score, s.label,"
    " s.segment, :now, CASE WHEN s.label IS NULL THEN NULL ELSE :now END, :now"
    " FROM calmon_prediction_stage s JOIN new ON new.client_id = s.client_id AND new.ts = s.ts"
    " ORDER BY s.client_id, s.label IS NULL"
).bindparams(_NOW)
CHECK_VIOLATION: Final = "23514"

_PG_STORED_RANGE = text(
    "SELECT min(k.ts), max(k.ts) FROM calmon_prediction_stage s JOIN prediction_keys k"
    " ON k.model_id = :model_id AND k.client_id = s.client_id"
)
_PG_CONFLICTING_IDS = text(
    "SELECT DISTINCT s.client_id FROM calmon_prediction_stage s"
    " JOIN prediction_keys k ON k.model_id = :model_id AND k.client_id = s.client_id"
    " JOIN predictions p ON p.model_id = :model_id AND p.client_id = k.client_id"
    " AND p.ts = k.ts"
    " WHERE p.ts >= :lo AND p.ts <= :hi AND (p.ts <> s.ts OR p.score <> s.score"
    " OR COALESCE(p.segment, '') <> COALESCE(s.segment, '')"
    " OR (s.label IS NOT NULL AND COALESCE(p.label, -1) <> s.label))"
    " ORDER BY s.client_id"
).bindparams(_LO, _HI)

_PG_APPLY_PENDING = text(
    "UPDATE predictions p SET label = pl.label, labelled_at = pl.received_at, changed_at = :now"
    " FROM pending_labels pl JOIN prediction_keys k"
    " ON k.model_id = pl.model_id AND k.client_id = pl.client_id"
    " WHERE pl.model_id = :model_id AND p.model_id = :model_id"
    " AND p.client_id = k.client_id AND p.ts = k.ts AND p.ts >= :lo AND p.ts <= :hi"
    " AND p.label IS NULL"
    " AND pl.client_id IN (SELECT client_id FROM calmon_prediction_stage)"
).bindparams(_NOW, _LO, _HI)

_PG_UNKNOWN_LABEL_IDS = text(
    "SELECT s.client_id FROM calmon_label_stage s WHERE NOT EXISTS"
    " (SELECT 1 FROM prediction_keys k WHERE k.model_id = :model_id"
    " AND k.client_id = s.client_id)"
    " ORDER BY s.client_id"
)
_PG_LABELLED_RANGE = text(
    "SELECT min(k.ts), max(k.ts) FROM calmon_label_stage s JOIN prediction_keys k"
    " ON k.model_id = :model_id AND k.client_id = s.client_id"
)
#: the batch's stored predictions, locked in id order before they are updated (an ``UPDATE …
#: FROM`` locks rows in the order of its join, which differs between batches)
_PG_LOCK_LABELLED = text(
    "SELECT 1 FROM calmon_label_stage s"
    " JOIN prediction_keys k ON k.model_id = :model_id AND k.client_id = s.client_id"
    " JOIN predictions p ON p.model_id = :model_id AND p.client_id = k.client_id"
    " AND p.ts = k.ts"
    " WHERE p.ts >= :lo AND p.ts <= :hi"
    " ORDER BY p.client_id FOR NO KEY UPDATE OF p"
).bindparams(_LO, _HI)
_PG_UPDATE_LABELS = (
    text(
        "UPDATE predictions p SET label = s.label, labelled_at = :now, changed_at = :now"
        " FROM calmon_label_stage s JOIN prediction_keys k"
        " ON k.model_id = :model_id AND k.client_id = s.client_id"
        " WHERE p.model_id = :model_id AND p.client_id = k.client_id AND p.ts = k.ts"
        " AND p.ts >= :lo AND p.ts <= :hi AND COALESCE(p.label, -1) <> s.label RETURNING p.ts"
    )
    .bindparams(_NOW, _LO, _HI)
    .columns(ts=UTCDateTime())
)
_PG_REPEATED_PENDING = text(
    "SELECT count(*) FROM calmon_label_stage s JOIN pending_labels pl"
    " ON pl.model_id = :model_id AND pl.client_id = s.client_id AND pl.label = s.label"
    " WHERE NOT EXISTS (SELECT 1 FROM prediction_keys k WHERE k.model_id = :model_id"
    " AND k.client_id = s.client_id)"
)
_PG_UPSERT_PENDING = text(
    "INSERT INTO pending_labels (model_id, client_id, label, received_at)"
    " SELECT :model_id, s.client_id, s.label, :now FROM calmon_label_stage s WHERE NOT EXISTS"
    " (SELECT 1 FROM prediction_keys k WHERE k.model_id = :model_id"
    " AND k.client_id = s.client_id)"
    " ORDER BY s.client_id ON CONFLICT (model_id, client_id)"
    " DO UPDATE SET label = excluded.label, received_at = excluded.received_at"
).bindparams(_NOW)

_HAS_PENDING = text("SELECT 1 FROM pending_labels WHERE model_id = :model_id LIMIT 1")

_APPLY_PENDING = text(
    "UPDATE predictions SET label = pl.label, labelled_at = pl.received_at, changed_at = :now"
    " FROM pending_labels pl"
    " WHERE pl.model_id = :model_id AND predictions.model_id = :model_id"
    " AND predictions.client_id = pl.client_id AND predictions.label IS NULL"
    " AND pl.client_id IN (SELECT client_id FROM calmon_prediction_stage)"
).bindparams(_NOW)

_DROP_APPLIED_PENDING = text(
    "DELETE FROM pending_labels WHERE model_id = :model_id"
    " AND client_id IN (SELECT client_id FROM calmon_prediction_stage)"
)

_UNKNOWN_LABEL_IDS = text(
    "SELECT s.client_id FROM calmon_label_stage s WHERE NOT EXISTS"
    " (SELECT 1 FROM predictions p WHERE p.model_id = :model_id AND p.client_id = s.client_id)"
    " ORDER BY s.client_id"
)

_UPDATE_LABELS = (
    text(
        "UPDATE predictions SET label = s.label, labelled_at = :now, changed_at = :now"
        " FROM calmon_label_stage s"
        " WHERE predictions.model_id = :model_id AND predictions.client_id = s.client_id"
        " AND COALESCE(predictions.label, -1) <> s.label RETURNING predictions.ts"
    )
    .bindparams(_NOW)
    .columns(ts=UTCDateTime())
)

_REPEATED_PENDING = text(
    "SELECT count(*) FROM calmon_label_stage s JOIN pending_labels pl"
    " ON pl.model_id = :model_id AND pl.client_id = s.client_id AND pl.label = s.label"
    " WHERE NOT EXISTS"
    " (SELECT 1 FROM predictions p WHERE p.model_id = :model_id AND p.client_id = s.client_id)"
)

_UPSERT_PENDING = text(
    "INSERT INTO pending_labels (model_id, client_id, label, received_at)"
    " SELECT :model_id, s.client_id, s.label, :now FROM calmon_label_stage s WHERE NOT EXISTS"
    " (SELECT 1 FROM predictions p WHERE p.model_id = :model_id AND p.client_id = s.client_id)"
    " ORDER BY s.client_id ON CONFLICT (model_id, client_id)"
    " DO UPDATE SET label = excluded.label, received_at = excluded.received_at"
).bindparams(_NOW)


def _insert_partitioned(connection: Connection, params: dict[str, Any], days: set[date]) -> int:
    """PostgreSQL: insert the staged predictions whose id is new, registry first; returns how
    many.

    Each attempt runs in a savepoint: a plain insert first (every id new, the usual case),
    then on a unique violation the ``ON CONFLICT`` form. An insert that finds a day without
    its partition (this process believed it made, but the batch that made it rolled back, or
    it was dropped since) makes it and tries once more.
    """
    statements = [_PG_INSERT_ALL_OR_FAIL, _PG_INSERT_NEW_ONLY]
    retried = False
    while statements:
        try:
            with connection.begin_nested():
                return int(connection.execute(statements[0], params).rowcount)
        except IntegrityError as exc:
            state = getattr(exc.orig, "sqlstate", None)
            if state == UNIQUE_VIOLATION and len(statements) == 2:
                statements.pop(0)
            elif state == CHECK_VIOLATION and not retried:
                retried = True
                forget(connection)
                ensure_days(connection, days)
            else:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


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
    session: Session, *, model: Model, rows: Sequence[PredictionRow], now: datetime
) -> PredictionsResult:
    """Store the new predictions of a batch and apply pending labels to them.

    Raises :class:`ConflictError` (details ``[{"id": ...}]``, sorted) when some id is already
    stored, or repeated in the batch, with other content; the caller must then roll back.
    """
    if not rows:
        return PredictionsResult(new=0, duplicates=0, pending_labels_applied=0)
    connection = session.connection()
    params: dict[str, Any] = {"model_id": model.id, "now": now}
    stamps = [row[1] for row in rows]
    if connection.dialect.name == "postgresql":
        result = _ingest_partitioned(connection, params, rows)
        record_stored_predictions(
            connection, model=model, stamps=stamps, stored=result.new, now=now
        )
        return result
    _lock_model(connection, model.id, exclusive=False)
    _load_stage(connection, prediction_stage, rows)
    new = int(connection.execute(_INSERT_NEW_ONLY, params).rowcount)
    if new < len(rows):
        conflicting = connection.execute(_CONFLICTING_IDS, params).scalars().all()
        _raise_conflicts(conflicting, rows)
    applied = 0
    if new and connection.execute(_HAS_PENDING, params).first() is not None:
        applied = connection.execute(_APPLY_PENDING, params).rowcount
        connection.execute(_DROP_APPLIED_PENDING, params)
    record_stored_predictions(connection, model=model, stamps=stamps, stored=new, now=now)
    return PredictionsResult(new=new, duplicates=len(rows) - new, pending_labels_applied=applied)


def _raise_conflicts(conflicting: Sequence[str], rows: Sequence[PredictionRow]) -> None:
    if conflicting:
        raise ConflictError(
            "prediction_conflict",
            _conflict_message(conflicting, rows),
            [{"id": client_id} for client_id in conflicting],
        )


def _ingest_partitioned(
    connection: Connection, params: dict[str, Any], rows: Sequence[PredictionRow]
) -> PredictionsResult:
    """:func:`ingest_predictions` on PostgreSQL: the partitions of the batch's days are made
    if missing (before any lock of the batch), then ids go into the registry and rows into
    their day partitions in one statement."""
    seconds = [row[1].timestamp() for row in rows]
    days = {_EPOCH_DAY + timedelta(days=int(s // 86_400)) for s in seconds}
    ensure_days(connection, days)
    _lock_model(connection, params["model_id"], exclusive=False)
    _load_stage(connection, prediction_stage, rows)
    new = _insert_partitioned(connection, params, days)
    if new < len(rows):
        lo, hi = connection.execute(_PG_STORED_RANGE, params).one()
        if lo is not None:
            conflicting = (
                connection.execute(_PG_CONFLICTING_IDS, {**params, "lo": lo, "hi": hi})
                .scalars()
                .all()
            )
            _raise_conflicts(conflicting, rows)
    applied = 0
    if new and connection.execute(_HAS_PENDING, params).first() is not None:
        bounds = {
            "lo": datetime.fromtimestamp(min(seconds), UTC),
            "hi": datetime.fromtimestamp(max(seconds), UTC),
        }
        applied = connection.execute(_PG_APPLY_PENDING, {**params, **bounds}).rowcount
        connection.execute(_DROP_APPLIED_PENDING, params)
    return PredictionsResult(new=new, duplicates=len(rows) - new, pending_labels_applied=applied)


def ingest_labels(
    session: Session, *, model: Model, labels: Sequence[LabelIn], now: datetime
) -> LabelsResult:
    """Apply a batch of labels; ids without a prediction become pending labels."""
    latest = {item["id"]: item["label"] for item in labels}
    if not latest:
        return LabelsResult(updated=0, unchanged=0, pending=[], pending_changed=0)
    connection = session.connection()
    params: dict[str, Any] = {"model_id": model.id, "now": now}
    partitioned = connection.dialect.name == "postgresql"
    find_unknown = _PG_UNKNOWN_LABEL_IDS if partitioned else _UNKNOWN_LABEL_IDS
    _load_stage(connection, label_stage, list(latest.items()))
    unknown = connection.execute(find_unknown, params).scalars().all()
    if unknown:
        _lock_model(connection, model.id, exclusive=True)
    if partitioned:
        changed: Sequence[datetime] = []
        lo, hi = connection.execute(_PG_LABELLED_RANGE, params).one()
        if lo is not None:
            bounds = {**params, "lo": lo, "hi": hi}
            connection.execute(_PG_LOCK_LABELLED, bounds)
            changed = connection.execute(_PG_UPDATE_LABELS, bounds).scalars().all()
    else:
        changed = connection.execute(_UPDATE_LABELS, params).scalars().all()
    updated = len(changed)
    record_changes(connection, model=model, stamps=changed, now=now)
    pending_changed = 0
    if unknown:
        unknown = connection.execute(find_unknown, params).scalars().all()
        if unknown:
            repeated = connection.execute(
                _PG_REPEATED_PENDING if partitioned else _REPEATED_PENDING, params
            ).scalar_one()
            pending_changed = len(unknown) - int(repeated)
            connection.execute(_PG_UPSERT_PENDING if partitioned else _UPSERT_PENDING, params)
    return LabelsResult(
        updated=updated,
        unchanged=len(latest) - updated - len(unknown),
        pending=list(unknown),
        pending_changed=pending_changed,
    )
