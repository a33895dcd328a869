""":class:`Monitor`: the blocking sender, with a background thread that batches and sends."""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable, Generator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Final, TypeVar

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

logger = logging.getLogger("calmon_client")
T = TypeVar("T")

#: seconds between two warnings about dropped items (each says how many since the last)
DROP_WARNING_PERIOD: Final = 10.0


def headers_for(token: str | None) -> dict[str, str]:
    """The ``Authorization`` header of a bearer ``token`` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def ensure_model(
    url: str,
    model: str,
    *,
    config: Mapping[str, Any] | None = None,
    token: str | None = None,
    timeout: float = 30.0,
    max_retry_delay: float = 5.0,
) -> ModelInfo:
    """Make sure the model exists on the server at ``url``: create it with ``config`` (a
    ``PUT /v1/models/{model}`` body; None: every default) when it is missing, change nothing
    when it exists. Safe to call at every start of every sender.

    Returns a :class:`~calmon_client.ModelInfo` (``created``: whether this call created it).
    Raises :class:`~calmon_client.ModelConfigMismatchError` when the model exists and one of the
    fields given in ``config`` differs from what it holds (fields left out are not compared;
    nothing is overwritten), :class:`~calmon_client.ModelError` when the server refuses (the
    token needs the ``read`` scope to look and ``admin`` to create; 422 for a configuration
    the server does not take) or gives no usable answer after 5 attempts, and ``ValueError``
    for a model name or a ``config`` that cannot be sent."""
    steps = ensure_steps(model, config, Backoff(cap=max_retry_delay))
    with httpx.Client(
        base_url=root_url(url), headers=headers_for(token), timeout=timeout
    ) as client:
        return run_steps(client, steps, timeout=timeout)


def run_steps(
    client: httpx.Client,
    steps: Generator[Call | Pause, Reply | None, T],
    *,
    timeout: float | None,
    stop: threading.Event | None = None,
) -> T:
    """Drive ``steps`` (such as :func:`~calmon_client._core.ensure_steps` or
    :func:`~calmon_client._core.call_steps`) with ``client``: make each request, sleep each
    pause, and return what the steps return; a set ``stop`` cuts a pause short and ends it
    with :class:`ModelError`."""
    step = next(steps)
    while True:
        reply: Reply | None = None
        if isinstance(step, Call):
            try:
                response = client.request(
                    step.method,
                    step.path,
                    content=step.body,
                    params=step.params or None,
                    headers=ENSURE_HEADERS,
                    timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
                )
                reply = Reply(
                    response.status_code, response.content, response.headers.get("retry-after")
                )
            except Exception as exc:  # any failure to get an answer may pass
                reply = Reply(failure=f"{type(exc).__name__}: {exc}")
        elif stop is None:
            time.sleep(step.seconds)
        elif stop.wait(step.seconds):
            steps.close()
            raise ModelError("the monitor closed before its model was ensured")
        try:
            step = steps.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result


class Monitor:
    """Sends a model's predictions and labels to a calmon server from a background thread.

    ``log`` and ``label`` only check their arguments and queue them (a few microseconds); a
    thread sends them in batches of ``batch_size``, or sooner once the oldest has waited
    ``flush_interval`` seconds, retrying failed requests until the server acknowledges them
    (ids make a repeat harmless). At most ``max_queue`` items wait; when the queue is full,
    ``when_full="drop"`` (the default) drops the new item and counts it, ``"block"`` makes
    ``log`` wait for room (at most ``block_timeout`` seconds, then drop; None: no limit).

    The model must exist on the server, or every batch is refused (404, counted
    ``rejected``). Given a ``config``, the sending thread makes sure of it before its first
    request, as :func:`ensure_model` does (created when missing, never overwritten); what
    goes wrong there is an incident of kind ``model``: a failure that may pass is tried
    again until it passes (the batches wait, as they do for a server that does not answer),
    and after a refusal or another configuration sending goes on.

    Nothing after the constructor raises into the caller: what goes wrong is counted in
    :meth:`stats`, logged on the ``calmon_client`` logger, and passed to ``on_error`` (called
    from the caller's thread for invalid or dropped items, from the sending thread otherwise;
    it must be quick and must not call the monitor back). The constructor raises
    ``ValueError`` for a bad configuration.

    Closing (``close``, the end of a ``with`` block, or the interpreter's exit) sends what is
    queued, waiting at most ``close_timeout`` seconds; what is still unacknowledged then is
    counted ``lost``.
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
        self._client = httpx.Client(
            base_url=root_url(url), headers=headers_for(token), timeout=timeout
        )
        self._paths: dict[Kind, str] = {
            "predictions": f"/v1/models/{model}/predictions",
            "labels": f"/v1/models/{model}/labels",
        }
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._stop = threading.Event()
        #: the sending thread's counters (only it writes them)
        self._sent: dict[str, int] = dict.fromkeys(self._queue.counts, 0)
        self._flushing = 0
        self._closing = False
        self._finished = False
        self._abandoned = False
        self._deadline: float | None = None
        self._drops_unlogged = 0
        self._drop_logged_at = -DROP_WARNING_PERIOD
        self._thread = threading.Thread(
            target=self._run, name=f"calmon-client-{model}", daemon=True
        )
        self._thread.start()
        reference = weakref.ref(self)

        def close_at_exit() -> None:
            monitor = reference()
            if monitor is not None:
                monitor.close()

        self._close_at_exit = close_at_exit
        atexit.register(close_at_exit)

    def log(
        self,
        id: str,
        score: float,
        timestamp: datetime | str | None = None,
        label: int | None = None,
        segment: str | None = None,
    ) -> bool:
        """Queue one prediction: ``timestamp`` an aware datetime or ISO 8601 text with an
        offset (None: now), ``label`` 0, 1 or None (not known yet: send it later with
        :meth:`label`). True when queued; False when invalid or dropped (counted)."""
        try:
            item = prediction_item(id, score, timestamp, label, segment, time.monotonic())
        except InvalidItemError as exc:
            self._invalid(f"prediction {described(id)}: {exc}", id)
            return False
        return self._put("predictions", item)

    def label(self, id: str, label: int) -> bool:
        """Queue the label (0 or 1) of a prediction logged earlier (or later). True when
        queued; False when invalid or dropped (counted)."""
        try:
            item = label_item(id, label, time.monotonic())
        except InvalidItemError as exc:
            self._invalid(f"label of {described(id)}: {exc}", id)
            return False
        return self._put("labels", item)

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything queued so far now, and wait until the server has acknowledged it
        (or rejected it, or ``close`` gave it up); at most ``timeout`` seconds (None: no
        limit). True when all of it was resolved in time."""
        seconds, problem = wait_seconds(timeout, None)
        if problem is not None:
            self._invalid(problem, "")
        with self._lock:
            target = dict(self._queue.queued)
            if self._queue.flushed(target):
                return True
            self._flushing += 1
            self._wake.notify()
            try:
                return self._done.wait_for(
                    lambda: self._queue.flushed(target) or self._abandoned, seconds
                ) and self._queue.flushed(target)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued and stop, waiting at most ``timeout`` seconds (None: the
        ``close_timeout`` given to the constructor); what is then unacknowledged is counted
        ``lost``. Later calls of ``log`` and ``label`` drop their item. Idempotent."""
        seconds, problem = wait_seconds(timeout, self._close_timeout)
        if problem is not None:
            self._invalid(problem, "")
        wait = self._close_timeout if seconds is None else seconds  # closing always ends
        lost = 0
        with self._lock:
            if not self._closing:
                self._closing = True
                self._deadline = time.monotonic() + wait
                self._wake.notify()
                self._space.notify_all()
            if not self._done.wait_for(lambda: self._finished or self._abandoned, wait):
                self._abandoned = True
                lost = self._queue.abandon()
                self._done.notify_all()
        self._stop.set()
        if lost:
            message = f"{lost} items still unacknowledged when closing gave up after {wait} s"
            logger.error("calmon: %s", message)
            self._report(Incident("lost", message, lost))
        self._thread.join(timeout=1.0)
        if not self._thread.is_alive():
            self._client.close()
        atexit.unregister(self._close_at_exit)

    def stats(self) -> Stats:
        """The counters so far (a snapshot)."""
        with self._lock:
            return self._queue.stats(self._sent)

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _put(self, kind: Kind, item: Item) -> bool:
        queue = self._queue
        with self._lock:
            if not self._closing and (queue.waiting_count < queue.max_queue or self._room()):
                if queue.put(kind, item):
                    self._wake.notify()
                return True
            queue.counts["dropped"] += 1
            reason = "the monitor is closed" if self._closing else "the queue is full"
        self._dropped(reason, kind, item)
        return False

    def _room(self) -> bool:
        """With the lock held and the queue full: wait for room if the policy says so."""
        if self._when_full == "drop":
            return False
        self._space.wait_for(lambda: self._closing or not self._queue.full(), self._block_timeout)
        return not self._closing and not self._queue.full()

    def _dropped(self, reason: str, kind: Kind, item: Item) -> None:
        now = time.monotonic()
        with self._lock:
            self._drops_unlogged += 1
            due = now - self._drop_logged_at >= DROP_WARNING_PERIOD
            if due:
                count, self._drops_unlogged, self._drop_logged_at = self._drops_unlogged, 0, now
        if due:
            logger.warning("calmon: %d items dropped (%s)", count, reason)
        self._report(item_incident("dropped", f"{kind[:-1]} dropped: {reason}", str(item[0])))

    def _invalid(self, message: str, client_id: object) -> None:
        with self._lock:
            self._queue.counts["invalid"] += 1
        logger.warning("calmon: not sent: %s", message)
        self._report(item_incident("invalid", message, client_id))

    def _run(self) -> None:
        while True:
            with self._lock:
                batch = None
                while batch is None:
                    if self._abandoned:
                        return
                    eager = self._flushing > 0 or self._closing
                    now = time.monotonic()
                    wait = self._queue.due_in(now, eager=eager)
                    if wait is None and self._closing:
                        self._finished = True
                        self._done.notify_all()
                        return
                    if wait is None or wait > 0:
                        self._wake.wait(wait)
                    else:
                        batch = self._queue.take(now, eager=eager)
                self._space.notify_all()
            self._deliver(batch)

    def _ensure(self) -> None:
        """Make sure the model exists before the first request (see :func:`ensure_model`).
        A failure that may pass is reported and tried again after a pause, as a batch is,
        until the monitor stops; a refusal or another configuration is reported once."""
        config, self._config = self._config, None
        failures = 0
        while not self._stop.is_set() and not self._abandoned:
            steps = ensure_steps(self.model, config, self._backoff)
            try:
                info = run_steps(self._client, steps, timeout=self._timeout, stop=self._stop)
            except ModelError as exc:
                if not self._stop.is_set():
                    logger.error("calmon: %s", exc.message)
                    self._report(model_incident(exc))
                if not transient(exc) or self._stop.wait(self._backoff.delay(failures)):
                    return
                failures += 1
                continue
            if info.created:
                logger.info("calmon: created model %s", self.model)
            return

    def _deliver(self, batch: Batch) -> None:
        if self._config is not None:
            self._ensure()
        steps = deliver(batch, self._sent, self._backoff, self._report)
        try:
            step = next(steps)
            while True:
                reply: Reply | None = None
                if isinstance(step, Post):
                    reply = self._post(step)
                elif self._stop.wait(step.seconds):
                    break
                if self._abandoned:
                    break
                step = steps.send(reply)
        except StopIteration:
            pass
        finally:
            steps.close()
        with self._lock:
            if not self._abandoned:
                self._queue.settle(batch, lost=batch.unresolved > 0)
            self._done.notify_all()

    def _post(self, step: Post) -> Reply:
        timeout = self._timeout
        if self._deadline is not None:
            timeout = max(min(timeout, self._deadline - time.monotonic()), 0.001)
        try:
            response = self._client.post(
                self._paths[step.kind],
                content=step.body,
                headers={"Content-Type": step.content_type},
                timeout=timeout,
            )
        except Exception as exc:  # any failure to get an answer is retried
            return Reply(failure=f"{type(exc).__name__}: {exc}")
        return Reply(response.status_code, response.content, response.headers.get("retry-after"))
