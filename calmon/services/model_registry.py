"""The model registry: configuration schema, create-or-replace, read and list.

A model's configuration is replaced whole by ``PUT``: fields left out take their defaults, so
sending the same body twice gives the same state. ``score_kind`` and ``window`` cannot change
once the model has stored predictions (their windows would mix two meanings); everything else
can change at any time.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, NoReturn, cast

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from calmon.db import locks, model_rows
from calmon.db.backend import has_advisory_locks
from calmon.db.models import Model
from calmon.metrics import MIN_PI0, check_pi0
from calmon.records import Objective
from calmon.services.errors import ConflictError
from calmon.services.ingest_schemas import check_event_time
from calmon.timeline import WINDOW_SECONDS

DURATION_PATTERN: Final = r"^([0-9]{1,7})(s|m|h|d)$"
#: the durations the schema shows for ``grace``: those of :data:`DURATION_PATTERN` that fit
#: in the stored 32-bit count of seconds whatever their digits
GRACE_SCHEMA_PATTERN: Final = r"^([0-9]{1,7}[sm]|[0-9]{1,5}h|[0-9]{1,4}d)$"
#: longest grace, in seconds (the largest 32-bit integer)
MAX_GRACE_SECONDS: Final = 2**31 - 1
DURATION_UNITS: Final[dict[str, int]] = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
MAX_PI0: Final = 5
DEFAULT_DECISION_POSITIVES: Final = 400
MAX_DECISION_POSITIVES: Final = 100_000
DEFAULT_DECISION_SPAN: Final = "7d"
#: the decision pools at least this far back (the window included) when it pools at all: at
#: hourly windows, the span of 400 positives at 20 an hour, so that a week holds about as many
#: distinct pools at any class ratio (``docs/measurements/decisions.md``)
DEFAULT_DECISION_MIN_SPAN: Final = "20h"
MAX_DECISION_SPAN_DAYS: Final = 90
DEFAULT_TRAILING_WINDOWS: Final = 7
#: longest fixed reference period, in the model's windows (it is read a window at a time)
MAX_REFERENCE_WINDOWS: Final = 10_000


def _known_window(name: str) -> str:
    if name not in WINDOW_SECONDS:
        raise ValueError(f"window must be one of {', '.join(WINDOW_SECONDS)}")
    return name


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _sorted_unique_pi0(values: list[float]) -> list[float]:
    if len(set(values)) != len(values):
        raise ValueError("pi0 values must be distinct")
    return sorted(values)


def duration_seconds(text: str) -> int:
    """Seconds in a duration such as ``90s``, ``10m``, ``6h`` or ``2d``."""
    match = re.fullmatch(DURATION_PATTERN, text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match.group(1)) * DURATION_UNITS[match.group(2)]


def format_duration(seconds: int) -> str:
    """The shortest exact duration text for ``seconds`` (``600`` -> ``10m``, ``0`` -> ``0s``)."""
    for unit, size in DURATION_UNITS.items():
        if seconds % size == 0 and (seconds > 0 or unit == "s"):
            return f"{seconds // size}{unit}"
    raise AssertionError("unreachable")  # pragma: no cover


#: one π0, checked by the metric engine's own validator; the schema shows the values it takes
#: (from MIN_PI0, below which the calibration ratio could overflow, to 1 excluded)
Pi0 = Annotated[
    float,
    AfterValidator(check_pi0),
    Field(json_schema_extra={"minimum": MIN_PI0, "exclusiveMaximum": 1.0}),
]


def _reference_schema(schema: dict[str, Any]) -> None:
    """Say the rules between the fields of a reference, which a plain object schema cannot:
    one schema per kind (the order of ``start`` and ``end`` and how many windows they span
    stay in the description)."""
    properties = schema.pop("properties")
    nothing = {"type": "null"}
    schema["oneOf"] = [
        {
            "title": "TrailingReference",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "kind": {"const": "trailing", "default": "trailing"},
                "windows": properties["windows"],
                "start": nothing,
                "end": nothing,
            },
        },
        {
            "title": "FixedReference",
            "type": "object",
            "additionalProperties": False,
            "required": ["kind", "start", "end"],
            "properties": {
                "kind": {"const": "fixed"},
                "windows": nothing,
                "start": {
                    "type": "string",
                    "format": "date-time",
                    "description": "with an offset, before `end`, where event times may lie",
                },
                "end": {
                    "type": "string",
                    "format": "date-time",
                    "description": f"with an offset, after `start`, at most "
                    f"{MAX_REFERENCE_WINDOWS} of the model's windows later",
                },
            },
        },
    ]
    schema.pop("additionalProperties", None)
    schema["type"] = "object"
    schema["properties"] = {
        "kind": {**properties["kind"], "enum": ["trailing", "fixed"]},
        "windows": properties["windows"],
        "start": properties["start"],
        "end": properties["end"],
    }


class ReferenceConfig(BaseModel):
    """How the reference set of a model is chosen.

    ``{"kind": "trailing", "windows": K}``: the K windows before the evaluated one, pooled
    (``DEFAULT_TRAILING_WINDOWS`` when left out). ``{"kind": "fixed", "start": …, "end": …}``:
    the predictions with ``start <= timestamp < end`` (both with an offset, start first; in a
    request, both where event times may lie).
    """

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, json_schema_extra=_reference_schema
    )

    kind: Literal["trailing", "fixed"] = Field(
        default="trailing",
        description="`trailing`: the windows before the evaluated one; `fixed`: a period",
    )
    windows: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="trailing windows pooled (default 7); only for `trailing`",
    )
    start: AwareDatetime | None = Field(
        default=None, description="first instant of a `fixed` reference period (with an offset)"
    )
    end: AwareDatetime | None = Field(
        default=None,
        description="end of a `fixed` reference period, excluded (with an offset, after `start`)",
    )

    @field_validator("start", "end")
    @classmethod
    def _event_time(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        now = info.context.get("now") if isinstance(info.context, dict) else None
        if value is not None and isinstance(now, datetime):
            check_event_time(value, now)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ReferenceConfig:
        if self.kind == "trailing":
            if self.start is not None or self.end is not None:
                raise ValueError("a trailing reference takes no start or end")
            return self
        if self.windows is not None:
            raise ValueError("a fixed reference takes no windows")
        if self.start is None or self.end is None:
            raise ValueError("a fixed reference needs start and end")
        if self.start >= self.end:
            raise ValueError("reference start must be before its end")
        return self


class DecisionConfig(BaseModel):
    """How a window's pooled decision pools (``docs/reference/metrics.md``, "Decisions at few
    positives"): a window with fewer than ``min_positives`` positives pools the trailing
    windows back until they hold ``min_positives`` positives and span at least ``min_span``,
    over at most ``max_span`` (the window included; the maximum wins over the minimum)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    min_positives: int = Field(
        default=DEFAULT_DECISION_POSITIVES,
        ge=1,
        le=MAX_DECISION_POSITIVES,
        description="positives the pooled windows should hold (400: where the page at few "
        "positives finds a 20% fall of AP within a day at 20 positives an hour, and the "
        "parts of the AP change get intervals from 100 positives)",
    )
    max_span: Annotated[
        str,
        Field(
            pattern=DURATION_PATTERN,
            description=f"how far back the pooled windows reach at most, the window included; "
            f"at least one window, at most {MAX_DECISION_SPAN_DAYS} days",
        ),
    ] = DEFAULT_DECISION_SPAN
    min_span: Annotated[
        str,
        Field(
            pattern=DURATION_PATTERN,
            description=f"how far back a pool reaches at least, the window included, when the "
            f"window alone has too few positives (20h: at hourly windows the number of "
            f"distinct pools a week holds, and so the chances of a false page, no longer grows "
            f"with the class ratio); 0s: the positives alone decide; at most "
            f"{MAX_DECISION_SPAN_DAYS} days, and a pool never reaches beyond max_span",
        ),
    ] = DEFAULT_DECISION_MIN_SPAN


def _one_kind(objective: Objective) -> Objective:
    """An objective (:class:`calmon.records.Objective`) holds exactly one of its kinds."""
    given = [objective.get("target_precision"), objective.get("costs"), objective.get("alert_rate")]
    if sum(value is not None for value in given) != 1:
        raise ValueError("give exactly one of target_precision, costs, alert_rate")
    return objective


def stored_objective(objective: Objective) -> dict[str, Any]:
    """The objective as stored and as the metric engine reads it (its one key)."""
    return {key: value for key, value in objective.items() if value is not None}


class ModelConfig(BaseModel):
    """A model's configuration as ``PUT /v1/models/{model}`` takes it (all fields optional)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    score_kind: Literal["probability", "score"] = "probability"
    window: Annotated[
        str, AfterValidator(_known_window), Field(json_schema_extra={"enum": list(WINDOW_SECONDS)})
    ] = "1h"
    threshold: Annotated[float, AfterValidator(_finite)] = 0.5
    pi0: Annotated[
        list[Pi0],
        Field(
            max_length=MAX_PI0,
            # an example, else documentation tools sample the schema's minimum (4.8e-271)
            json_schema_extra={"uniqueItems": True, "examples": [[0.01, 0.1]]},
        ),
        AfterValidator(_sorted_unique_pi0),
    ] = Field(default_factory=list)
    reference: ReferenceConfig = Field(default_factory=ReferenceConfig)
    grace: Annotated[
        str,
        Field(
            pattern=DURATION_PATTERN,
            description=f"a duration, at most {MAX_GRACE_SECONDS} seconds",
            json_schema_extra={"pattern": GRACE_SCHEMA_PATTERN},
        ),
    ] = "10m"
    max_segments: int = Field(default=20, ge=1, le=1000)
    decision: DecisionConfig = Field(default_factory=DecisionConfig)
    objective: Annotated[Objective, AfterValidator(_one_kind)] | None = Field(
        default=None,
        description="what the advised threshold of each window aims at: "
        '`{"target_precision": p}`, `{"costs": {"false_positive": c, "false_negative": c}}` '
        'or `{"alert_rate": r}`; none: no advice',
    )


MODEL_CONFIG = TypeAdapter(ModelConfig)


def _invalid(field: str, message: str, value: Any, error_type: str = "value_error") -> NoReturn:
    """Raise the validation error of one field, for rules the schema cannot state."""
    raise ValidationError.from_exception_data(
        "ModelConfig",
        [
            InitErrorDetails(
                type=PydanticCustomError(error_type, message), loc=(field,), input=value
            )
        ],
    )


def parse_config(body: bytes, *, now: datetime) -> ModelConfig:
    """A ``PUT`` body as a configuration. Beyond the schema: ``grace`` is at most
    ``MAX_GRACE_SECONDS`` (stored as 32-bit seconds), the decision's spans are at most
    ``MAX_DECISION_SPAN_DAYS`` (``max_span`` at least one window), and a fixed reference's
    ``start`` and ``end`` lie where event times may (from the epoch to a day past ``now``), as
    ingestion requires of predictions, and span at most ``MAX_REFERENCE_WINDOWS`` of the
    model's windows (the reference is read a window at a time); configurations read back from
    the database are not held to these."""
    config = MODEL_CONFIG.validate_json(body, context={"now": now})
    if duration_seconds(config.grace) > MAX_GRACE_SECONDS:
        _invalid("grace", f"at most {MAX_GRACE_SECONDS} seconds", config.grace, "less_than_equal")
    span = duration_seconds(config.decision.max_span)
    if not WINDOW_SECONDS[config.window] <= span <= MAX_DECISION_SPAN_DAYS * 86_400:
        _invalid(
            "decision",
            f"max_span is at least one window ({config.window}) and at most "
            f"{MAX_DECISION_SPAN_DAYS} days",
            config.decision.model_dump(mode="json"),
        )
    if duration_seconds(config.decision.min_span) > MAX_DECISION_SPAN_DAYS * 86_400:
        _invalid(
            "decision",
            f"min_span is at most {MAX_DECISION_SPAN_DAYS} days",
            config.decision.model_dump(mode="json"),
        )
    ref = config.reference
    if ref.kind == "fixed" and ref.start is not None and ref.end is not None:
        windows = (ref.end - ref.start).total_seconds() / WINDOW_SECONDS[config.window]
        if windows > MAX_REFERENCE_WINDOWS:
            _invalid(
                "reference",
                f"a fixed reference spans at most {MAX_REFERENCE_WINDOWS} windows of the model "
                f"({config.window}); this one spans {math.ceil(windows)}",
                ref.model_dump(mode="json"),
            )
    return config


def config_of(model: Model) -> ModelConfig:
    """The configuration stored for ``model``, in the form the API shows it."""
    reference = ReferenceConfig(
        kind=model.reference_kind,  # type: ignore[arg-type]
        windows=model.reference_windows,
        start=model.reference_start,
        end=model.reference_end,
    )
    return ModelConfig(
        score_kind=model.score_kind,  # type: ignore[arg-type]
        window=model.window,
        threshold=model.threshold,
        pi0=list(model.pi0),
        reference=reference,
        grace=format_duration(model.grace_seconds),
        max_segments=model.max_segments,
        decision=decision_of(model.decision),
        objective=None if model.objective is None else cast(Objective, model.objective),
    )


def decision_of(stored: dict[str, Any] | None) -> DecisionConfig:
    """The decision setting as the API shows it from its stored form (None: the defaults; a
    form stored before ``min_span`` existed takes its default)."""
    if stored is None:
        return DecisionConfig()
    return DecisionConfig(
        min_positives=int(stored["min_positives"]),
        max_span=format_duration(int(stored["max_span_seconds"])),
        min_span=format_duration(
            int(stored.get("min_span_seconds", duration_seconds(DEFAULT_DECISION_MIN_SPAN)))
        ),
    )


def _decision_column(config: DecisionConfig) -> dict[str, int] | None:
    """The stored form of the decision setting: None for the defaults (as models created
    before the setting have), else its positives and span in seconds."""
    if config == DecisionConfig():
        return None
    return {
        "min_positives": config.min_positives,
        "max_span_seconds": duration_seconds(config.max_span),
        "min_span_seconds": duration_seconds(config.min_span),
    }


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.astimezone(UTC)


def _columns(config: ModelConfig) -> dict[str, Any]:
    """The stored columns of ``config``; instants in UTC, as they are read back."""
    ref = config.reference
    return {
        "score_kind": config.score_kind,
        "window": config.window,
        "threshold": config.threshold,
        "pi0": list(config.pi0),
        "reference_kind": ref.kind,
        "reference_windows": (
            (ref.windows or DEFAULT_TRAILING_WINDOWS) if ref.kind == "trailing" else None
        ),
        "reference_start": _utc(ref.start),
        "reference_end": _utc(ref.end),
        "grace_seconds": duration_seconds(config.grace),
        "max_segments": config.max_segments,
        "decision": _decision_column(config.decision),
        "objective": None if config.objective is None else stored_objective(config.objective),
    }


def get_model(session: Session, *, name: str, share_lock: bool = False) -> Model | None:
    """The model called ``name``, or None.

    With ``share_lock`` its row is locked ``FOR SHARE`` until the transaction ends, so that its
    configuration cannot change meanwhile: :func:`put_model` locks it ``FOR UPDATE`` and waits.
    Prediction batches take it before validating against ``score_kind``. A lock that had to
    wait reads the row as the other transaction committed it. (SQLite: no row locks; its
    writers are serialised whole.)
    """
    return model_rows.model_named(session, name=name, share_lock=share_lock)


class ModelChangedError(Exception):
    """A model's row, locked ``FOR SHARE`` under a batch, differs from the copy the batch was
    validated against (its configuration changed, or it is gone, since the copy was read):
    the batch must be looked up and validated again."""


class ModelCache:
    """The models this process last read for prediction batches, by name, so that a batch
    need not read its model before validating against it.

    A copy is never trusted alone: the batch that uses one locks the model's row ``FOR SHARE``
    later in the same round trip as its other locks (:func:`calmon.services.ingest.
    ingest_predictions` with ``confirm_model``) and compares id, ``score_kind`` and ``window``
    with the copy; on any difference (a ``PUT`` that changed them, a model created again
    under the name) it raises :class:`ModelChangedError` and the batch runs again from a fresh
    look-up. Copies are ORM objects no longer attached to a session, read and never changed.
    """

    def __init__(self) -> None:
        self._models: dict[str, Model] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Model | None:
        """The copy of the model called ``name``, if any."""
        with self._lock:
            return self._models.get(name)

    def put(self, model: Model) -> None:
        """Keep ``model`` (as just read) as the copy of its name."""
        with self._lock:
            self._models[model.name] = model

    def forget(self, name: str) -> None:
        """Drop the copy of ``name``: the next batch reads the model."""
        with self._lock:
            self._models.pop(name, None)


def list_models(session: Session, *, by_id: bool = False) -> Sequence[Model]:
    """Every model, by name (or by id: the order the scheduler and retention go through them,
    oldest model first)."""
    return model_rows.all_models(session, by_id=by_id)


def put_model(
    session: Session, *, name: str, config: ModelConfig, now: datetime, max_models: int
) -> tuple[Model, bool]:
    """Create the model or replace its configuration; returns it and whether it was created.

    ``updated_at`` moves only when a stored value changes. Raises :class:`ConflictError` when
    ``score_kind`` or ``window`` would change on a model that has predictions, or when a new
    model would make more than ``max_models`` (every model brings its own series).

    Concurrency (PostgreSQL): the model's row is locked ``FOR UPDATE`` before its stored data
    is checked, so a prediction batch, which holds it ``FOR SHARE`` from its validation to its
    commit, is either committed first (and ``score_kind``/``window`` can no longer change) or
    waits and validates against the new configuration. A creation takes a transaction-level
    advisory lock before counting the models, so concurrent creations count one after the
    other and the limit holds. (SQLite serialises writing transactions whole.)
    """
    columns = _columns(config)
    model = model_rows.lock_model_named(session, name=name)
    if model is None:
        if has_advisory_locks(session):
            locks.wait_for(session, locks.REGISTRY)
        if model_rows.count_models(session) >= max_models:
            raise ConflictError(
                "model_limit",
                f"at most {max_models} models may exist (CALMON_MAX_MODELS)",
                [{"field": "model", "limit": max_models}],
            )
        try:
            return model_rows.add_model(session, name=name, now=now, columns=columns), True
        except IntegrityError:
            model = model_rows.lock_model_named(session, name=name)
            if model is None:
                raise
    changed = {key: value for key, value in columns.items() if getattr(model, key) != value}
    frozen = sorted(changed.keys() & {"score_kind", "window"})
    if frozen and model_rows.has_predictions(session, model_id=model.id):
        raise ConflictError(
            "model_has_predictions",
            f"{' and '.join(frozen)} cannot change once the model has predictions; "
            "create a model with another name",
            [{"field": field} for field in frozen],
        )
    if changed:
        for key, value in changed.items():
            setattr(model, key, value)
        model.updated_at = now
        session.flush()
    return model, False
