"""The shape of each stored record: column window_results.record_version.

``window_results.record_version`` (new, not null): the shape of the record's JSON
(:data:`calmon.records.RECORD_VERSION` when written), so that a record of an older shape is
recomputed instead of read around. The record's bytes do not change. Every writer gives the
version; the column's default (the current shape, which fills it as it is added) stays on
SQLite only, where dropping it would copy the table and lose the triggers of
``window_results_latest``.

The upgrade gives each stored record the version its shape matches:

- 2 (the shape of this revision) when it holds everything the record builder writes today;
- 1 when it lacks a key that records computed before it existed lack (``decision``,
  ``advice``, ``intervals.absent``, ``decision.positives_shift``, ``decision.reference``,
  ``estimated.label_shift``, ``estimated.verdict``, ``estimated.cannot_see``,
  ``estimated.positive_class_ratio_resolved``, the positives' shift test's ``mann_whitney_z``,
  ``placement_z`` and ``location_z``), or holds a value only those records hold (the
  label-shift check's ``cvm_mixture_bootstrap``, a positives' shift test other than
  ``location_and_placement``, the estimate's verdict ``class_ratio_moved``, an advice's
  ``expected`` without its ``expected_intervals``).

It then marks every computed window with a record of version 1 outdated, as a recompute
request does (its state's ``version`` bumped, ``requested_at`` set): the scheduler computes it
again, and its records are then of the current shape. The downgrade drops the column.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

import sqlalchemy as sa
from alembic import op

from calmon.db.models import UTCDateTime

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: the version of the record's shape at this revision, and of the shapes before it
CURRENT: Final = 2
OLDER: Final = 1

#: keys of the record present in every record of the current shape: (path of the object that
#: holds the key, the key); an object that is null (no estimate, no advice) holds nothing
REQUIRED_KEYS: Final = (
    ((), "decision"),
    ((), "advice"),
    (("intervals",), "absent"),
    (("decision",), "positives_shift"),
    (("decision",), "reference"),
    (("estimated",), "label_shift"),
    (("estimated",), "verdict"),
    (("estimated",), "cannot_see"),
    (("estimated",), "positive_class_ratio_resolved"),
    (("decision", "positives_shift"), "mann_whitney_z"),
    (("decision", "positives_shift"), "placement_z"),
    (("decision", "positives_shift"), "location_z"),
)
#: values only records of an older shape hold: (path, the old values)
OLD_VALUES: Final = (
    (("estimated", "label_shift", "method"), ("cvm_mixture_bootstrap",)),
    (("decision", "positives_shift", "method"), ("mann_whitney", "mann_whitney_and_placement")),
    (("estimated", "verdict"), ("class_ratio_moved",)),
)


def _postgresql_condition() -> str:
    """SQL true for a record of an older shape, on PostgreSQL (``record`` is ``json``)."""

    def path(parts: Sequence[str]) -> str:
        return "record" + "".join(f" -> '{part}'" for part in parts)

    def text_at(parts: Sequence[str]) -> str:
        return "(record #>> '{" + ",".join(parts) + "}')"

    terms = []
    for holder, key in REQUIRED_KEYS:
        missing = f"({path((*holder, key))}) IS NULL"
        terms.append(
            missing if not holder else f"(json_typeof({path(holder)}) = 'object' AND {missing})"
        )
    for parts, values in OLD_VALUES:
        listed = ", ".join(f"'{value}'" for value in values)
        terms.append(f"{text_at(parts)} IN ({listed})")
    terms.append(
        "(json_typeof(record -> 'advice' -> 'expected') = 'object'"
        " AND json_typeof(record -> 'advice' -> 'expected_intervals') = 'null')"
    )
    return " OR ".join(terms)


def _sqlite_condition() -> str:
    """SQL true for a record of an older shape, on SQLite (``record`` is JSON text)."""

    def path(parts: Sequence[str]) -> str:
        return "'$" + "".join(f".{part}" for part in parts) + "'"

    terms = []
    for holder, key in REQUIRED_KEYS:
        missing = f"json_type(record, {path((*holder, key))}) IS NULL"
        terms.append(
            missing
            if not holder
            else f"(json_type(record, {path(holder)}) = 'object' AND {missing})"
        )
    for parts, values in OLD_VALUES:
        listed = ", ".join(f"'{value}'" for value in values)
        terms.append(f"json_extract(record, {path(parts)}) IN ({listed})")
    terms.append(
        "(json_type(record, '$.advice.expected') = 'object'"
        " AND json_type(record, '$.advice.expected_intervals') = 'null')"
    )
    return " OR ".join(terms)


def upgrade() -> None:
    """Add ``window_results.record_version``, give each record the version of its shape, and
    request the windows holding a record of an older shape."""
    connection = op.get_bind()
    postgresql = connection.dialect.name == "postgresql"
    op.add_column(
        "window_results",
        sa.Column("record_version", sa.Integer(), nullable=False, server_default=str(CURRENT)),
    )
    older = _postgresql_condition() if postgresql else _sqlite_condition()
    results = sa.table(
        "window_results",
        sa.column("model_id", sa.Integer()),
        sa.column("starts_at", sa.String()),
        sa.column("record_version", sa.Integer()),
    )
    states = sa.table(
        "window_states",
        *(sa.column(name, sa.Integer()) for name in ("model_id", "version", "computed_version")),
        sa.column("starts_at", sa.String()),
        sa.column("requested_at", UTCDateTime()),
        sa.column("failures", sa.Integer()),
        sa.column("retry_at", UTCDateTime()),
    )
    connection.execute(sa.update(results).where(sa.text(older)).values(record_version=OLDER))
    if postgresql:
        op.alter_column("window_results", "record_version", server_default=None)
    holds_older = sa.exists().where(
        results.c.model_id == states.c.model_id,
        results.c.starts_at == states.c.starts_at,
        results.c.record_version < CURRENT,
    )
    connection.execute(
        sa.update(states)
        .where(states.c.computed_version >= states.c.version, holds_older)
        .values(
            version=states.c.version + 1,
            requested_at=datetime.now(UTC),
            failures=0,
            retry_at=None,
        )
    )


def downgrade() -> None:
    """Drop ``window_results.record_version`` (on SQLite in place: a copy of the table would
    lose the triggers of ``window_results_latest``)."""
    if op.get_bind().dialect.name == "postgresql":
        op.drop_column("window_results", "record_version")
    else:
        op.execute("ALTER TABLE window_results DROP COLUMN record_version")
