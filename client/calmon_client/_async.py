""":class:`AsyncMonitor`: the asyncio twin of :class:`~calmon_client.Monitor`, with a task on
the event loop that batches and sends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Generator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx

from calmon_client._core import (
    ENSURE_HEADERS,
    Backoff,
    Batch,
    Call,
    Incident,
    InvalidItemError,
    Item,
    Kind,
    ModelError,
    ModelInfo,
    Pause,
    Post,
    Queue,
    Reply,
    Stats,
    WhenFull,
    check_model,
    deliver,
    described,
    ensure_steps,
    item_incident,
    label_item,
    model_config,
    model_incident,
    prediction_item,
    root_url,
    safe_callback,
    transient,
    wait_seconds,
)
from calmon_client._sync import DROP_WARNING_PERIOD, headers_for

logger = logging.getLogger("calmon_client")


async def ensure_model_async(
    url: str,
    model: str,
    *,
    config: Mapping[str, Any] | None = None,
    token: str | None = None,
    timeout: float = 30.0,
    max_retry_delay: float = 5.0,
) -> ModelInfo:
    """:func:`~calmon_client.ensure_model` for asyncio code: the same arguments, answer and
    errors."""
    steps = ensure_steps(model, config, Backoff(cap=max_retry_delay))
    async with httpx.AsyncClient(
        base_url=root_url(url), headers=headers_for(token), timeout=timeout
    ) as client:
        return await run_registry(client, steps, timeout=timeout)


async def run_registry(
    client: httpx.AsyncClient,
    steps: Generator[Call | Pause, Reply | None, ModelInfo],
    *,
    timeout: float,
) -> ModelInfo:
    """Drive :func:`~calmon_client._core.ensure_steps` with ``client``."""
    step = next(steps)
    while True:
        reply: Reply | None = None
        if isinstance(step, Call):
            try:
                response = await client.request(
                    step.method,
                    step.path,
                    content=step.body,
                    params=step.params or None,
                    headers=ENSURE_HEADERS,
                    timeout=timeout,
                )
                reply = Reply(
                    response.status_code, response.content, response.headers.get("retry-after")
                )
            except Exception as exc:  # any failure to get an answer may pass
                reply = Reply(failure=f"{type(exc).__name__}: {exc}")
        else:
            await asyncio.sleep(step.seconds)
        try:
            step = steps.send(reply)
        except StopIteration as done:
            result: ModelInfo = done.value
            return result


class AsyncMonitor:
    """:class:`~calmon_client.Monitor` for asyncio code: the same arguments, counters and
    rules, with ``await`` on ``log``, ``label``, ``flush`` and ``aclose``, and ``async with``.

    Its sending task starts on the running loop at the first call (or ``async with``); every
    method must be called from that loop. ``log`` and ``label`` return at once unless the queue
    is full and ``when_full="block"``. Given a ``config``, its task makes sure the model
    exists before the first request, as :class:`~calmon_client.Monitor` does. There is no
    exit hook: close it (``aclose`` or the end of ``async with``) before the loop ends, or
    what is queued is lost.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        token: str | None = None,
        batch_size: int = 1000,
        flush_interval: float = 1.0,
        max_queue: int = 100_000,
        when_full: WhenFull = "drop",
        block_timeout: float | None = None,
        timeout: float = 30.0,
        max_retry_delay: float = 5.0,
        close_timeout: float = 30.0,
        on_error: Callable[[Incident], None] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if when_full not in ("block", "drop"):
            raise ValueError(f"when_full must be 'block' or 'drop', got {when_full!r}")
        self.model = check_model(model)
        #: the configuration to ensure before the first request (None: done, or not asked)
        self._config = None if config is None else model_config(config)[0]
        self._queue = Queue(
            batch_size=batch_size, flush_interval=flush_interval, max_queue=max_queue
        )
        self._when_full = when_full
        self._block_timeout = block_timeout
        self._timeout = timeout
        self._close_timeout = close_timeout
        self._backoff = Backoff(cap=max_retry_delay)
        self._report = safe_callback(on_error)
        self._client = httpx.AsyncClient(
            base_url=root_url(url), headers=headers_for(token), timeout=timeout
        )
        self._paths: dict[Kind, str] = {
            "predictions": f"/v1/models/{model}/predictions",
            "labels": f"/v1/models/{model}/labels",
        }
        self._changed: asyncio.Condition | None = None
        self._task: asyncio.Task[None] | None = None
        self._sent: dict[str, int] = dict.fromkeys(self._queue.counts, 0)
        self._flushing = 0
        self._closing = False
        self._finished = False
        self._abandoned = False
        self._deadline: float | None = None
        self._drops_unlogged = 0
        self._drop_logged_at = -DROP_WARNING_PERIOD

    async def log(
        self,
        id: str,
        score: float,
        timestamp: datetime | str | None = None,
        label: int | None = None,
        segment: str | None = None,
    ) -> bool:
        """Queue one prediction (see :meth:`Monitor.log`)."""
        try:
            item = prediction_item(id, score, timestamp, label, segment, time.monotonic())
        except InvalidItemError as exc:
            self._invalid(f"prediction {described(id)}: {exc}", id)
            return False
        return await self._put("predictions", item)

    async def label(self, id: str, label: int) -> bool:
        """Queue the label of a prediction (see :meth:`Monitor.label`)."""
        try:
            item = label_item(id, label, time.monotonic())
        except InvalidItemError as exc:
            self._invalid(f"label of {described(id)}: {exc}", id)
            return False
        return await self._put("labels", item)

    async def flush(self, timeout: float | None = None) -> bool:
        """Send everything queued so far and wait until it is resolved (see
        :meth:`Monitor.flush`)."""
        seconds, problem = wait_seconds(timeout, None)
        if problem is not None:
            self._invalid(problem, "")
        changed = self._started()
        target = dict(self._queue.queued)
        if self._queue.flushed(target):
            return True
        async with changed:
            self._flushing += 1
            changed.notify_all()
            try:
                async with asyncio.timeout(seconds):
                    await changed.wait_for(lambda: self._queue.flushed(target) or self._abandoned)
            except TimeoutError:
                return False
            finally:
                self._flushing -= 1
        return self._queue.flushed(target)

    async def aclose(self, timeout: float | None = None) -> None:
        """Send what is queued and stop (see :meth:`Monitor.close`)."""
        seconds, problem = wait_seconds(timeout, self._close_timeout)
        if problem is not None:
            self._invalid(problem, "")
        wait = self._close_timeout if seconds is None else seconds  # closing always ends
        changed = self._started()
        async with changed:
            if not self._closing:
                self._closing = True
                self._deadline = time.monotonic() + wait
                changed.notify_all()
        try:
            async with asyncio.timeout(wait):
                async with changed:
                    await changed.wait_for(lambda: self._finished or self._abandoned)
        except TimeoutError:
            if not self._abandoned:
                self._abandoned = True
                lost = self._queue.abandon()
                if lost:
                    message = (
                        f"{lost} items still unacknowledged when closing gave up after {wait} s"
                    )
                    logger.error("calmon: %s", message)
                    self._report(Incident("lost", message, lost))
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._client.aclose()

    def stats(self) -> Stats:
        """The counters so far."""
        return self._queue.stats(self._sent)

    async def __aenter__(self) -> AsyncMonitor:
        self._started()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _started(self) -> asyncio.Condition:
        """The condition every change is announced on; starts the sending task first."""
        if self._changed is None:
            self._changed = asyncio.Condition()
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"calmon-client-{self.model}"
            )
        return self._changed

    async def _put(self, kind: Kind, item: Item) -> bool:
        changed = self._started()
        queue = self._queue
        if not self._closing and not queue.full():
            if queue.put(kind, item):
                async with changed:
                    changed.notify_all()
            return True
        if not self._closing and self._when_full == "block":
            try:
                async with asyncio.timeout(self._block_timeout), changed:
                    await changed.wait_for(lambda: self._closing or not queue.full())
            except TimeoutError:
                pass
            if not self._closing and not queue.full():
                if queue.put(kind, item):
                    async with changed:
                        changed.notify_all()
                return True
        queue.counts["dropped"] += 1
        reason = "the monitor is closed" if self._closing else "the queue is full"
        now = time.monotonic()
        self._drops_unlogged += 1
        if now - self._drop_logged_at >= DROP_WARNING_PERIOD:
            logger.warning("calmon: %d items dropped (%s)", self._drops_unlogged, reason)
            self._drops_unlogged, self._drop_logged_at = 0, now
        self._report(item_incident("dropped", f"{kind[:-1]} dropped: {reason}", item[0]))
        return False

    def _invalid(self, message: str, client_id: object) -> None:
        self._queue.counts["invalid"] += 1
        logger.warning("calmon: not sent: %s", message)
        self._report(item_incident("invalid", message, client_id))

    async def _run(self) -> None:
        changed = self._started()
        while True:
            async with changed:
                batch = None
                while batch is None:
                    if self._abandoned:
                        return
                    eager = self._flushing > 0 or self._closing
                    now = time.monotonic()
                    wait = self._queue.due_in(now, eager=eager)
                    if wait is None and self._closing:
                        self._finished = True
                        changed.notify_all()
                        return
                    if wait is None or wait > 0:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(wait):
                                await changed.wait()
                    else:
                        batch = self._queue.take(now, eager=eager)
                changed.notify_all()
            await self._deliver(batch)
            async with changed:
                changed.notify_all()

    async def _ensure(self) -> None:
        """Make sure the model exists before the first request (see :meth:`Monitor._ensure`)."""
        config, self._config = self._config, None
        failures = 0
        while not self._abandoned:
            steps = ensure_steps(self.model, config, self._backoff)
            try:
                info = await run_registry(self._client, steps, timeout=self._timeout)
            except ModelError as exc:
                logger.error("calmon: %s", exc.message)
                self._report(model_incident(exc))
                if not transient(exc):
                    return
                await asyncio.sleep(self._backoff.delay(failures))
                failures += 1
                continue
            if info.created:
                logger.info("calmon: created model %s", self.model)
            return

    async def _deliver(self, batch: Batch) -> None:
        if self._config is not None:
            await self._ensure()
        steps = deliver(batch, self._sent, self._backoff, self._report)
        try:
            step = next(steps)
            while True:
                reply: Reply | None = None
                if isinstance(step, Post):
                    reply = await self._post(step)
                else:
                    await asyncio.sleep(step.seconds)
                step = steps.send(reply)
        except StopIteration:
            pass
        finally:
            steps.close()
        if not self._abandoned:
            self._queue.settle(batch, lost=batch.unresolved > 0)

    async def _post(self, step: Post) -> Reply:
        timeout = self._timeout
        if self._deadline is not None:
            timeout = max(min(timeout, self._deadline - time.monotonic()), 0.001)
        try:
            response = await self._client.post(
                self._paths[step.kind],
                content=step.body,
                headers={"Content-Type": step.content_type},
                timeout=timeout,
            )
        except Exception as exc:  # any failure to get an answer is retried
            return Reply(failure=f"{type(exc).__name__}: {exc}")
        return Reply(response.status_code, response.content, response.headers.get("retry-after"))
