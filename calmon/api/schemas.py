"""Response bodies of the API (request bodies are the service schemas)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from calmon.db.models import Model
from calmon.metrics.recalibration import MAX_KNOTS
from calmon.services.model_registry import DURATION_PATTERN, ModelConfig, config_of


class ErrorDetail(TypedDict, total=False):
    """One detail of an error: a field and what is wrong with it (``type`` for validation
    errors), or an ``id`` (conflicting predictions)."""

    field: str
    message: str
    type: str
    id: str


class ErrorInfo(BaseModel):
    """What went wrong: a stable ``code``, a message for people and the details."""

    code: str = Field(description="stable machine-readable code, e.g. `validation_error`")
    message: str
    details: list[ErrorDetail]


class ErrorBody(BaseModel):
    """The body of every error answer."""

    error: ErrorInfo


class ModelOut(ModelConfig):
    """A model: its name, its full configuration (defaults filled in) and when it changed."""

    name: str
    #: shown in its largest exact unit, which may have more digits than the schema of a request
    #: lets through (``6000000m`` is shown as ``100000h``)
    grace: str = Field(pattern=DURATION_PATTERN)
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, model: Model) -> ModelOut:
        """The API view of a stored model."""
        return cls(
            name=model.name,
            created_at=model.created_at,
            updated_at=model.updated_at,
            **dict(config_of(model)),
        )


class ModelList(BaseModel):
    """``GET /v1/models``: every model, by name."""

    models: list[ModelOut]


class PredictionsOut(BaseModel):
    """Outcome of a prediction batch: ``new + duplicates`` is the batch size."""

    new: int
    duplicates: int
    pending_labels_applied: int


class LabelsOut(BaseModel):
    """Outcome of a label batch, over distinct ids (the last label of an id in a batch wins).

    ``pending`` lists the ids that have no prediction yet: their labels are kept and applied
    when the prediction arrives. ``expired`` counts labels of predictions older than the
    retention period, which are ignored.
    """

    updated: int
    unchanged: int
    pending: list[str]
    expired: int = Field(
        0,
        description="labels of predictions older than the retention period "
        "(`CALMON_RETENTION_DAYS`): ignored, their windows are expired or about to be",
    )


class Status(BaseModel):
    """Health answer."""

    status: str
    database: str | None = None
    revision: str | None = None


class CalibrationOut(BaseModel):
    """A window's recalibration map (`docs/reference/acting.md`): the reference's isotonic
    calibration moved to the window's class ratio, as a monotone piecewise-linear map. Apply it with
    one interpolation, clamped at both ends:
    `numpy.interp(scores, [k[0] for k in knots], [k[1] for k in knots])`."""

    model: str = Field(description="the model")
    segment: str = Field(description="the segment, `*` for every prediction")
    start: datetime = Field(description="first instant of the window (UTC)")
    end: datetime = Field(description="end of the window, excluded (UTC)")
    prior: float = Field(description="the class ratio the map is moved to")
    prior_source: Literal["measured", "estimated"] = Field(
        description="`measured` from the window's labels, `estimated` without them (where the "
        "label-shift check holds)"
    )
    reference_prior: float = Field(description="the class ratio of the reference it is fit on")
    method: Literal["isotonic"] = Field(description="how the map was fit on the reference")
    knots: list[tuple[float, float]] = Field(
        max_length=MAX_KNOTS,
        description="`[score, probability]` pairs, scores strictly increasing, probabilities "
        f"nondecreasing; at most {MAX_KNOTS}",
    )
