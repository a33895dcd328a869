"""Ingestion routes: ``POST /v1/models/{model}/predictions`` and ``…/labels``.

Bodies are read raw and validated in one pass by pydantic's Rust JSON parser. A batch is all
or nothing: any invalid item (422, with ``predictions[i].field``; a timestamp before the
retention period stored in the database (:mod:`calmon.services.retention_bound`), or the epoch
when retention is off, or more than a day past the server's clock is invalid) or conflicting
id (409) and nothing of it is stored. A prediction batch holds its model's row ``FOR SHARE``
from the moment it reads ``score_kind`` to its commit, so a configuration change waits for it
(or it for the change). Each request's work runs in
:func:`calmon.api.transactions.in_transaction`, which runs it again when the database aborts it
for a concurrent transaction.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter

from calmon import instruments
from calmon.api.deps import (
    BatchBody,
    BatchBodyDep,
    ClockDep,
    ModelCacheDep,
    ModelName,
    RetentionDep,
    SessionDep,
    WriteScope,
    existing_model,
)
from calmon.api.errors import ApiError, parse_json
from calmon.api.openapi import WRITE_ERRORS, arrow_request_body, described_error
from calmon.api.schemas import LabelsOut, PredictionsOut
from calmon.api.transactions import in_transaction
from calmon.services.ingest import (
    LabelsResult,
    PredictionsResult,
    ingest_labels,
    ingest_predictions,
)
from calmon.services.ingest_arrow import (
    ARROW_MEDIA_TYPE,
    describe_columns,
    read_labels,
    read_predictions,
)
from calmon.services.ingest_batches import LabelColumns, PredictionColumns, prediction_columns
from calmon.services.ingest_schemas import (
    LABEL_BATCH,
    PREDICTION_BATCH,
    LabelIn,
    earliest_timestamp,
    predictions_schema,
)
from calmon.services.model_registry import ModelChangedError

router = APIRouter(prefix="/v1/models", tags=["ingestion"])


@router.post(
    "/{model}/predictions",
    summary="Send predictions",
    dependencies=[WriteScope],
    openapi_extra=arrow_request_body(
        "PredictionBatch", PREDICTION_BATCH, ARROW_MEDIA_TYPE, describe_columns("predictions")
    ),
    responses={
        **WRITE_ERRORS,
        **described_error(
            409,
            "`prediction_conflict`: ids stored, or sent twice, with other content; details "
            "name them",
        ),
    },
)
def send_predictions(
    model: ModelName,
    body: BatchBodyDep,
    session: SessionDep,
    retention: RetentionDep,
    clock: ClockDep,
    models: ModelCacheDep,
) -> PredictionsOut:
    """Store up to 10,000 predictions (JSON) or 100,000 (an Arrow IPC stream); exact repeats
    of stored ones are counted, not stored."""
    now = clock.now()
    monotonic = clock.monotonic()

    def work() -> PredictionsResult:
        days = retention.read(session, now=now, monotonic=monotonic).days
        cached = models.get(model)
        if cached is not None:
            try:
                batch = _predictions(
                    body, score_kind=cached.score_kind, now=now, retention_days=days
                )
                return ingest_predictions(
                    session, model=cached, rows=batch, now=now, confirm_model=True
                )
            except (ApiError, ModelChangedError):
                # validated against a copy that may be out of date: judge it by the stored model
                models.forget(model)
                session.rollback()
        stored = existing_model(session, model, share_lock=True)
        batch = _predictions(body, score_kind=stored.score_kind, now=now, retention_days=days)
        result = ingest_predictions(session, model=stored, rows=batch, now=now)
        models.put(stored)
        return result

    result = in_transaction(session, work)
    instruments.PREDICTIONS_INGESTED.labels(model).inc(result.new)
    instruments.PREDICTIONS_DUPLICATE.labels(model).inc(result.duplicates)
    return PredictionsOut(
        new=result.new,
        duplicates=result.duplicates,
        pending_labels_applied=result.pending_labels_applied,
    )


@router.post(
    "/{model}/labels",
    summary="Send labels",
    dependencies=[WriteScope],
    openapi_extra=arrow_request_body(
        "LabelBatch", LABEL_BATCH, ARROW_MEDIA_TYPE, describe_columns("labels")
    ),
    responses=WRITE_ERRORS,
)
def send_labels(
    model: ModelName,
    body: BatchBodyDep,
    session: SessionDep,
    retention: RetentionDep,
    clock: ClockDep,
) -> LabelsOut:
    """Label up to 10,000 predictions (JSON) or 100,000 (an Arrow IPC stream); labels of
    unknown ids wait for their prediction, and labels of predictions older than the retention
    period are ignored."""
    now = clock.now()
    monotonic = clock.monotonic()

    def work() -> LabelsResult:
        stored = existing_model(session, model)
        days = retention.read(session, now=now, monotonic=monotonic).days
        earliest = earliest_timestamp(now, days)
        labels = _labels(body)
        return ingest_labels(session, model=stored, labels=labels, now=now, earliest=earliest)

    result = in_transaction(session, work)
    instruments.LABELS_INGESTED.labels(model).inc(result.updated + result.pending_changed)
    return LabelsOut(
        updated=result.updated,
        unchanged=result.unchanged,
        pending=result.pending,
        expired=result.expired,
    )


def _predictions(
    body: BatchBody, *, score_kind: str, now: datetime, retention_days: int
) -> PredictionColumns:
    """The validated columns of a prediction batch, from JSON or from Arrow."""
    if body.arrow:
        return read_predictions(
            body.content,
            probability=score_kind == "probability",
            now=now,
            retention_days=retention_days,
        )
    validate = predictions_schema(score_kind).at(now, retention_days=retention_days)
    return prediction_columns(parse_json(validate, body.content)["predictions"])


def _labels(body: BatchBody) -> LabelColumns | list[LabelIn]:
    """The validated labels of a batch: JSON's items, or an Arrow stream's columns."""
    if body.arrow:
        return read_labels(body.content)
    return parse_json(LABEL_BATCH.validate_json, body.content)["labels"]
