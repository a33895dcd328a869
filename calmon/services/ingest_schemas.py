"""Request schemas of ingestion: the types of a prediction's and a label's fields, the batch
bodies as TypedDicts with their TypeAdapters, and :class:`EventSchema`, which bounds event times
by the server's clock.

Bodies are validated straight from JSON by pydantic's core; what a valid field is, and the error
each invalid one gives, is in ``docs/reference/api.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, Final, Generic, NotRequired, TypeVar, cast

from pydantic import (
    ConfigDict,
    Field,
    GetPydanticSchema,
    TypeAdapter,
    WithJsonSchema,
    with_config,
)
from pydantic_core import PydanticKnownError, SchemaValidator, core_schema
from typing_extensions import TypedDict

from calmon.names import SEGMENT_PATTERN
from calmon.services.retention_bound import retention_cutoff
from calmon.timeline import EPOCH, iso

MAX_BATCH: Final = 10_000
#: 1 to 128 characters, none of them a control character (C0, DEL or C1)
CLIENT_ID_PATTERN: Final = r"^[^\x00-\x1f\x7f-\x9f]{1,128}$"
#: how far an event time may lie past the server's clock (other hosts' clocks run ahead)
FUTURE_TOLERANCE: Final = timedelta(days=1)

T = TypeVar("T")

# The examples are what documentation tools (ReDoc, Swagger UI) show in their samples.
ClientId = Annotated[
    str, Field(max_length=128, pattern=CLIENT_ID_PATTERN, json_schema_extra={"examples": ["tx-1"]})
]
Segment = Annotated[
    str, Field(pattern=SEGMENT_PATTERN, json_schema_extra={"examples": ["country=FR"]})
]
#: 0 or 1; JSON booleans are refused, and so is ``0.0`` (the schema says it with an enum)
Label = Annotated[int, Field(strict=True, ge=0, le=1, json_schema_extra={"enum": [0, 1]})]
#: the schema of a batch cannot depend on the model, so it says the [0, 1] bound in words
Score = Annotated[
    float,
    Field(
        allow_inf_nan=False,
        description="finite; in [0, 1] when the model's `score_kind` is `probability`",
        json_schema_extra={"examples": [0.93]},
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
#: an event time: an :data:`Instant` not before the epoch; the bounds that move with the clock
#: (and the retention period) are added by :class:`EventSchema`
Timestamp = Annotated[
    datetime,
    GetPydanticSchema(lambda _type, _handler: _instant_schema(ge=EPOCH)),
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "description": "event time with an offset, from the server's clock minus the "
            "retention period (`CALMON_RETENTION_DAYS`; 1970-01-01T00:00:00Z when retention is "
            "off) to one day after the server's clock",
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


def earliest_timestamp(now: datetime, retention_days: int) -> datetime:
    """The earliest event time of a prediction taken when the server's clock reads ``now``:
    ``now - retention_days`` to the second below (retention would expire anything earlier at
    its next run, and on PostgreSQL make a day partition for it in vain), or the epoch when
    retention is off (0 days)."""
    cutoff = retention_cutoff(now=now, retention_days=retention_days)
    if cutoff is None:
        return EPOCH
    return max(EPOCH, cutoff.replace(microsecond=0))


def check_event_time(moment: datetime, now: datetime) -> None:
    """Refuse an event time out of ``[EPOCH, latest_timestamp(now)]`` with the
    error pydantic gives a batch item out of that range (for validators of single values)."""
    if moment < EPOCH:
        raise PydanticKnownError("greater_than_equal", {"ge": iso(EPOCH)})
    latest = latest_timestamp(now)
    if moment > latest:
        raise PydanticKnownError("less_than_equal", {"le": iso(latest)})


def _bounded(node: Any, earliest: datetime, latest: datetime) -> Any:
    """A copy of a core schema in which every datetime lies in ``[earliest, latest]``."""
    if isinstance(node, dict):
        copied = {key: _bounded(value, earliest, latest) for key, value in node.items()}
        if copied.get("type") == "datetime":
            copied["ge"] = earliest
            copied["le"] = latest
        return copied
    if isinstance(node, list):
        return [_bounded(item, earliest, latest) for item in node]
    return node


class EventSchema(Generic[T]):
    """The schema of ``adapter`` with every instant in ``[earliest_timestamp(now, retention),
    latest_timestamp(now)]``.

    Those bounds move with the clock, so the validator carrying them is rebuilt from the
    adapter's core schema each time they move to the next second (some 20 µs). Pydantic's core
    then checks every item's time in the same pass as its other fields, at no cost per item,
    and an instant out of range is reported like any other invalid field
    (``greater_than_equal`` or ``less_than_equal`` at ``predictions[i].timestamp``, the bound
    in the message). Only for schemas without pydantic models, which would bring their own
    validator.
    """

    def __init__(self, adapter: TypeAdapter[T]) -> None:
        self.adapter = adapter
        self._built: tuple[datetime, datetime, SchemaValidator] | None = None

    def at(self, now: datetime, *, retention_days: int) -> Callable[[bytes], T]:
        """The JSON validator in force when the server's clock reads ``now`` and predictions
        are kept ``retention_days`` (0: for ever)."""
        earliest, latest = earliest_timestamp(now, retention_days), latest_timestamp(now)
        built = self._built
        if built is None or built[0] != earliest or built[1] != latest:
            schema = _bounded(self.adapter.core_schema, earliest, latest)
            built = (earliest, latest, SchemaValidator(schema))
            self._built = built
        validator = built[2]

        def validate(body: bytes) -> T:
            return cast(T, validator.validate_json(body))

        return validate


PREDICTIONS = EventSchema(PREDICTION_BATCH)
PROBABILITY_PREDICTIONS = EventSchema(PROBABILITY_PREDICTION_BATCH)


def predictions_schema(
    score_kind: str,
) -> EventSchema[PredictionBatch] | EventSchema[ProbabilityPredictionBatch]:
    """The schema of a prediction batch for a model whose scores are ``score_kind``
    (probabilities must lie in [0, 1]; scores may be any finite number)."""
    return PROBABILITY_PREDICTIONS if score_kind == "probability" else PREDICTIONS
