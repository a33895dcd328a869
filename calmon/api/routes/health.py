"""Process and readiness probes, and the Prometheus exposition."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from calmon.api.errors import DB_UNAVAILABLE_ERRORS, ApiError
from calmon.api.openapi import described_error
from calmon.api.schemas import Status
from calmon.db.migrate import current_revision, head_revision
from calmon.db.session import read_only
from calmon.instruments import build_scrape_registry

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness probe", response_model_exclude_none=True)
def check_liveness() -> Status:
    """The process answers (does not touch the database)."""
    return Status(status="ok")


@router.get(
    "/readyz",
    summary="Readiness probe",
    responses=described_error(
        503, "`not_ready`: the database is down or not at the expected revision"
    ),
)
def check_readiness(request: Request) -> Status:
    """The database answers and its schema is at the revision this code expects."""
    head = head_revision()
    try:
        with read_only(request.app.state.engine).connect() as connection:
            revision = current_revision(connection)
    except DB_UNAVAILABLE_ERRORS:
        raise ApiError(
            503, "not_ready", "the database is not reachable", headers={"Retry-After": "1"}
        ) from None
    if revision != head:
        raise ApiError(
            503,
            "not_ready",
            f"the database is at revision {revision or 'none'}, expected {head}: "
            "run `calmon migrate`",
            [{"field": "revision", "message": f"current {revision}, expected {head}"}],
        )
    return Status(status="ok", database="ok", revision=revision)


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    """Prometheus text exposition: service metrics and registered collectors."""
    registry = build_scrape_registry(request.app.state.scrape_collectors)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
