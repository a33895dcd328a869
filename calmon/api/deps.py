"""Dependencies shared by routes: settings, database sessions, scopes, JSON body, model.

Routes that write take :data:`SessionDep`; routes that only read take :data:`ReadSessionDep`
(on SQLite its transactions do not take the write lock).

Scopes: ``read`` (GET models and windows), ``write`` (predictions and labels), ``admin`` (PUT
models, recompute) which implies ``read`` and ``write``. A bearer token is compared with every
configured token in constant time, as bytes: the header's bytes as the client sent them against
the configured token in UTF-8, so a token outside ASCII works as it does in the web view's login
form. With no token configured every request is allowed (the
commands then only bind loopback addresses). Routes declare their scope with
``Security(authorize, scopes=[...])`` over :data:`bearer` (FastAPI's ``HTTPBearer``), so the
OpenAPI document names the scheme and the scope of each operation.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import Depends, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer, SecurityScopes
from sqlalchemy.orm import Session, sessionmaker

from calmon.api.errors import ApiError
from calmon.api.middleware import remember_body
from calmon.api.openapi import BEARER
from calmon.api.ratelimit import RateLimiter
from calmon.clock import Clock
from calmon.db.models import Model
from calmon.db.session import session_deadline
from calmon.names import MODEL_NAME_PATTERN
from calmon.services.ingest_arrow import ARROW_MEDIA_TYPE, arrow_available
from calmon.services.model_registry import ModelCache, get_model
from calmon.services.retention_bound import RetentionBound
from calmon.settings import Settings

IMPLIED_SCOPES: Final[dict[str, frozenset[str]]] = {
    "admin": frozenset({"admin", "read", "write"}),
    "read": frozenset({"read"}),
    "write": frozenset({"write"}),
}
JSON_MEDIA_TYPES: Final = frozenset({"application/json"})
#: seconds a request's database work may run past the statement timeout before it is cut
REQUEST_DEADLINE_MARGIN: Final = 2.0

#: the bearer credential of every ``/v1`` route; absent or malformed, it is None and
#: :func:`authorize` answers (tokens may not be configured, so the scheme is optional)
bearer: Final = HTTPBearer(
    auto_error=False,
    scheme_name=BEARER,
    description="a token of `CALMON_API_TOKENS`, with the scope the route needs (`read`, "
    "`write` or `admin`); without configured tokens the API is open and listens on loopback "
    "only",
)


def get_app_settings(request: Request) -> Settings:
    """The settings the application was built with."""
    settings: Settings = request.app.state.settings
    return settings


def get_clock(request: Request) -> Clock:
    """The clock the application was built with: where routes read the current instant."""
    clock: Clock = request.app.state.clock
    return clock


def get_retention(request: Request) -> RetentionBound:
    """The retention period of the database as this process reads it (cached)."""
    retention: RetentionBound = request.app.state.retention
    return retention


def get_model_cache(request: Request) -> ModelCache:
    """The copies of models this process keeps for prediction batches (checked under lock by
    each batch that uses one)."""
    models: ModelCache = request.app.state.models
    return models


def _session(request: Request, factory: sessionmaker[Session]) -> Iterator[Session]:
    settings: Settings = request.app.state.settings
    deadline = settings.db_statement_timeout + REQUEST_DEADLINE_MARGIN
    with factory() as session, session_deadline(session, deadline):
        yield session


def get_session(request: Request) -> Iterator[Session]:
    """A session for this request; routes commit once, anything uncommitted is rolled back.

    Its database work is bounded by the statement timeout plus a margin, even when the server
    stops answering without closing the connection.
    """
    yield from _session(request, request.app.state.session_factory)


def get_read_session(request: Request) -> Iterator[Session]:
    """A session for a request that only reads (GET routes, the web view), bounded as
    :func:`get_session`'s. On SQLite it never waits for the write lock
    (:func:`calmon.db.session.read_only`): reads go on while ingestion or the scheduler writes."""
    yield from _session(request, request.app.state.read_session_factory)


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
ClockDep = Annotated[Clock, Depends(get_clock)]
RetentionDep = Annotated[RetentionBound, Depends(get_retention)]
ModelCacheDep = Annotated[ModelCache, Depends(get_model_cache)]
SessionDep = Annotated[Session, Depends(get_session)]
ReadSessionDep = Annotated[Session, Depends(get_read_session)]
ModelName = Annotated[str, Path(pattern=MODEL_NAME_PATTERN, description="model name")]


def header_bytes(value: str) -> bytes:
    """The bytes a client sent in a header: the ASGI server hands them over as Latin-1 text,
    one character per byte, whatever their encoding (UTF-8 for curl and browsers)."""
    return value.encode("latin-1")


def bearer_credential(request: Request) -> bytes:
    """The credential of the request's ``Authorization: Bearer`` header as sent, or b""."""
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    return header_bytes(credential.strip()) if scheme.lower() == "bearer" else b""


def granted_scopes(scopes: frozenset[str]) -> frozenset[str]:
    """``scopes`` with the scopes they imply (``admin``: ``read`` and ``write``)."""
    return frozenset().union(*(IMPLIED_SCOPES[scope] for scope in scopes))


def matched_token(
    tokens: list[tuple[bytes, frozenset[str]]], credential: bytes
) -> tuple[int, frozenset[str]]:
    """The position of ``credential`` among the configured tokens (-1 if none) and its scopes;
    every configured token is compared, in constant time each."""
    granted: frozenset[str] = frozenset()
    position = -1
    for index, (token, scopes) in enumerate(tokens):
        if hmac.compare_digest(token, credential):
            granted = granted | scopes
            position = index
    return position, granted_scopes(granted)


def _check_rate(request: Request, key: int) -> None:
    limiter: RateLimiter | None = request.app.state.write_limiter
    if limiter is None:
        return
    wait = limiter.retry_after(key)
    if wait is not None:
        raise ApiError(
            429,
            "too_many_requests",
            f"too many write requests; retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )


def authorize(
    request: Request,
    security_scopes: SecurityScopes,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    """Let the request through only with a token holding the scope of its route (the one scope
    of ``Security(authorize, scopes=[...])``); with no token configured, let every request
    through. A ``write`` request also counts against its token's write rate.

    401 with ``WWW-Authenticate`` for a missing, malformed or unknown token; 403 for a known
    token without the scope.
    """
    (scope,) = security_scopes.scopes
    tokens: list[tuple[bytes, frozenset[str]]] = request.app.state.tokens
    if not tokens:
        if scope == "write":
            _check_rate(request, -1)
        return
    challenge = {"WWW-Authenticate": 'Bearer realm="calmon"'}
    credential = credentials.credentials.strip() if credentials is not None else ""
    if not credential:
        raise ApiError(401, "unauthorized", "a bearer token is required", headers=challenge)
    position, scopes = matched_token(tokens, header_bytes(credential))
    if not scopes:
        raise ApiError(401, "unauthorized", "unknown bearer token", headers=challenge)
    if scope not in scopes:
        raise ApiError(
            403,
            "forbidden",
            f"this token lacks the {scope!r} scope; the server's CALMON_API_TOKENS gives a"
            f" token its scopes (TOKEN:{scope}, or TOKEN:admin for every scope)",
        )
    if scope == "write":
        _check_rate(request, position)


async def json_body(request: Request) -> bytes:
    """The raw body of a JSON request (415 for another media type; 413 past the size limit),
    also left in the scope for the rejection count
    (:func:`~calmon.api.middleware.remember_body`)."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in JSON_MEDIA_TYPES:
        raise ApiError(
            415,
            "unsupported_media_type",
            "the body must be application/json",
            [{"field": "Content-Type", "message": f"got {media_type or 'nothing'!r}"}],
        )
    body = await request.body()
    remember_body(request.scope, body)
    return body


#: what an HTML form, or a page without a CORS preflight, can send
FORM_MEDIA_TYPES: Final = frozenset(
    {"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"}
)


def no_form_body(request: Request) -> None:
    """415 for a form media type on a route that takes no body: a form another site's page
    submits (a browser that sends no ``Origin`` included) reaches nothing."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type in FORM_MEDIA_TYPES:
        raise ApiError(
            415,
            "unsupported_media_type",
            "this request takes no body, and no form",
            [{"field": "Content-Type", "message": f"got {media_type!r}"}],
        )


@dataclass(frozen=True, slots=True)
class BatchBody:
    """The raw body of an ingestion request: JSON, or an Arrow IPC stream (``arrow``)."""

    content: bytes
    arrow: bool


async def batch_body(request: Request) -> BatchBody:
    """The raw body of a batch: ``application/json`` or, where pyarrow is installed,
    ``application/vnd.apache.arrow.stream`` (415 for any other media type, and for Arrow
    without pyarrow; 413 past the size limit). Left in the scope as :func:`json_body` does."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == ARROW_MEDIA_TYPE:
        if not arrow_available():
            raise ApiError(
                415,
                "unsupported_media_type",
                "this server cannot read Arrow streams: pyarrow is not installed (the"
                " calmon[arrow] extra); send application/json",
                [{"field": "Content-Type", "message": f"got {media_type!r}"}],
            )
        body = await request.body()
        remember_body(request.scope, body)
        return BatchBody(body, arrow=True)
    if media_type not in JSON_MEDIA_TYPES:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"the body must be application/json or {ARROW_MEDIA_TYPE}",
            [{"field": "Content-Type", "message": f"got {media_type or 'nothing'!r}"}],
        )
    return BatchBody(await json_body(request), arrow=False)


JsonBody = Annotated[bytes, Depends(json_body)]
BatchBodyDep = Annotated[BatchBody, Depends(batch_body)]
NoFormBody = Depends(no_form_body)
ReadScope = Security(authorize, scopes=["read"])
WriteScope = Security(authorize, scopes=["write"])
AdminScope = Security(authorize, scopes=["admin"])


def existing_model(session: Session, name: str, *, share_lock: bool = False) -> Model:
    """The model called ``name``, or 404; with ``share_lock``, its row is locked ``FOR SHARE``
    until the transaction ends (see :func:`calmon.services.model_registry.get_model`).

    Routes call it where they need the model rather than take it as a dependency: writes look
    the model up inside the work :func:`~calmon.api.transactions.in_transaction` runs again
    after a rollback (which drops the share lock), and reads after their own checks of the
    query (a dependency would run before the query is validated, answering 404 where a bad
    query now gets 422)."""
    model = get_model(session, name=name, share_lock=share_lock)
    if model is None:
        raise ApiError(404, "model_not_found", f"no model named {name!r}")
    return model
