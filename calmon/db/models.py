"""Tables of calmon (SQLAlchemy 2.0 declarative models); the schema itself comes from migrations.

``docs/reference/storage.md`` explains the layout, the indexes and how data expires.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    Connection,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    event,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from calmon.records import RECORD_VERSION

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on every backend.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so values are stored as naive
    UTC text (which sorts and compares correctly) and read back as aware UTC. Naive values are
    refused on write: every instant in calmon carries an offset.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Normalise to UTC; drop the zone for SQLite."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: calmon stores only aware instants")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return aware UTC datetimes."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base with constraint names that are stable across backends."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {datetime: UTCDateTime()}  # noqa: RUF012


class Model(Base):
    """A monitored binary classifier and its configuration (see ``docs/reference/design.md``)."""

    __tablename__ = "models"
    __table_args__ = (
        CheckConstraint("score_kind IN ('probability', 'score')", name="score_kind"),
        CheckConstraint("reference_kind IN ('trailing', 'fixed')", name="reference_kind"),
        CheckConstraint("max_segments BETWEEN 1 AND 1000", name="max_segments"),
        CheckConstraint("grace_seconds >= 0", name="grace_seconds"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    score_kind: Mapped[str] = mapped_column(String(16))
    window: Mapped[str] = mapped_column(String(8))
    threshold: Mapped[float] = mapped_column(Double)
    pi0: Mapped[list[float]] = mapped_column(JSON)
    reference_kind: Mapped[str] = mapped_column(String(16))
    reference_windows: Mapped[int | None] = mapped_column(Integer)
    reference_start: Mapped[datetime | None]
    reference_end: Mapped[datetime | None]
    grace_seconds: Mapped[int] = mapped_column(Integer)
    max_segments: Mapped[int] = mapped_column(Integer)
    #: the pooled decision's setting ({"min_positives", "max_span_seconds", "min_span_seconds";
    #: the last absent when stored before it existed}), None: defaults
    decision: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    #: what the advised threshold aims at (``calmon.services.model_registry.Objective``), or None
    objective: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Prediction(Base):
    """One scored prediction of a model, with its label when known.

    The client's id is the key (per model): no surrogate id, so one index fewer to maintain
    on the hot insert path.

    ``changed_at`` is the last time the row was inserted or its label changed: a window's
    fingerprint reads it over the window's rows (:class:`WindowState`); the scheduler finds the
    windows to recompute through :class:`WindowChange`, written with it.

    On PostgreSQL the table is range-partitioned by ``ts``, one partition per UTC day
    (:mod:`calmon.db.partitions`), with both indexes local, no unique index (the key is
    kept unique by :data:`prediction_keys`) and no foreign key (a check per inserted row;
    ingestion writes only for a model it holds locked). SQLite keeps one table with this
    primary key and foreign key.
    """

    __tablename__ = "predictions"
    __table_args__ = (
        Index("ix_predictions_model_id_ts", "model_id", "ts"),
        CheckConstraint("label IN (0, 1)", name="label"),
    )

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    ts: Mapped[datetime]
    score: Mapped[float] = mapped_column(Double)
    label: Mapped[int | None] = mapped_column(SmallInteger)
    segment: Mapped[str | None] = mapped_column(String(64))
    received_at: Mapped[datetime]
    labelled_at: Mapped[datetime | None]
    changed_at: Mapped[datetime]


#: PostgreSQL only: every stored prediction id with its event time, hash-partitioned on
#: ``client_id`` (32 partitions). It keeps ``(model_id, client_id)`` unique across the day
#: partitions of ``predictions`` and tells a label which partition holds its prediction.
#: No foreign key, like ``predictions`` there. Outside ``Base.metadata`` (which SQLite's
#: schema matches), with a copy of ``models``.
postgresql_metadata = MetaData(naming_convention=NAMING_CONVENTION)
Base.metadata.tables["models"].to_metadata(postgresql_metadata)
prediction_keys = Table(
    "prediction_keys",
    postgresql_metadata,
    Column("model_id", Integer, primary_key=True),
    Column("client_id", String(128), primary_key=True),
    Column("ts", UTCDateTime(), nullable=False),
)


class PendingLabel(Base):
    """A label whose prediction has not arrived yet; applied when it does."""

    __tablename__ = "pending_labels"
    __table_args__ = (CheckConstraint("label IN (0, 1)", name="label"),)

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    label: Mapped[int] = mapped_column(SmallInteger)
    received_at: Mapped[datetime]


#: window states still to compute (never computed, or data changed since)
PENDING_WINDOW = text("(computed_version IS NULL OR computed_version < version)")


class ModelSegment(Base):
    """A named segment whose windows the scheduler computes: the first ``max_segments`` seen.

    ``position`` is the order of first sight (0 first); a model computes the segments with
    ``position < max_segments``, so the set only grows and never changes under its series.
    """

    __tablename__ = "model_segments"
    __table_args__ = (UniqueConstraint("model_id", "position"),)

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    first_seen_at: Mapped[datetime]


class ModelScan(Base):
    """When the scheduler last scanned a model's predictions for changes (its start time)."""

    __tablename__ = "model_scans"

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    scanned_at: Mapped[datetime]


class WindowChange(Base):
    """A window of a model whose predictions changed at ``changed_at``: one row per window a
    prediction or label batch touched, stamped like the rows' ``changed_at``.

    The change scan reads these instead of ``predictions`` and deletes those it can never read
    again, so the table holds minutes of changes (:mod:`calmon.db.changes`). The key leads
    with ``model_id`` then ``changed_at``: it is the scan's index; not partitioned.
    """

    __tablename__ = "window_changes"

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    changed_at: Mapped[datetime] = mapped_column(primary_key=True)
    starts_at: Mapped[datetime] = mapped_column(primary_key=True)


class WindowState(Base):
    """What the scheduler knows of one window of a model that holds predictions.

    ``version`` goes up each time the scan sees the window's predictions change;
    ``computed_version`` is the version the stored results were computed from, so the window
    is pending while it is NULL or lower. ``checkpoint_at``, ``band_count`` and ``band_sum``
    fingerprint the predictions changed since ``checkpoint_at`` minus the scan margin (how
    many, and the sum of their ``changed_at`` in microseconds past that instant, as decimal
    text), which tells a change the results (or, before the first computation, the version)
    already hold from one they do not; the scan sets them with each version, the computation
    with its results.
    ``requested_at`` marks a recompute asked through the API; ``failures`` and ``retry_at``
    space out retries of a window whose computation fails.
    """

    __tablename__ = "window_states"
    __table_args__ = (
        Index(
            "ix_window_states_pending",
            "model_id",
            "starts_at",
            postgresql_where=PENDING_WINDOW,
            sqlite_where=PENDING_WINDOW,
        ),
    )

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    starts_at: Mapped[datetime] = mapped_column(primary_key=True)
    ends_at: Mapped[datetime]
    version: Mapped[int] = mapped_column(Integer)
    computed_version: Mapped[int | None] = mapped_column(Integer)
    checkpoint_at: Mapped[datetime]
    band_count: Mapped[int | None] = mapped_column(BigInteger)
    band_sum: Mapped[str | None] = mapped_column(String(40))
    requested_at: Mapped[datetime | None]
    failures: Mapped[int] = mapped_column(Integer)
    retry_at: Mapped[datetime | None]

    @classmethod
    def first_seen(
        cls,
        *,
        model_id: int,
        starts_at: datetime,
        ends_at: datetime,
        version: int,
        now: datetime,
        band_count: int | None = None,
        band_sum: str | None = None,
    ) -> WindowState:
        """The state of a window the scheduler has just learnt of: never computed, checkpoint
        ``now`` with its fingerprint when the scan read one (a recompute request reads none),
        no request, no failure."""
        return cls(
            model_id=model_id,
            starts_at=starts_at,
            ends_at=ends_at,
            version=version,
            computed_version=None,
            checkpoint_at=now,
            band_count=band_count,
            band_sum=band_sum,
            requested_at=None,
            failures=0,
            retry_at=None,
        )


class WindowResult(Base):
    """The computed result of one window and segment (``*`` = every prediction).

    ``record`` is the JSON the API serves; the other columns repeat the parts that queries
    filter or sort on. ``record_version`` is the shape of ``record``
    (:data:`calmon.records.RECORD_VERSION` when it was written): a window holding a record of
    an older shape is computed again. ``computed_by`` names the scheduler instance that computed it.
    ``alerts``: the record's alert states as its writer judged them (a JSON array of texts,
    ``[]`` when quiet; :func:`calmon.services.stored_windows.judged_alerts`), NULL for a row
    written without them (its readers judge the record). Triggers keep
    :class:`WindowLatest` from this table (``docs/reference/storage.md``, "The latest windows").
    """

    __tablename__ = "window_results"
    __table_args__ = (Index("ix_window_results_model_id_starts_at", "model_id", "starts_at"),)

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    segment: Mapped[str] = mapped_column(String(64), primary_key=True)
    starts_at: Mapped[datetime] = mapped_column(primary_key=True)
    ends_at: Mapped[datetime]
    computed_at: Mapped[datetime]
    computed_by: Mapped[str] = mapped_column(String(128))
    version: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(BigInteger)
    n_pos: Mapped[int] = mapped_column(BigInteger)
    unlabelled: Mapped[int] = mapped_column(BigInteger)
    prior: Mapped[float | None] = mapped_column(Double)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
    record_version: Mapped[int] = mapped_column(Integer, default=RECORD_VERSION)
    alerts: Mapped[str | None] = mapped_column(Text)


#: the stored records that are served: those of the shape the builder writes today (a window
#: holding an older one reads as not computed until the scheduler computes it again)
CURRENT_RECORD = WindowResult.record_version == RECORD_VERSION
#: latest windows with alert states or not judged: those the model list reads one by one
FLAGGED_WINDOW = text("alerts IS NULL OR alerts <> '[]'")


class WindowLatest(Base):
    """The latest stored window of one model and segment (the greatest ``starts_at`` of its
    ``window_results`` rows): its period, ``computed_at``, ``alerts`` and ``record_version``
    as stored there, and the segment's tracked position.

    Written only by triggers on ``window_results`` (migrations 0010 and 0012), in the
    transaction that writes or deletes the records, so it never disagrees with them; the model
    list and the exporter read it instead of probing ``window_results`` once per pair
    (``docs/reference/storage.md``, "The latest windows").
    """

    __tablename__ = "window_results_latest"
    __table_args__ = (
        Index(
            "ix_window_results_latest_model_id_starts_at_position",
            "model_id",
            "starts_at",
            "position",
            "record_version",
        ),
        Index(
            "ix_window_results_latest_model_id_computed_at",
            "model_id",
            "computed_at",
            "starts_at",
            "position",
            "record_version",
        ),
        Index(
            "ix_window_results_latest_flagged",
            "model_id",
            postgresql_where=FLAGGED_WINDOW,
            sqlite_where=FLAGGED_WINDOW,
        ),
    )

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    segment: Mapped[str] = mapped_column(String(64), primary_key=True)
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    computed_at: Mapped[datetime]
    alerts: Mapped[str | None] = mapped_column(Text)
    #: the shape of the window's record: a pair whose latest window holds an older one is not
    #: served (:data:`CURRENT_LATEST`)
    record_version: Mapped[int] = mapped_column(Integer)
    #: the segment's tracked position (``model_segments``), NULL for ``*``
    position: Mapped[int | None] = mapped_column(Integer)


#: the latest windows that are served: those holding a record of the current shape
#: (:data:`CURRENT_RECORD`)
CURRENT_LATEST = WindowLatest.record_version == RECORD_VERSION


class WindowScores(Base):
    """Each class's scores of a computed window and segment, sorted: the parts a trailing
    reference set is pooled from (float64 little-endian, ascending)."""

    __tablename__ = "window_scores"

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    segment: Mapped[str] = mapped_column(String(64), primary_key=True)
    starts_at: Mapped[datetime] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    positives: Mapped[bytes] = mapped_column(LargeBinary)
    negatives: Mapped[bytes] = mapped_column(LargeBinary)


class WebSession(Base):
    """A login of the web view (``docs/reference/ui.md``, "Tokens"): the browser's cookie holds a
    random session id, this row only its SHA-256 (``id_hash``), so a copy of the table opens
    nothing.

    ``token_key`` is a slow, salted digest of the token that logged in: a session is honoured
    only while that token is configured with ``read``, and grants ``scopes`` (``read``) at
    most. ``expires_at`` is fixed at login; expired rows are deleted by the next login and the
    retention run, a token's oldest beyond its cap by the next login
    (:mod:`calmon.services.web_sessions`).
    """

    __tablename__ = "web_sessions"
    __table_args__ = (Index("ix_web_sessions_expires_at", "expires_at"),)

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_key: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class SchedulerLeader(Base):
    """The scheduler's leader lease (``docs/reference/scheduler.md``, "The leader lock"): one row
    per role (``scheduler``), naming the process that leads and when its lease ends, in the
    database server's clock. The leader renews ``expires_at`` every few seconds; another
    process takes the row over once it has passed."""

    __tablename__ = "scheduler_leader"

    role: Mapped[str] = mapped_column(String(32), primary_key=True)
    instance: Mapped[str] = mapped_column(String(200))
    acquired_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class SharedSetting(Base):
    """A setting every process of one database reads from here rather than from its own
    environment (``retention_days``: ``docs/reference/storage.md``, "Retention"), so that no two
    processes act on different values. ``changed_at`` is when the value was stored (seeded by
    the first process that found none, or changed by ``calmon retention``)."""

    __tablename__ = "shared_settings"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer)
    changed_at: Mapped[datetime]


@event.listens_for(Prediction, "before_insert")
def _make_partition(_mapper: Any, connection: Connection, target: Prediction) -> None:
    """On PostgreSQL, make the day partition of a prediction stored through the ORM if it is
    missing (ingestion makes those of a batch itself; see :mod:`calmon.db.partitions`)."""
    if connection.dialect.name != "postgresql":
        return
    from calmon.db.partitions import ensure_days, utc_day

    ensure_days(connection, [utc_day(target.ts)])
