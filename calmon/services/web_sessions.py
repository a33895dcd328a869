"""Sessions of the web view's login (``docs/reference/ui.md``, "Tokens"), stored in the database so
that every API worker and replica sees the same ones and a logout ends a session everywhere.

The browser's cookie holds a random session id; the table keeps only its SHA-256 (the id has
256 random bits, so a plain hash is enough), never the id or the token. A session records a
slow digest of the token that made it (:func:`token_key`), so it is honoured only while that
token is still configured with ``read``, and the scopes it grants (``read`` only: the web view
reads). Bounded: at most a configured number of live sessions per token (the oldest goes), the
expired ones deleted at each login and by the scheduler's hourly retention run, and the ones of
a token no longer configured deleted when an API process starts
(:func:`forget_unconfigured_sessions`), so that configuring a removed token again does not
bring its old cookies back. Callers commit.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import cache
from typing import Final

from sqlalchemy.orm import Session

from calmon.db import web_sessions as session_rows

#: longest cookie value looked up: a session id is 43 characters
MAX_SESSION_ID: Final = 128
#: scrypt's cost: about 16 MiB and a few tens of milliseconds per token, once per process
_SCRYPT: Final = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
_SALT: Final = b"calmon web session token"


@cache
def token_key(token: bytes) -> str:
    """The digest a session keeps of the configured ``token`` that made it: scrypt, so that a
    copy of the table does not let weak tokens be guessed at hash speed. Cached per process;
    call it with configured tokens only, never with what a client sent."""
    return hashlib.scrypt(token, salt=_SALT, **_SCRYPT).hex()


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def expire_web_sessions(session: Session, *, now: datetime) -> int:
    """Delete the sessions expired by ``now``; how many."""
    return session_rows.delete_expired(session, now=now)


def forget_unconfigured_sessions(session: Session, *, token_keys: Iterable[str]) -> int:
    """Delete the sessions of tokens whose keys are not among ``token_keys`` (the tokens an API
    process is configured with); how many."""
    return session_rows.delete_other_tokens(session, token_keys=list(set(token_keys)))


def start_web_session(
    session: Session,
    *,
    token_key: str,
    scopes: Iterable[str],
    now: datetime,
    lifetime: timedelta,
    per_token: int,
) -> str:
    """Store a new session lasting ``lifetime`` from ``now`` and return its id (for the cookie);
    sessions expired by ``now`` are deleted on the way, and the token's oldest live ones beyond
    ``per_token`` - 1 (with the new one, ``per_token`` remain)."""
    expire_web_sessions(session, now=now)
    session_rows.delete_oldest_beyond(session, token_key=token_key, keep=max(per_token - 1, 0))
    session_id = secrets.token_urlsafe(32)
    session_rows.add_session(
        session,
        id_hash=_hash(session_id),
        token_key=token_key,
        scopes=" ".join(sorted(set(scopes))),
        created_at=now,
        expires_at=now + lifetime,
    )
    return session_id


def session_scopes(
    session: Session, *, session_id: str, now: datetime, token_keys: Iterable[str]
) -> frozenset[str]:
    """The scopes of the live session ``session_id`` made by a token whose key is among
    ``token_keys``; empty for an unknown, expired or orphaned one."""
    if not session_id or len(session_id) > MAX_SESSION_ID:
        return frozenset()
    stored = session_rows.live_session(session, id_hash=_hash(session_id), now=now)
    if stored is None or stored.token_key not in set(token_keys):
        return frozenset()
    return frozenset(stored.scopes.split())


def end_web_session(session: Session, *, session_id: str) -> bool:
    """Delete the session ``session_id``; whether there was one."""
    if not session_id or len(session_id) > MAX_SESSION_ID:
        return False
    return session_rows.delete_session(session, id_hash=_hash(session_id))
