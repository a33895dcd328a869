"""What every long-running sub-command does first."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from calmon_client import ApiError
    from sqlalchemy.engine import Engine

    from calmon.settings import Settings


def load_settings(command: str) -> Settings | None:
    """The settings for ``calmon COMMAND``, or None after saying on stderr why they are invalid.

    Callers exit with code 2 on None. Logging is configured at the level the settings give.
    """
    from calmon.log import configure_logging
    from calmon.settings import ConfigError, get_settings

    try:
        settings = get_settings()
    except ConfigError as exc:
        print(f"calmon {command}: invalid configuration: {exc}", file=sys.stderr)
        return None
    configure_logging(settings.log_level)
    return settings


@contextmanager
def database_engine(settings: Settings) -> Iterator[Engine]:
    """An engine on the configured database, disposed of when the block ends."""
    from calmon.db.session import create_db_engine

    engine = create_db_engine(settings)
    try:
        yield engine
    finally:
        engine.dispose()


def upgrade_schema(engine: Engine) -> None:
    """Bring the schema to head and create the day partitions the coming days need (what
    `calmon migrate` does by default and `calmon serve` before it serves)."""
    from calmon.db import migrate
    from calmon.db.partitions import prepare_partitions

    migrate.upgrade(engine)
    prepare_partitions(engine)


def http_url(text: str) -> str:
    """argparse type: an http(s) root URL, without its trailing slash. A URL that holds the
    API's own path (``…/v1``) is refused with the root URL to give instead, since every
    request would otherwise go to ``…/v1/v1/…`` and meet a bare 404."""
    from urllib.parse import urlsplit

    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text!r}")
    url = text.rstrip("/")
    path = urlsplit(url).path
    if path == "/v1" or path.endswith("/v1") or "/v1/" in path:
        root = url[: url.index("/v1", len(url) - len(path))]
        raise argparse.ArgumentTypeError(
            f"{text!r} holds the API path /v1: give the server's root URL, e.g. {root}"
        )
    return url


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


#: the message of the server's 404 for a path it does not serve (a missing model names itself)
UNKNOWN_PATH: Final = "Not Found"


def api_error_text(exc: ApiError) -> str:
    """What a command says of a request that failed: the server's ``code: message`` (or what
    went wrong with the connection), with :func:`url_hint`."""
    return exc.reason + url_hint(exc)


def url_hint(exc: ApiError) -> str:
    """For the server's 404 of a path it does not serve: that ``--url`` is probably not the
    server's root (empty otherwise)."""
    if exc.status != 404 or not exc.reason.endswith(f": {UNKNOWN_PATH}"):
        return ""
    return (
        f" ({exc.url} is not a path of the calmon API: is --url the server's root URL, such as"
        " http://127.0.0.1:8000?)"
    )
