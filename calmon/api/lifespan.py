"""The API app's lifespan hook that runs the scheduler in the same process (`calmon serve`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from calmon.clock import SYSTEM_CLOCK, Clock
from calmon.scheduler import instruments
from calmon.scheduler.runner import TickReport, WindowScheduler
from calmon.settings import Settings


def scheduler_lifespan(
    settings: Settings,
    *,
    after_tick: Callable[[TickReport], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    before_commit: Callable[[], None] | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A lifespan hook of the API app that runs a :class:`WindowScheduler` on ``clock`` beside
    it (``calmon serve``) and adds the scheduler's metrics to the API's ``/metrics``;
    ``after_tick`` is called after each background tick, ``before_commit`` as the scheduler's
    (None in production)."""

    @asynccontextmanager
    async def hook(app: FastAPI) -> AsyncIterator[None]:
        scheduler = WindowScheduler(
            settings, after_tick=after_tick, clock=clock, before_commit=before_commit
        )
        app.state.scrape_collectors.append(instruments.SCHEDULER_REGISTRY)
        app.state.scheduler = scheduler
        scheduler.start()
        try:
            yield
        finally:
            await asyncio.to_thread(scheduler.shutdown)

    return hook
