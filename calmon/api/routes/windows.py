"""Window routes: ``GET /v1/models/{model}/windows``, ``GET …/calibration`` and
``POST …/recompute``.

Records are served as stored (``docs/reference/scheduler.md``, "The record"), paged. Recompute only
marks windows and answers 202: the scheduler computes them at its next tick. Instants are ISO 8601
text with an offset (a number would be read as Unix time, without one); a range is cut to
where windows can be (``docs/reference/api.md``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Final, Literal

import orjson
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from calmon.api.deps import (
    AdminScope,
    ClockDep,
    ModelName,
    NoFormBody,
    ReadScope,
    ReadSessionDep,
    SessionDep,
    existing_model,
)
from calmon.api.errors import field_error
from calmon.api.openapi import MODEL_ERRORS, error_responses
from calmon.api.schemas import CalibrationOut
from calmon.api.transactions import in_transaction
from calmon.db.models import Model
from calmon.names import ALL_SEGMENTS, SEGMENT_OR_ALL_PATTERN
from calmon.records import WindowPage
from calmon.services.advice import calibration_of
from calmon.services.ingest_schemas import Instant
from calmon.services.windows.results import (
    MAX_PAGE,
    MAX_RECOMPUTE_WINDOWS,
    TooManyWindowsError,
    decode_cursor,
    list_window_results,
    request_recompute,
)
from calmon.timeline import EPOCH, iso, window_length

router = APIRouter(prefix="/v1/models", tags=["windows"])

DEFAULT_PAGE = 100
_FIRST_UTC = datetime.min.replace(tzinfo=UTC)
_LAST_UTC = datetime.max.replace(tzinfo=UTC)
#: the cursors this API gives: seconds of a window start (years 1653 to 5138 here), a colon
#: and a segment; a subset of what :func:`decode_cursor` reads
CURSOR_PATTERN: Final = r"^(-?[0-9]{1,10}|[0-9]{11}):[^\x00]+$"


class WindowSpan(BaseModel):
    """One window: its start and end (UTC)."""

    start: str
    end: str


class RecomputeOut(BaseModel):
    """The windows marked for recomputation (those in the range that ended and hold
    predictions); the scheduler computes them at its next tick."""

    status: Literal["pending"]
    windows: list[WindowSpan]


def _check_range(start: datetime | None, end: datetime | None) -> None:
    if start is not None and end is not None and start >= end:
        raise field_error("end", "end must be after start")


def _within_utc(moment: datetime | None) -> datetime | None:
    """``moment``, or the first or last instant representable in UTC when it lies beyond."""
    return None if moment is None else min(max(moment, _FIRST_UTC), _LAST_UTC)


@router.get(
    "/{model}/windows",
    summary="Read computed windows",
    dependencies=[ReadScope],
    response_model=WindowPage,
    responses=MODEL_ERRORS,
)
def read_windows(
    model: ModelName,
    session: ReadSessionDep,
    start: Annotated[
        Instant | None,
        Query(description="windows ending after this instant (with an offset; before `end`)"),
    ] = None,
    end: Annotated[
        Instant | None,
        Query(description="windows starting before this instant (with an offset; after `start`)"),
    ] = None,
    segment: Annotated[
        str | None,
        Query(pattern=SEGMENT_OR_ALL_PATTERN, description="one segment (`*` = all rows)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    cursor: Annotated[
        str | None,
        Query(
            description="`next_cursor` of the previous page (opaque)",
            json_schema_extra={"pattern": CURSOR_PATTERN},
        ),
    ] = None,
) -> Response:
    """Stored window results overlapping ``[start, end)``, oldest first (``*`` first within
    a window); ``next_cursor`` is set when more records follow.

    The records are served as they were stored when computed (the schema describes them;
    they are not validated again on the way out)."""
    _check_range(start, end)
    start, end = _within_utc(start), _within_utc(end)
    after = None
    if cursor is not None:
        try:
            if "\x00" in cursor:
                raise ValueError(cursor)
            after = decode_cursor(cursor)
        except (ValueError, OverflowError, OSError):
            raise field_error("cursor", "not a cursor of this API") from None
    stored = existing_model(session, model)
    page = list_window_results(
        session,
        model=stored,
        start=start,
        end=end,
        segment=segment,
        after=after,
        limit=limit,
    )
    body = {"windows": page.records, "next_cursor": page.next_cursor}
    return Response(orjson.dumps(body), media_type="application/json")


@router.get(
    "/{model}/calibration",
    summary="Read a window's recalibration map",
    dependencies=[ReadScope],
    response_model=CalibrationOut,
    responses={
        **MODEL_ERRORS,
        **error_responses(
            409,
            descriptions={
                409: "`calibration_unavailable`: the window has no class ratio to move to "
                "(too few labels and no label-free estimate whose label-shift check holds) "
                "or its reference is too small or lacks a class; the message says which"
            },
        ),
    },
)
def read_calibration(
    model: ModelName,
    session: ReadSessionDep,
    request: Request,
    window: Annotated[
        Instant,
        Query(description="an instant of the window (with an offset), e.g. its start"),
    ],
    segment: Annotated[
        str,
        Query(pattern=SEGMENT_OR_ALL_PATTERN, description="one segment (`*` = all rows)"),
    ] = ALL_SEGMENTS,
) -> CalibrationOut:
    """The recalibration map of a computed window: the reference's isotonic calibration
    moved to the window's class ratio (`docs/reference/acting.md`), at most 200 knots. 404
    `window_not_found` when the window has no record for the segment; an instant beyond what
    UTC represents is cut to its bounds, as for the windows."""
    stored = existing_model(session, model)
    moment = _within_utc(window)
    assert moment is not None
    body = calibration_of(
        session,
        model=stored,
        segment=segment,
        moment=moment,
        cache=request.app.state.reference_cache,
    )
    return CalibrationOut.model_validate(body)


@router.post(
    "/{model}/recompute",
    summary="Recompute a range of windows",
    dependencies=[AdminScope, NoFormBody],
    status_code=202,
    responses=MODEL_ERRORS,
)
def recompute_windows(
    model: ModelName,
    session: SessionDep,
    clock: ClockDep,
    start: Annotated[
        Instant,
        Query(description="first instant of the range (with an offset; before `end`)"),
    ],
    end: Annotated[
        Instant,
        Query(
            description="end of the range, excluded (with an offset; after `start`; at most "
            f"{MAX_RECOMPUTE_WINDOWS} windows of the model from the later of `start` and "
            "the epoch to the earlier of `end` and now)"
        ),
    ],
) -> RecomputeOut:
    """Recompute the windows overlapping ``[start, end)`` that have ended and hold
    predictions: they are marked pending at once (202) and computed at the scheduler's next
    tick, even within their grace period."""
    _check_range(start, end)
    now = clock.now()
    start, end = max(start, EPOCH), min(end, now)

    def work() -> tuple[Model, list[datetime]]:
        stored = existing_model(session, model)
        try:
            starts = request_recompute(session, model=stored, start=start, end=end, now=now)
        except TooManyWindowsError as exc:
            raise field_error("end", str(exc)) from None
        return stored, starts

    stored, starts = in_transaction(session, work)
    length = window_length(stored.window)
    return RecomputeOut(
        status="pending",
        windows=[WindowSpan(start=iso(s), end=iso(s + length)) for s in starts],
    )
