"""Routes of the web view: ``/`` (redirect), ``/ui``, ``/ui/models/{model}``, ``/ui/login``,
``/ui/logout`` and the package's static files under ``/ui/static``.

Tokens rule (``docs/reference/ui.md``, "Tokens"): with no token configured the pages are open, like
the API. Otherwise a page needs a token with the ``read`` scope as ``Authorization: Bearer``, or
the cookie of a web session that the login form starts (:mod:`calmon.services.web_sessions`): a
random id, never the token, HttpOnly, SameSite=Strict, path ``/ui``, Secure over https. A
session grants ``read`` only, whatever the token's scopes, and is accepted by these pages only,
never by the JSON API, so a browser holding it cannot be made to write. Without access a page
answers 401 with the login form.

Login and logout are POST only, and refused (403) when a browser says the form came from
another site (``Origin``, ``Sec-Fetch-Site``), as every state-changing request is
(:mod:`calmon.api.browser_guard`). Failed logins are limited per client address;
past the limit the form answers 429 whatever the token, so guessing learns nothing more.

Stored windows are read through :mod:`calmon.services.stored_windows`, the reads the exporter
makes too: the model list from ``window_results_latest`` (one row per model and segment, alert
states judged when the window was written), a model's page from its latest windows and the
records of one segment.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, Query, Request, Response, Security
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.security import SecurityScopes
from fastapi.staticfiles import StaticFiles
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from calmon.api.deps import (
    ModelName,
    ReadSessionDep,
    SessionDep,
    bearer_credential,
    get_clock,
    granted_scopes,
    matched_token,
)
from calmon.api.ratelimit import RateLimiter
from calmon.catalogue import CHART_METRIC, REGULAR_METRICS
from calmon.db.models import Model
from calmon.names import ALL_SEGMENTS, SEGMENT_OR_ALL_PATTERN
from calmon.records import WindowRecord
from calmon.services.model_registry import get_model, list_models
from calmon.services.stored_windows import (
    LatestKey,
    LatestWindow,
    last_window_records,
    load_latest_windows,
    load_records,
    model_list_windows,
)
from calmon.services.web_sessions import (
    end_web_session,
    forget_unconfigured_sessions,
    session_scopes,
    start_web_session,
    token_key,
)
from calmon.settings import Settings
from calmon.timeline import window_length
from calmon.ui.pages import ModelSummary, index_page, login_page, model_page, not_found_page
from calmon.ui.verdict import alerts, group_alerts, segment_alerts
from calmon.verdict import is_stale

logger = logging.getLogger("calmon.ui")

STATIC: Final = Path(__file__).resolve().parents[2] / "ui" / "static"
COOKIE: Final = "calmon_ui_session"
#: what a web session may do, whatever the token that started it: the pages only read
SESSION_SCOPES: Final = frozenset({"read"})
#: windows shown by default on a model page, and at most
DEFAULT_LAST: Final = 500
MAX_LAST: Final = 5_000
DEFAULT_METRIC: Final = CHART_METRIC
#: no script, no frame, nothing from another host: the pages are HTML and inline SVG
PAGE_POLICY: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)

router = APIRouter(include_in_schema=False)


def static_files() -> StaticFiles:
    """The package's static files (vendored Swagger UI and ReDoc, the icon)."""
    return StaticFiles(directory=STATIC)


def _html(text: str, status: int = 200) -> HTMLResponse:
    headers = {"Cache-Control": "no-store", "Content-Security-Policy": PAGE_POLICY}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="calmon"'
    return HTMLResponse(text, status_code=status, headers=headers)


def _safe_next(path: str | None) -> str:
    """A page of the web view to go back to after logging in (never another host)."""
    if path and path.startswith("/ui") and not path.startswith("/ui/log") and "\\" not in path:
        return path
    return "/ui"


def read_token_keys(tokens: list[tuple[bytes, frozenset[str]]]) -> list[str]:
    """The session keys of the configured tokens that may read."""
    return [token_key(token) for token, scopes in tokens if "read" in granted_scopes(scopes)]


def forget_removed_tokens(app: FastAPI) -> None:
    """Delete the web sessions of tokens this process is not configured with (at start-up), so
    that a token configured again after its removal does not bring its old cookies back. A
    database that does not answer is logged, not raised: the sessions stay refused anyway."""
    keys = read_token_keys(app.state.tokens)
    try:
        with app.state.session_factory() as session:
            deleted = forget_unconfigured_sessions(session, token_keys=keys)
            session.commit()
    except Exception:
        logger.warning("web sessions of removed tokens not deleted", exc_info=True)
        return
    if deleted:
        logger.info("web sessions of removed tokens deleted", extra={"sessions": deleted})


def has_access(request: Request, session: Session, *, scope: str) -> bool:
    """Whether the request holds ``scope``: no token configured, a token with it in the
    bearer header, or the cookie of a live web session (``read`` only) whose token still
    has it."""
    tokens: list[tuple[bytes, frozenset[str]]] = request.app.state.tokens
    if not tokens:
        return True
    presented = bearer_credential(request)
    if presented:
        return scope in matched_token(tokens, presented)[1]
    session_id = request.cookies.get(COOKIE, "")
    if not session_id or scope not in SESSION_SCOPES:
        return False
    scopes = session_scopes(
        session,
        session_id=session_id,
        now=get_clock(request).now(),
        token_keys=read_token_keys(tokens),
    )
    return scope in scopes


class LoginRequiredError(Exception):
    """The request may not see the page: it is answered with the login form (401)."""


def page_access(request: Request, security_scopes: SecurityScopes, session: ReadSessionDep) -> None:
    """Let a page through only for a request holding the scope of its route (the one scope of
    ``Security(page_access, scopes=[...])``, the API's scopes), by bearer token or web
    session; otherwise raise :class:`LoginRequiredError`. Like the API's
    :func:`~calmon.api.deps.authorize`, it runs before the query is validated."""
    (scope,) = security_scopes.scopes
    if not has_access(request, session, scope=scope):
        raise LoginRequiredError


PageReadScope = Security(page_access, scopes=["read"])


def login_required(request: Request, _exc: Exception) -> Response:
    """The 401 login form, leading back to the page asked for."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    error = "your session has ended: log in again" if COOKIE in request.cookies else None
    return _html(login_page(error=error, next_path=_safe_next(target)), 401)


@router.get("/")
def root() -> RedirectResponse:
    """The web view is the server's front page."""
    return RedirectResponse("/ui", status_code=307)


def _latest_by_model(
    session: Session, *, model_id: int | None = None
) -> dict[str, list[LatestWindow]]:
    """The latest windows of every model (only of ``model_id`` when given) and exported
    segment, by model name."""
    grouped: dict[str, list[LatestWindow]] = {}
    for latest in load_latest_windows(session, model_id=model_id):
        grouped.setdefault(latest.model, []).append(latest)
    return grouped


def _stale(model: Model, computed: datetime | None, now: datetime) -> list[str]:
    """The stale alert of a model whose newest window was computed at ``computed``."""
    if computed is not None and is_stale(computed, now=now, length=window_length(model.window)):
        return [f"stale: no window computed since {computed.astimezone(UTC):%Y-%m-%d %H:%M} UTC"]
    return []


def _model_alerts(model: Model, latest: list[LatestWindow], now: datetime) -> list[str]:
    """Alert states of a model's latest windows: the record rules, each said once with the
    segments where it holds counted, and stale."""
    out = segment_alerts([(w.segment, w.record) for w in latest])
    return out + _stale(model, max((w.computed_at for w in latest), default=None), now)


@dataclass(slots=True)
class _ModelLatest:
    """What the model list shows of one model's latest windows: the ``*`` record, the current
    windows with alert states (segment and states, ``*`` first, then the segments by name),
    how many current segment windows there are and the newest ``computed_at``."""

    star: WindowRecord | None = None
    windows: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    segments: int = 0
    computed: datetime | None = None

    @property
    def alerts(self) -> list[str]:
        """The alert states, each said once with the segments where it holds counted."""
        return group_alerts(self.windows, tracked=self.segments)


_Kept = tuple[tuple[str, ...], WindowRecord | None]
#: a latest window by model id, segment, start and ``computed_at``
_Key = tuple[int, str, datetime, datetime]


def _key(key: LatestKey) -> _Key:
    return (key.model_id, key.segment, key.start, key.computed_at)


class WindowAlerts:
    """The records the model list reads besides ``window_results_latest`` (the ``*`` records
    it shows, and the records of latest windows stored without their alert states, judged
    here), kept by window key and ``computed_at`` (a recomputed window has a new one), so that
    each is read once, not at every load. At most ``entries`` windows are kept, the oldest
    dropped first: by default the 100 ``*`` records of 100 models and room for every latest
    window of 100 models of 1,000 segments stored without alert states (after an upgrade that
    could not judge them), about 250 bytes each."""

    def __init__(self, entries: int = 120_000) -> None:
        self._entries = entries
        self._kept: dict[_Key, _Kept] = {}
        self._lock = threading.Lock()

    def latest_by_model(self, session: Session) -> dict[str, _ModelLatest]:
        """Per model name, its ``*`` record, its current windows with alert states, how many
        current segment windows it has and the newest ``computed_at``; records are read only
        for windows not kept yet."""
        listed = model_list_windows(session)
        needed = [m.star for m in listed.values() if m.star is not None]
        needed += [k for m in listed.values() for k, said in m.flagged if said is None]
        found = {_key(k): self._kept.get(_key(k)) for k in needed}
        missing = [k for k in needed if found[_key(k)] is None]
        ids = {k.model: k.model_id for k in missing}
        for window in load_records(session, missing) if missing else []:
            key = (ids[window.model], window.segment, window.start, window.computed_at)
            judged = found[key] = _judged(window)
            self._keep(key, judged)
        by_model: dict[str, _ModelLatest] = {}
        for name, windows in listed.items():
            latest = by_model[name] = _ModelLatest(
                segments=windows.segments, computed=windows.computed
            )
            if windows.star is not None and (kept := found.get(_key(windows.star))):
                latest.star = kept[1]
            for k, said in windows.flagged:
                if said is None:
                    kept = found.get(_key(k))
                    if kept is None:
                        continue  # deleted between the two reads
                    said = kept[0]
                if said:
                    latest.windows.append((k.segment, said))
        return by_model

    def _keep(self, key: _Key, kept: _Kept) -> None:
        with self._lock:
            while len(self._kept) >= self._entries:
                del self._kept[next(iter(self._kept))]
            self._kept[key] = kept


def _judged(window: LatestWindow) -> _Kept:
    """What the model list keeps of one latest window: its alert states, and its record
    when it is a ``*`` window."""
    star = window.record if window.segment == ALL_SEGMENTS else None
    return tuple(alerts(window.record)), star


@router.get("/ui", response_class=HTMLResponse, dependencies=[PageReadScope])
def ui_index(request: Request, session: ReadSessionDep) -> Response:
    """Every model with its latest window and alert-worthy state."""
    now = get_clock(request).now()
    cache: WindowAlerts = request.app.state.window_alerts
    latest = cache.latest_by_model(session)
    summaries = []
    for model in list_models(session):
        found = latest.get(model.name, _ModelLatest())
        summaries.append(
            ModelSummary(
                name=model.name,
                window=model.window,
                score_kind=model.score_kind,
                latest=found.star,
                alerts=found.alerts + _stale(model, found.computed, now),
                segments=found.segments,
            )
        )
    return _html(index_page(summaries, logout=bool(request.app.state.tokens)))


@router.get("/ui/models/{model}", response_class=HTMLResponse, dependencies=[PageReadScope])
def ui_model(
    request: Request,
    session: ReadSessionDep,
    model: ModelName,
    segment: Annotated[str, Query(pattern=SEGMENT_OR_ALL_PATTERN)] = ALL_SEGMENTS,
    metric: Annotated[str, Query()] = DEFAULT_METRIC,
    window: Annotated[str | None, Query(max_length=64)] = None,
    last: Annotated[int, Query(ge=1, le=MAX_LAST)] = DEFAULT_LAST,
) -> Response:
    """Charts over the latest ``last`` windows of one segment, the reliability diagram of
    ``window`` (a window start; default the latest) and the verdict per window."""
    stored = get_model(session, name=model)
    if stored is None:
        return _html(not_found_page(model), 404)
    if metric not in REGULAR_METRICS:
        metric = DEFAULT_METRIC
    latest = _latest_by_model(session, model_id=stored.id).get(stored.name, [])
    segments = [w.segment for w in latest] or [ALL_SEGMENTS]
    if segment not in segments:
        segments.append(segment)
    newest = next((w.start for w in latest if w.segment == segment), None)
    length = window_length(stored.window)
    since = None if newest is None else newest - (last - 1) * length
    records = last_window_records(session, model=stored, segment=segment, last=last, since=since)
    page = model_page(
        name=stored.name,
        window=stored.window,
        segment=segment,
        segments=segments,
        metric=metric,
        metrics=list(REGULAR_METRICS),
        records=records,
        selected=window,
        model_alerts=_model_alerts(stored, latest, get_clock(request).now()),
        logout=bool(request.app.state.tokens),
    )
    return _html(page)


@router.get("/ui/login", response_class=HTMLResponse)
def ui_login_form(request: Request, next: str | None = None) -> Response:
    """The login form (straight to the pages when no token is configured)."""
    if not request.app.state.tokens:
        return RedirectResponse(_safe_next(next), status_code=303)
    return _html(login_page(error=None, next_path=_safe_next(next)))


def _cookie_attributes(request: Request) -> dict[str, Any]:
    """The session cookie's attributes, the same when it is set and when it is deleted: the
    pages only, no script access, no cross-site sending, HTTPS-only behind HTTPS."""
    return {
        "path": "/ui",
        "httponly": True,
        "samesite": "strict",
        "secure": request.url.scheme == "https",
    }


def client_key(request: Request) -> Hashable:
    """The address failed logins are counted against: the client's IP, its /64 for IPv6 (one
    subscriber's block), as the server sees it (behind a proxy, as uvicorn's
    ``--forwarded-allow-ips`` lets it read ``X-Forwarded-For``)."""
    host = request.client.host if request.client is not None else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6:
        return ipaddress.ip_network(f"{address}/64", strict=False)
    return address


def login_limiter(settings: Settings) -> RateLimiter:
    """The failed-login buckets of one API worker, per client address (bounded in number)."""
    return RateLimiter(
        rate=settings.login_failure_rate / 60.0,
        burst=settings.login_failure_burst,
        max_keys=100_000,
    )


def _login(request: Request, session: Session, body: bytes) -> Response:
    """Check the form's token (see :func:`ui_login`)."""
    try:
        form = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4)
    except ValueError:  # more fields than the form has
        form = {}
    token = (form.get("token") or [""])[0].strip()
    target = _safe_next((form.get("next") or [""])[0])
    tokens: list[tuple[bytes, frozenset[str]]] = request.app.state.tokens
    if not tokens:
        return RedirectResponse(target, status_code=303)
    limiter: RateLimiter = request.app.state.login_limiter
    key = client_key(request)
    wait = limiter.waiting(key)
    if wait is not None:
        page = _html(
            login_page(error=f"too many failed logins; retry in {wait} s", next_path=target), 429
        )
        page.headers["Retry-After"] = str(wait)
        return page
    position, scopes = matched_token(tokens, token.encode())
    if "read" not in scopes:
        limiter.retry_after(key)
        error = "unknown token" if not scopes else "this token lacks the read scope"
        return _html(login_page(error=error, next_path=target), 401)
    settings: Settings = request.app.state.settings
    session_id = start_web_session(
        session,
        token_key=token_key(tokens[position][0]),
        scopes=SESSION_SCOPES,
        now=get_clock(request).now(),
        lifetime=timedelta(seconds=settings.ui_session_ttl),
        per_token=settings.ui_max_sessions,
    )
    session.commit()
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE, session_id, max_age=settings.ui_session_ttl, **_cookie_attributes(request)
    )
    return response


@router.post("/ui/login", response_class=HTMLResponse)
async def ui_login(request: Request, session: SessionDep) -> Response:
    """Check the form's token (compared as UTF-8): with the ``read`` scope, start a web session
    (``read`` only), set its cookie and go back to the page asked for; otherwise show the form
    again with the reason (401), or 429 once the address failed too often."""
    body = await request.body()
    return await run_in_threadpool(_login, request, session, body)


@router.post("/ui/logout")
def ui_logout(request: Request, session: SessionDep) -> Response:
    """End the web session (a copy of its cookie opens nothing any more) and forget the
    cookie; POST only."""
    if end_web_session(session, session_id=request.cookies.get(COOKIE, "")):
        session.commit()
    response = RedirectResponse("/ui/login" if request.app.state.tokens else "/ui", 303)
    response.delete_cookie(COOKIE, **_cookie_attributes(request))
    return response
