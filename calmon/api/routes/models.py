"""Model registry routes: ``PUT/GET /v1/models/{model}``, ``GET /v1/models``."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Response

from calmon.api.deps import (
    AdminScope,
    ClockDep,
    JsonBody,
    ModelName,
    ReadScope,
    ReadSessionDep,
    SessionDep,
    SettingsDep,
    existing_model,
)
from calmon.api.errors import parse_json
from calmon.api.openapi import (
    BODY_ERRORS,
    MODEL_ERRORS,
    V1_ERRORS,
    described_error,
    json_request_body,
)
from calmon.api.schemas import ModelList, ModelOut
from calmon.api.transactions import in_transaction
from calmon.services.model_registry import (
    MODEL_CONFIG,
    list_models,
    parse_config,
    put_model,
)

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.put(
    "/{model}",
    summary="Create or replace a model",
    dependencies=[AdminScope],
    status_code=200,
    responses={
        201: {"model": ModelOut, "description": "created"},
        **V1_ERRORS,
        **BODY_ERRORS,
        **described_error(
            409,
            "`model_has_predictions`: `score_kind` or `window` would change on a model that "
            "has predictions; `model_limit`: a new model would exceed `CALMON_MAX_MODELS`",
        ),
    },
    openapi_extra=json_request_body("ModelConfig", MODEL_CONFIG),
    response_model_exclude_none=True,
)
def create_or_replace_model(
    model: ModelName,
    body: JsonBody,
    session: SessionDep,
    settings: SettingsDep,
    clock: ClockDep,
    response: Response,
) -> ModelOut:
    """Create the model (201) or replace its configuration (200); fields left out take their
    defaults, so the same body twice gives the same state."""
    now = clock.now()
    config = parse_json(partial(parse_config, now=now), body)
    stored, created = in_transaction(
        session,
        lambda: put_model(
            session, name=model, config=config, now=now, max_models=settings.max_models
        ),
    )
    if created:
        response.status_code = 201
    return ModelOut.of(stored)


@router.get(
    "/{model}",
    summary="Read a model",
    dependencies=[ReadScope],
    response_model_exclude_none=True,
    responses=MODEL_ERRORS,
)
def read_model(model: ModelName, session: ReadSessionDep) -> ModelOut:
    """One model and its configuration."""
    return ModelOut.of(existing_model(session, model))


@router.get(
    "",
    summary="List the models",
    dependencies=[ReadScope],
    response_model_exclude_none=True,
    responses=V1_ERRORS,
)
def list_all_models(session: ReadSessionDep) -> ModelList:
    """Every model, by name."""
    return ModelList(models=[ModelOut.of(m) for m in list_models(session)])
