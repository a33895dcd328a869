"""The FastAPI application factory.

``create_app()`` with no argument reads the settings from the environment, which is what
uvicorn calls in each worker (``calmon.api.app:create_app`` with ``factory=True``). Other parts
that must live beside the API in the same process are passed as ``lifespan_hooks``: async
context managers entered at startup, in order, and left at shutdown, in reverse order. By
default that is the window exporter refreshed on a timer of ``CALMON_SCHEDULER_INTERVAL``
seconds (``calmon api``); ``calmon serve`` passes the exporter and the scheduler, which
refreshes it after each tick.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from functools import cache

from fastapi import FastAPI

from calmon import __version__
from calmon.api.browser_guard import BrowserGuardMiddleware, parse_allowed_hosts
from calmon.api.docs_pages import router as docs_router
from calmon.api.errors import install_error_handlers
from calmon.api.middleware import RequestContextMiddleware
from calmon.api.openapi import install_openapi, operation_id
from calmon.api.ratelimit import RateLimiter
from calmon.api.routes import health, ingest, models, ui, windows
from calmon.clock import SYSTEM_CLOCK, Clock
from calmon.db.session import ReplicaSessions, create_db_engine, create_session_factory
from calmon.exporter.refresh import WindowExporter
from calmon.exporter.replica import ReplicaLagCollector
from calmon.log import configure_logging
from calmon.services.model_registry import ModelCache
from calmon.services.retention_bound import RetentionBound
from calmon.services.windows.reference_cache import ReferenceCache
from calmon.settings import Settings, get_settings

logger = logging.getLogger(__name__)

LifespanHook = Callable[[FastAPI], AbstractAsyncContextManager[None]]
#: references the API keeps built for the calibration maps it serves
API_REFERENCE_ENTRIES = 16

DESCRIPTION = (
    "Production monitoring of binary classifiers with prior-calibrated metrics. "
    'Errors are `{"error": {"code", "message", "details"}}`; each operation lists the statuses '
    "it answers. A request that announces a body over `CALMON_MAX_BODY_BYTES` is answered 413 "
    "whatever its path."
)


@cache
def freeze_startup_objects() -> None:
    """Put what is alive after the first startup of this process out of the garbage
    collector's reach, once per process.

    Those objects (modules, the application, pools) live as long as the process; left in
    sight, every full collection triggered by request garbage walks them all again, which
    was about a tenth of an ingestion worker's CPU.
    """
    gc.collect()
    gc.freeze()


def read_retention(app: FastAPI) -> None:
    """Read (or seed) the stored retention period at start-up, so that a disagreement with
    ``CALMON_RETENTION_DAYS`` is logged at once. A database that does not answer is logged,
    not raised: ingestion reads the period at its first request."""
    clock: Clock = app.state.clock
    try:
        with app.state.session_factory() as session:
            app.state.retention.refresh(session, now=clock.now(), monotonic=clock.monotonic())
            session.commit()
    except Exception:
        logger.warning("retention period not read at start-up", exc_info=True)


def create_app(
    settings: Settings | None = None,
    *,
    lifespan_hooks: Sequence[LifespanHook] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> FastAPI:
    """Build the API for ``settings`` (default: from the environment); its routes read the
    current instant from ``clock``."""
    settings = settings or get_settings()
    if lifespan_hooks is None:
        lifespan_hooks = [WindowExporter().lifespan(refresh_every=settings.scheduler_interval)]
    configure_logging(settings.log_level)
    engine = create_db_engine(settings)
    replica = (
        create_db_engine(settings.model_copy(update={"database_url": settings.database_read_url}))
        if settings.database_read_url
        else None
    )
    if replica is not None:
        lifespan_hooks = [
            *lifespan_hooks,
            ReplicaLagCollector(replica).lifespan(refresh_every=settings.scheduler_interval),
        ]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with AsyncExitStack() as stack:
                for hook in lifespan_hooks:
                    await stack.enter_async_context(hook(app))
                await asyncio.to_thread(ui.forget_removed_tokens, app)
                await asyncio.to_thread(read_retention, app)
                freeze_startup_objects()
                yield
        finally:
            engine.dispose()
            if replica is not None:
                replica.dispose()

    app = FastAPI(
        title="calmon",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    app.state.settings = settings
    app.state.clock = clock
    app.state.engine = engine
    app.state.session_factory = create_session_factory(engine)
    app.state.read_session_factory = (
        create_session_factory(engine, reads_only=True)
        if replica is None
        else ReplicaSessions(replica, primary=engine)
    )
    app.state.tokens = [(token.encode(), scopes) for token, scopes in settings.tokens.items()]
    app.state.scrape_collectors = []
    app.state.write_limiter = (
        RateLimiter(rate=settings.write_rate_limit, burst=settings.write_rate_burst)
        if settings.write_rate_limit > 0
        else None
    )
    app.state.login_limiter = ui.login_limiter(settings)
    app.state.window_alerts = ui.WindowAlerts()
    app.state.reference_cache = ReferenceCache(entries=API_REFERENCE_ENTRIES)
    app.state.retention = RetentionBound(settings.retention_days)
    app.state.models = ModelCache()
    install_error_handlers(app)
    install_openapi(app)
    routers = (models.router, ingest.router, windows.router, health.router)
    for router in routers:
        app.include_router(router)
    app.include_router(docs_router)
    app.include_router(ui.router)
    app.add_exception_handler(ui.LoginRequiredError, ui.login_required)
    app.mount("/ui/static", ui.static_files(), name="ui-static")
    app.add_middleware(
        BrowserGuardMiddleware,
        token_less=not settings.tokens,
        allowed_hosts=parse_allowed_hosts(settings.allowed_hosts),
    )
    app.add_middleware(
        RequestContextMiddleware,
        max_body_bytes=settings.max_body_bytes,
        routes=[route for router in routers for route in router.routes],
    )
    return app
