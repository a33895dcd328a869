"""Reading one period's predictions as arrays (score, label, tracked segment position), with
the fingerprint of those changed since an instant: in the read itself where the database sends
binary arrays (PostgreSQL), in the same transaction otherwise. Why the PostgreSQL read looks as
it does: ``docs/reference/scheduler.md`` ("Computing a window", step 2).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy.orm import Session

from calmon.db.backend import sends_binary_arrays
from calmon.db.models import Model
from calmon.db.window_rows import WindowRows, read_row_tuples, read_sent_rows
from calmon.services.windows.planning import fingerprint


def load_rows(
    session: Session,
    *,
    model: Model,
    start: datetime,
    end: datetime,
    label: int | None = None,
    band_since: datetime | None = None,
) -> WindowRows:
    """The predictions of ``model`` with ``start <= ts < end`` (only those with ``label``
    when given), with their tracked segment's position, and with ``band_since`` the
    :class:`~calmon.db.window_states.Fingerprint` of those changed since then, read in the
    same statement (PostgreSQL) or the same transaction.
    """
    if sends_binary_arrays(session):
        return read_sent_rows(
            session, model=model, start=start, end=end, label=label, band_since=band_since
        )
    rows = read_row_tuples(session, model=model, start=start, end=end, label=label)
    if band_since is None:
        return rows
    band = fingerprint(session, model_id=model.id, start=start, end=end, since=band_since)
    return replace(rows, band=band)
