"""Service settings: environment variables ``CALMON_*`` read into one :class:`Settings` object.

Every variable is listed in ``docs/reference/configuration.md``. Settings are built by
:func:`get_settings` when a command or the application factory starts, never at import time,
so tests and sub-commands can set the environment first.
"""

from __future__ import annotations

import ipaddress
from functools import cached_property
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Scope = Literal["read", "write", "admin"]

SCOPES: Final[frozenset[str]] = frozenset({"read", "write", "admin"})
MIN_TOKEN_LENGTH: Final = 16
#: where prometheus_client's multiprocess mode keeps the values of every worker
MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
LOOPBACK_NAMES: Final[frozenset[str]] = frozenset({"localhost", "localhost.localdomain"})


def parse_tokens(text: str, *, source: str) -> dict[str, frozenset[str]]:
    """Parse ``token:scope+scope`` entries separated by commas or new lines.

    Blank entries and lines starting with ``#`` are ignored. The token is everything before the
    last ``:`` (so base64 tokens with ``+`` or ``/`` work); it must be at least
    ``MIN_TOKEN_LENGTH`` printable characters without spaces. Any Unicode is accepted: the API
    and the web view compare tokens as UTF-8 bytes. ``ValueError`` names the bad entry's
    position in ``source``, never the token itself.
    """
    tokens: dict[str, frozenset[str]] = {}
    entries = [
        entry.strip()
        for line in text.splitlines()
        if not line.strip().startswith("#")
        for entry in line.split(",")
    ]
    for position, entry in enumerate((e for e in entries if e), start=1):
        token, sep, scope_text = entry.rpartition(":")
        scopes = frozenset(s.strip() for s in scope_text.split("+") if s.strip())
        if not sep or not token:
            raise ValueError(f"{source}: entry {position} is not of the form token:scope+scope")
        if len(token) < MIN_TOKEN_LENGTH or not token.isprintable() or " " in token:
            raise ValueError(
                f"{source}: token of entry {position} must be at least {MIN_TOKEN_LENGTH} "
                "printable characters without spaces"
            )
        unknown = scopes - SCOPES
        if not scopes or unknown:
            raise ValueError(
                f"{source}: entry {position} has scopes {sorted(unknown) or '(none)'}; "
                f"expected some of {sorted(SCOPES)} joined by '+'"
            )
        if token in tokens and tokens[token] != scopes:
            raise ValueError(f"{source}: entry {position} repeats a token with other scopes")
        tokens[token] = scopes
    return tokens


def is_loopback(host: str) -> bool:
    """True when binding ``host`` only accepts connections from this machine."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _seconds(default: float, description: str, *, zero: bool = False) -> Any:
    """A settings field holding a duration in seconds: above 0 (at least 0 with ``zero``)."""
    if zero:
        return Field(default=default, ge=0, description=description)
    return Field(default=default, gt=0, description=description)


class Settings(BaseSettings):
    """All runtime configuration of calmon; each field is the variable ``CALMON_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="CALMON_", extra="ignore", frozen=True)

    database_url: str = Field(
        default="sqlite:///calmon.db",
        description="SQLAlchemy URL: postgresql+psycopg://user@host/db or sqlite:///file.db",
    )
    database_read_url: str = Field(
        default="",
        description="SQLAlchemy URL of a PostgreSQL read replica for the read-only endpoints, "
        "the web view and /metrics; they read from the primary while it is unreachable",
    )
    api_tokens: str = Field(
        default="",
        repr=False,
        description="Bearer tokens and scopes, 'token:scope+scope' separated by commas",
    )
    api_tokens_file: Path | None = Field(
        default=None, description="file holding more tokens, same format, one per line allowed"
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=64, description="uvicorn workers of `calmon api`")
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_header_bytes: int = Field(
        default=32 * 1024,
        ge=1024,
        le=1024 * 1024,
        description="largest request line and headers (431 and closed beyond)",
    )
    header_timeout: float = _seconds(10.0, "seconds a client has to send a request's headers")
    body_timeout: float = _seconds(
        60.0, "seconds a client has to send a request's body once its headers arrived"
    )
    keep_alive_timeout: float = _seconds(5.0, "seconds an idle keep-alive connection stays open")
    write_rate_limit: float = Field(
        default=0.0,
        ge=0,
        description="write requests per second per token and API worker (429 beyond); 0 = off",
    )
    write_rate_burst: int = Field(default=50, ge=1, description="write requests in one burst")
    ui_session_ttl: int = Field(
        default=12 * 3600,
        ge=60,
        le=30 * 24 * 3600,
        description="seconds a web view login lasts (from logging in; the cookie's Max-Age)",
    )
    ui_max_sessions: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="live web view sessions per token; a login beyond ends the token's oldest",
    )
    login_failure_rate: float = Field(
        default=5.0,
        gt=0,
        description="failed web view logins per minute per client address (429 beyond)",
    )
    login_failure_burst: int = Field(
        default=10, ge=1, description="failed web view logins an address may make at once"
    )
    allowed_hosts: str = Field(
        default="",
        max_length=4096,
        description="names (Host headers) a server without tokens answers besides localhost, "
        "127.0.0.1, ::1 and the address a request arrives on; separated by commas",
    )
    forwarded_allow_ips: str = Field(
        default="",
        max_length=4096,
        description="proxies whose X-Forwarded-For and X-Forwarded-Proto are trusted: "
        "addresses or networks separated by commas, '*' for any; empty (the default): none, "
        "the client is the peer the server sees",
    )
    max_models: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="models that may exist (each brings its own Prometheus series)",
    )
    metrics_max_series: int = Field(
        default=20_000,
        ge=1,
        description="window series on one scrape of /metrics; segments beyond it are left out "
        "(every model's * window is always exported)",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    db_connect_timeout: int = Field(default=2, ge=1, le=60, description="seconds")
    db_statement_timeout: float = _seconds(30.0, "seconds (PostgreSQL)")
    db_pool_size: int = Field(default=10, ge=1, le=200)
    db_pool_timeout: float = _seconds(2.0, "seconds to wait for a conn")
    db_transaction_pooler: bool = Field(
        default=False,
        description="the database URL reaches PostgreSQL through a transaction-pooling "
        "PgBouncer: no prepared statements, timeouts set in each transaction",
    )
    sqlite_busy_timeout: float = _seconds(5.0, "seconds")
    retention_days: int = Field(
        default=400,
        ge=0,
        description="keep predictions this many days of event time; 0 = ever. Seeds the period "
        "stored in the database, which every process uses (`calmon retention --days` changes it)",
    )
    scheduler_interval: float = _seconds(
        15.0, "seconds between two scheduler ticks (scan, compute)"
    )
    scheduler_scan_margin: float = _seconds(
        300.0,
        "seconds a prediction write may take to commit; rescanned for changes",
        zero=True,
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_tokens(self) -> Settings:
        _ = self.tokens
        return self

    @model_validator(mode="after")
    def _check_read_url(self) -> Settings:
        if self.database_read_url and (
            self.is_sqlite or not self.database_read_url.startswith("postgresql")
        ):
            raise ValueError(
                "CALMON_DATABASE_READ_URL: a read replica needs PostgreSQL URLs in both "
                "CALMON_DATABASE_URL and CALMON_DATABASE_READ_URL"
            )
        return self

    @cached_property
    def tokens(self) -> dict[str, frozenset[str]]:
        """Configured tokens and their scopes (inline variable and file merged)."""
        tokens = parse_tokens(self.api_tokens, source="CALMON_API_TOKENS")
        if self.api_tokens_file is not None:
            try:
                text = self.api_tokens_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"CALMON_API_TOKENS_FILE: cannot read: {exc.strerror}") from None
            for token, scopes in parse_tokens(text, source="CALMON_API_TOKENS_FILE").items():
                if tokens.get(token, scopes) != scopes:
                    raise ValueError("a token appears in both sources with other scopes")
                tokens[token] = scopes
        return tokens

    @property
    def is_sqlite(self) -> bool:
        """True for the embedded SQLite backend."""
        return self.database_url.startswith("sqlite")


def bind_refusal(settings: Settings, host: str, *, service: str = "the API") -> str | None:
    """Why serving ``service`` on ``host`` is refused (no token configured and not loopback),
    or None. The API and the scheduler's metrics endpoint follow this one rule."""
    if settings.tokens or is_loopback(host):
        return None
    return (
        f"refusing to listen on {host}: no API token is configured, so {service} would be "
        "open to the network. Set CALMON_API_TOKENS (or CALMON_API_TOKENS_FILE), or listen on "
        "127.0.0.1, ::1 or localhost."
    )


class ConfigError(Exception):
    """Invalid configuration; the message names variables, never their values."""


def get_settings() -> Settings:
    """Read the settings from the environment (and the token file) now.

    Raises :class:`ConfigError` with one line per problem and without the offending values
    (they may be tokens).
    """
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            (f"CALMON_{'_'.join(str(p) for p in err['loc']).upper()}: " if err["loc"] else "")
            + err["msg"].removeprefix("Value error, ")
            for err in exc.errors(include_input=False, include_url=False)
        )
        raise ConfigError(problems) from None
