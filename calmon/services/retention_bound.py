"""Retention's bound, one for every process of a database (``docs/reference/storage.md``,
"Retention").

The period is stored in ``shared_settings`` (row ``retention_days``), not taken from each
process's ``CALMON_RETENTION_DAYS``: the API's ingestion bounds, the scheduler's planning and
the retention run all read it there, so no process computes or takes again what another has
expired. The first process that finds no row stores its own ``CALMON_RETENTION_DAYS``
(seeding); ``calmon retention --days N`` changes it deliberately. A process whose variable
disagrees with the stored value logs a warning and uses the stored value: a process's
environment never shortens (or lengthens) what the others keep, and none refuses to start over
it (an API that refused would stop taking data for a setting it can safely follow).

Each process keeps the value it read for :data:`CACHE_SECONDS` (per request that is one
lookup in memory). A change therefore reaches every process within that time; the retention
run expires with a value only once it has been stored for longer than that plus two scheduler
intervals (:func:`settled`), so a process still planning with the former value cannot compute
again a window the run has just removed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy.orm import Session

from calmon.db import shared_settings

logger = logging.getLogger(__name__)

#: the ``shared_settings`` row holding the period in days (0: keep everything)
RETENTION_DAYS: Final = "retention_days"
#: seconds a process uses the period it read before reading it again
CACHE_SECONDS: Final = 30.0


def retention_cutoff(*, now: datetime, retention_days: int) -> datetime | None:
    """Event times before this instant are expired; None when retention is off (0 days)."""
    return now - timedelta(days=retention_days) if retention_days > 0 else None


@dataclass(frozen=True, slots=True)
class StoredRetention:
    """The stored period (days; 0 keeps everything) and when it was stored."""

    days: int
    changed_at: datetime

    def cutoff(self, now: datetime) -> datetime | None:
        """Event times before this instant are expired; None when retention is off."""
        return retention_cutoff(now=now, retention_days=self.days)


def stored_retention(session: Session) -> StoredRetention | None:
    """The stored period, or None when no process has stored one yet."""
    row = shared_settings.read_setting(session, name=RETENTION_DAYS)
    return None if row is None else StoredRetention(days=row[0], changed_at=row[1])


def seed_retention(session: Session, *, days: int, now: datetime) -> StoredRetention:
    """The stored period; when there is none, store ``days`` first (a concurrent seed by
    another process wins if it commits first: its value is returned). The caller commits."""
    found = stored_retention(session)
    if found is not None:
        return found
    shared_settings.insert_setting(session, name=RETENTION_DAYS, value=days, now=now)
    found = stored_retention(session)
    assert found is not None
    return found


def change_retention(session: Session, *, days: int, now: datetime) -> int | None:
    """Store ``days`` as the period (``calmon retention --days``); returns the former period
    (None: none was stored). Storing the same value again leaves ``changed_at`` alone. The
    caller commits."""
    former = stored_retention(session)
    if former is None:
        seed_retention(session, days=days, now=now)
        return None
    if former.days != days:
        shared_settings.update_setting(session, name=RETENTION_DAYS, value=days, now=now)
    return former.days


def settled(stored: StoredRetention, *, now: datetime, scheduler_interval: float) -> bool:
    """Whether every process reads ``stored`` by ``now`` and plans with it: it was stored more
    than :data:`CACHE_SECONDS` plus two scheduler intervals ago (a plan is used one interval,
    and the window computed when it is replaced still runs)."""
    wait = timedelta(seconds=CACHE_SECONDS + 2 * scheduler_interval)
    return now - stored.changed_at >= wait


class RetentionBound:
    """The stored period as one process reads it: seeded from ``configured`` (the process's
    ``CALMON_RETENTION_DAYS``) when none is stored, kept ``CACHE_SECONDS`` of the caller's
    monotonic clock, a disagreement with ``configured`` logged once per stored value."""

    def __init__(self, configured: int, *, ttl: float = CACHE_SECONDS) -> None:
        self.configured = configured
        self.ttl = ttl
        self._lock = threading.Lock()
        self._cached: tuple[StoredRetention, float] | None = None
        self._warned: int | None = None

    def read(self, session: Session, *, now: datetime, monotonic: float) -> StoredRetention:
        """The period in force: the one read less than ``ttl`` seconds ago (``monotonic``, on
        the caller's clock), else read now through ``session`` (seeded if missing: the caller
        commits)."""
        with self._lock:
            cached = self._cached
        if cached is not None and 0.0 <= monotonic - cached[1] < self.ttl:
            return cached[0]
        return self.refresh(session, now=now, monotonic=monotonic)

    def refresh(self, session: Session, *, now: datetime, monotonic: float) -> StoredRetention:
        """Read the period now, whatever the cache holds (the retention run does)."""
        stored = seed_retention(session, days=self.configured, now=now)
        with self._lock:
            self._cached = (stored, monotonic)
            warn = stored.days != self.configured and self._warned != stored.days
            if warn:
                self._warned = stored.days
        if warn:
            logger.warning(
                "CALMON_RETENTION_DAYS differs from the retention period stored in the "
                "database, which every process uses; `calmon retention --days N` changes it",
                extra={"configured_days": self.configured, "stored_days": stored.days},
            )
        return stored

    def forget(self) -> None:
        """Drop the cached value: the next :meth:`read` reads the database."""
        with self._lock:
            self._cached = None
