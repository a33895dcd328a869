"""The statements of the ``web_sessions`` table: a login stored, read, ended, and the deletes
that keep the table bounded (expired sessions, a token's oldest beyond its cap, the sessions of
tokens no longer configured). The web view's logins (:mod:`calmon.services.web_sessions`) make
the ids, hashes and scopes and decide what is honoured; these read and write the rows in the
caller's transaction.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from calmon.db.models import WebSession


def add_session(
    session: Session,
    *,
    id_hash: str,
    token_key: str,
    scopes: str,
    created_at: datetime,
    expires_at: datetime,
) -> None:
    """Store a session (written with the caller's next flush)."""
    session.add(
        WebSession(
            id_hash=id_hash,
            token_key=token_key,
            scopes=scopes,
            created_at=created_at,
            expires_at=expires_at,
        )
    )


def live_session(session: Session, *, id_hash: str, now: datetime) -> WebSession | None:
    """The session whose id hashes to ``id_hash`` if it has not expired by ``now``."""
    return session.scalars(
        select(WebSession).where(WebSession.id_hash == id_hash, WebSession.expires_at > now)
    ).one_or_none()


def delete_session(session: Session, *, id_hash: str) -> bool:
    """Delete the session whose id hashes to ``id_hash``; whether there was one."""
    deleted = session.execute(delete(WebSession).where(WebSession.id_hash == id_hash))
    return bool(getattr(deleted, "rowcount", 0))


def delete_expired(session: Session, *, now: datetime) -> int:
    """Delete the sessions expired by ``now``; how many."""
    deleted = session.execute(delete(WebSession).where(WebSession.expires_at <= now))
    return int(getattr(deleted, "rowcount", 0) or 0)


def delete_other_tokens(session: Session, *, token_keys: list[str]) -> int:
    """Delete the sessions of tokens whose keys are not among ``token_keys``; how many."""
    deleted = session.execute(delete(WebSession).where(WebSession.token_key.not_in(token_keys)))
    return int(getattr(deleted, "rowcount", 0) or 0)


def delete_oldest_beyond(session: Session, *, token_key: str, keep: int) -> None:
    """Delete the sessions of the token ``token_key`` but its ``keep`` newest."""
    kept = (
        select(WebSession.id_hash)
        .where(WebSession.token_key == token_key)
        .order_by(WebSession.created_at.desc(), WebSession.id_hash.desc())
        .limit(keep)
    )
    session.execute(
        delete(WebSession).where(WebSession.token_key == token_key, WebSession.id_hash.not_in(kept))
    )
