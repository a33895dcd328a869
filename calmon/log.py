"""Structured logs: one JSON object per line on stderr, with the current request id.

Records carry ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, ``request_id`` when
a request is being served, any ``extra={...}`` fields, and ``exc`` for exceptions. Request
bodies and tokens are never passed to the logger, nor statement parameters (the engines hide
them). Python warnings (NumPy's ``RuntimeWarning`` among them) are logged as records of the
``py.warnings`` logger, and uncaught exceptions (of the main thread or any other) as errors of
``calmon.uncaught``, so that stderr holds nothing but JSON lines.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final

import orjson

from calmon.timeline import iso

request_id_var: ContextVar[str | None] = ContextVar("calmon_request_id", default=None)

_STANDARD_ATTRS: Final[frozenset[str]] = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "color_message"}
)


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the JSON text of ``record`` (no trailing newline)."""
        payload: dict[str, Any] = {
            "time": iso(datetime.fromtimestamp(record.created, tz=UTC), timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_") and value is not None:
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(payload, default=str).decode()


def _with_request_id(factory: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        record.request_id = request_id_var.get()
        return record

    make_record.calmon = True  # type: ignore[attr-defined]
    return make_record


def _log_uncaught(
    kind: type[BaseException], value: BaseException, tb: TracebackType | None
) -> None:
    logging.getLogger("calmon.uncaught").error("uncaught exception", exc_info=(kind, value, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or isinstance(args.exc_value, SystemExit):
        return
    logging.getLogger("calmon.uncaught").error(
        "uncaught exception",
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        extra={"in_thread": args.thread.name if args.thread is not None else None},
    )


def configure_logging(level: str = "INFO") -> None:
    """Send every logger (uvicorn's and the root) to stderr as JSON lines at ``level``.

    Records are stamped with the request id when they are created; warnings and uncaught
    exceptions are captured into logging. Alembic's step-by-step lines show at ``DEBUG`` only
    (the migration's outcome is one line of :mod:`calmon.db.migrate`). Idempotent: calling it
    again only changes the level.
    """
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "calmon", False):
        logging.setLogRecordFactory(_with_request_id(factory))
    root = logging.getLogger()
    root.setLevel(level)
    if not any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        for handler in list(root.handlers):
            root.removeHandler(handler)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "alembic"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    logging.getLogger("alembic").setLevel(logging.NOTSET if level == "DEBUG" else logging.WARNING)
    logging.getLogger("uvicorn.access").disabled = True
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
