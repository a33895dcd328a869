"""Migrations: up, down to base, up again, on PostgreSQL and SQLite; schema equals the models;
what the revisions that move stored rows do to a populated database of the revision before."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, Text, cast, delete, insert, inspect, select, text, update
from sqlalchemy.orm import Session

from calmon.db import migrate
from calmon.db.models import (
    Base,
    Model,
    ModelScan,
    Prediction,
    UTCDateTime,
    WindowChange,
    WindowResult,
    WindowState,
    postgresql_metadata,
)
from calmon.db.session import create_db_engine, create_session_factory
from calmon.names import ALL_SEGMENTS
from calmon.records import RECORD_VERSION
from calmon.services.model_registry import ModelConfig, _columns, config_of, put_model
from calmon.services.windows.planning import request_outdated_records, scan_model
from calmon.settings import Settings

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "windows" / "golden_records.json"
#: the scan margin that revision 0004 back-fills with: the default one
DEFAULT_MARGIN = timedelta(seconds=Settings.model_fields["scheduler_scan_margin"].default)

TABLES = {
    "models",
    "predictions",
    "pending_labels",
    "model_segments",
    "model_scans",
    "window_states",
    "window_results",
    "window_results_latest",
    "window_scores",
    "window_changes",
    "web_sessions",
    "scheduler_leader",
    "shared_settings",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'calmon.db'}"
    else:
        url = request.getfixturevalue("postgres_database")
    engine = create_db_engine(Settings(database_url=url))
    yield engine
    engine.dispose()


def _partitions(engine: Engine) -> set[str]:
    """PostgreSQL: tables that are partitions of another (days of ``predictions``, hash parts
    of ``prediction_keys``)."""
    if engine.dialect.name != "postgresql":
        return set()
    with engine.connect() as conn:
        return set(
            conn.execute(text("SELECT relname FROM pg_class WHERE relispartition")).scalars()
        )


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"} - _partitions(engine)


def _expected(engine: Engine) -> set[str]:
    return TABLES | ({"prediction_keys"} if engine.dialect.name == "postgresql" else set())


def test_up_down_up(engine: Engine) -> None:
    assert _tables(engine) == set()
    migrate.upgrade(engine)
    assert _tables(engine) == _expected(engine)
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
    migrate.downgrade(engine, "base")
    assert _tables(engine) == set()
    assert _partitions(engine) == set()
    with engine.connect() as conn:
        assert migrate.current_revision(conn) is None
    migrate.upgrade(engine)
    assert _tables(engine) == _expected(engine)


def test_migrated_schema_matches_models(engine: Engine) -> None:
    """Every table of the models, and on PostgreSQL the registry too; partitions are the
    parents' business (their indexes and constraints are the parents')."""
    migrate.upgrade(engine)
    partitions = _partitions(engine)
    postgres = engine.dialect.name == "postgresql"

    def include(name: str | None, kind: str, _parent: Any) -> bool:
        return not (kind == "table" and (name in partitions or name == "prediction_keys"))

    def include_object(item: Any, _name: str | None, kind: str, *_: Any) -> bool:
        # PostgreSQL: predictions has no foreign key (a check per row; see
        # docs/reference/storage.md)
        parent = getattr(getattr(item, "parent", None), "name", None)
        return not (postgres and kind == "foreign_key_constraint" and parent == "predictions")

    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": include,
                "include_object": include_object,
            },
        )
        diff = compare_metadata(context, Base.metadata)
        registry = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_object": lambda _o, name, kind, _r, _c: (
                    kind != "table" or name == "prediction_keys"
                ),
            },
        )
        registry_diff = compare_metadata(registry, postgresql_metadata) if postgres else []
    assert diff == []
    assert registry_diff == []
    foreign = inspect(engine).get_foreign_keys("predictions")
    assert [key["referred_table"] for key in foreign] == ([] if postgres else ["models"])


def test_upgrade_twice_is_a_no_op(engine: Engine) -> None:
    migrate.upgrade(engine)
    migrate.upgrade(engine)
    assert _tables(engine) == _expected(engine)


def test_window_scores_are_stored_out_of_line_on_postgresql(postgres_database: str) -> None:
    """Sorted scores do not compress: PostgreSQL keeps them out of line, uncompressed."""
    engine = create_db_engine(Settings(database_url=postgres_database))
    try:
        migrate.upgrade(engine)
        with engine.connect() as conn:
            storage: dict[str, str] = dict(
                conn.execute(
                    text(
                        "SELECT attname, attstorage FROM pg_attribute"
                        " WHERE attrelid = 'window_scores'::regclass"
                        " AND attname IN ('positives', 'negatives')"
                    )
                ).all()
            )
    finally:
        engine.dispose()
    assert storage == {"positives": "e", "negatives": "e"}


_ROWS = text(
    "SELECT model_id, client_id, ts, score, label, segment, received_at, labelled_at,"
    " changed_at FROM predictions ORDER BY model_id, client_id"
)


def test_partitioning_moves_existing_rows_and_back(postgres_database: str) -> None:
    """0002 -> 0003 with rows over several days: every row lands in its day's partition with
    its registry entry; 0003 -> 0002 gives back the single keyed table with the same rows."""
    engine = create_db_engine(Settings(database_url=postgres_database))
    try:
        migrate.upgrade(engine, "0002")
        with engine.begin() as conn:
            conn.execute(
                text(
                    'INSERT INTO models (name, score_kind, "window", threshold, pi0,'
                    " reference_kind, reference_windows, grace_seconds, max_segments,"
                    " created_at, updated_at) VALUES ('m', 'probability', '1h', 0.5, '[0.5]',"
                    " 'trailing', 3, 0, 10, now(), now())"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO predictions SELECT 1, 'id-' || g,"
                    " '2025-01-01T23:30:00Z'::timestamptz + g * interval '7 hours', g / 1000.0,"
                    " CASE WHEN g % 3 = 0 THEN NULL ELSE g % 2 END,"
                    " CASE WHEN g % 5 = 0 THEN 'eu' END, now(), NULL, now()"
                    " FROM generate_series(1, 200) g"
                )
            )
            before = conn.execute(_ROWS).all()
            days = conn.execute(
                text("SELECT count(DISTINCT (ts AT TIME ZONE 'UTC')::date) FROM predictions")
            ).scalar_one()
        migrate.upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(_ROWS).all() == before
            placed = conn.execute(
                text(
                    "SELECT count(*) FROM predictions"
                    " WHERE tableoid::regclass::text <> 'predictions_'"
                    " || to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDD')"
                )
            ).scalar_one()
            assert placed == 0
            holding = conn.execute(
                text("SELECT count(DISTINCT tableoid) FROM predictions")
            ).scalar_one()
            assert holding == days
            keys = conn.execute(
                text(
                    "SELECT count(*) FROM prediction_keys k JOIN predictions p"
                    " USING (model_id, client_id, ts)"
                )
            ).scalar_one()
            assert keys == len(before)
        migrate.downgrade(engine, "0002")
        with engine.connect() as conn:
            assert conn.execute(_ROWS).all() == before
            assert _partitions(engine) == set()
        assert inspect(engine).get_pk_constraint("predictions")["constrained_columns"] == [
            "model_id",
            "client_id",
        ]
        assert "prediction_keys" not in _tables(engine)
    finally:
        engine.dispose()


def _model_at_0003(session: Session, *, name: str, window: str, now: datetime) -> int:
    """A model's row written with the columns revision 0003 has (the ORM's ``Model`` has
    columns of later revisions, which a select of it would read)."""
    columns = _columns(ModelConfig(window=window))
    del columns["objective"], columns["decision"]
    model_id: int | None = session.scalar(
        insert(Model)
        .values(name=name, created_at=now, updated_at=now, **columns)
        .returning(Model.id)
    )
    assert model_id is not None
    return model_id


def test_change_record_is_back_filled_and_the_index_comes_back_down(engine: Engine) -> None:
    """0003 -> 0004 records, per model, the windows changed since its last scan minus the
    default margin (every window of a model never scanned); a scan after it finds the change
    made before it; 0004 -> 0003 builds the ``changed_at`` index again."""
    migrate.upgrade(engine, "0003")
    scanned = datetime(2026, 2, 2, tzinfo=UTC)
    day = datetime(2026, 2, 1, tzinfo=UTC)
    minute = timedelta(minutes=1)
    sessions = create_session_factory(engine)
    with sessions() as session:
        hourly_id = _model_at_0003(session, name="hourly", window="1h", now=day)
        daily_id = _model_at_0003(session, name="daily", window="1d", now=day)
        stored = [
            (hourly_id, "a", day + 10 * minute, scanned - 10 * minute),
            (hourly_id, "b", day + 140 * minute, scanned - 2 * minute),
            (hourly_id, "c", day + 150 * minute, scanned - 20 * minute),
            (daily_id, "d", day + 60 * minute, scanned - 30 * minute),
            (daily_id, "e", day + 300 * minute, scanned - 40 * minute),
        ]
        for model_id, client_id, ts, changed in stored:
            session.add(
                Prediction(
                    model_id=model_id,
                    client_id=client_id,
                    ts=ts,
                    score=0.5,
                    label=None,
                    segment=None,
                    received_at=changed,
                    labelled_at=None,
                    changed_at=changed,
                )
            )
        session.add(ModelScan(model_id=hourly_id, scanned_at=scanned))
        for hour in (0, 2):
            state = WindowState.first_seen(
                model_id=hourly_id,
                starts_at=day + timedelta(hours=hour),
                ends_at=day + timedelta(hours=hour + 1),
                version=1,
                now=scanned - timedelta(hours=1),
            )
            state.computed_version = 1
            session.add(state)
        session.commit()
    migrate.upgrade(engine)
    with sessions() as session:
        records = session.execute(
            select(WindowChange.model_id, WindowChange.starts_at, WindowChange.changed_at).order_by(
                WindowChange.model_id
            )
        ).all()
        assert [tuple(r) for r in records] == [
            (hourly_id, day + timedelta(hours=2), scanned - 2 * minute),
            (daily_id, day, scanned - 30 * minute),
        ]
        model = session.get_one(Model, hourly_id)
        found = scan_model(session, model=model, now=scanned + minute, margin=DEFAULT_MARGIN)
        session.commit()
        versions = dict(
            session.execute(
                select(WindowState.starts_at, WindowState.version).where(
                    WindowState.model_id == hourly_id
                )
            ).all()
        )
    assert (found.new, found.changed) == (0, 1)
    assert versions == {day: 1, day + timedelta(hours=2): 2}
    indexes = {index["name"] for index in inspect(engine).get_indexes("predictions")}
    assert "ix_predictions_model_id_changed_at" not in indexes
    migrate.downgrade(engine, "0003")
    indexes = {index["name"] for index in inspect(engine).get_indexes("predictions")}
    assert "ix_predictions_model_id_changed_at" in indexes
    assert "window_changes" not in _tables(engine)


def test_models_keep_the_default_decision_across_0007(engine: Engine) -> None:
    """A model stored before revision 0007 gets ``decision`` null, shown as the defaults;
    the downgrade drops the column and the model stays."""
    migrate.upgrade(engine, "0006")
    now = datetime(2026, 11, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(
            text(
                'INSERT INTO models (name, score_kind, "window", threshold, pi0,'
                " reference_kind, reference_windows, grace_seconds, max_segments,"
                " created_at, updated_at) VALUES ('old', 'score', '1h', 0.5, '[]',"
                " 'trailing', 7, 600, 20, :now, :now)"
            ),
            {"now": now},
        )
    migrate.upgrade(engine)
    with create_session_factory(engine)() as session:
        model = session.scalars(select(Model).where(Model.name == "old")).one()
        assert model.decision is None
        assert config_of(model).decision.model_dump() == {
            "min_positives": 400,
            "max_span": "7d",
            "min_span": "20h",
        }
        put_model(
            session,
            name="old",
            config=ModelConfig(score_kind="score", decision={"min_positives": 40}),  # type: ignore[arg-type]
            now=now,
            max_models=10,
        )
        session.commit()
        assert model.decision == {
            "min_positives": 40,
            "max_span_seconds": 7 * 86_400,
            "min_span_seconds": 20 * 3_600,
        }
    migrate.downgrade(engine, "0006")
    assert "decision" not in {c["name"] for c in inspect(engine).get_columns("models")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM models")).scalar() == 1


def _golden_record(key: str) -> dict[str, Any]:
    """A record as computed today (``tests/data/windows/golden_records.json``)."""
    texts = json.loads(GOLDEN.read_text(encoding="utf-8"))
    record: dict[str, Any] = json.loads(texts[key])
    return record


def _older_shapes() -> list[tuple[dict[str, Any], int]]:
    """Records paired with the version 0011 gives them: today's shapes (an estimate, a
    positives' shift test and an advice, or none of them) 2; each older shape 1."""
    full = _golden_record("2021-03-01T00:15:00+00:00 *")
    bare = _golden_record("2021-03-01T00:00:00+00:00 *")
    assert full["estimated"] is not None
    assert full["decision"]["positives_shift"] is not None
    assert bare["estimated"] is None
    assert bare["decision"]["positives_shift"] is None
    shapes: list[tuple[dict[str, Any], int]] = [(full, 2), (bare, 2)]

    def older(change: Callable[[dict[str, Any]], None]) -> None:
        record = json.loads(json.dumps(full))
        change(record)
        shapes.append((record, 1))

    older(lambda r: r.pop("decision"))
    older(lambda r: r.pop("advice"))
    older(lambda r: r["intervals"].pop("absent"))
    older(lambda r: r["estimated"].pop("verdict"))
    older(lambda r: r["estimated"].pop("positive_class_ratio_resolved"))
    older(lambda r: r["decision"]["positives_shift"].pop("location_z"))
    older(lambda r: r["estimated"]["label_shift"].update(method="cvm_mixture_bootstrap"))
    older(lambda r: r["estimated"].update(verdict="class_ratio_moved"))
    older(lambda r: r["advice"].update(expected_intervals=None))
    older(
        lambda r: r["decision"].update(
            positives_shift={"method": "mann_whitney", "z": 0.4, "p_value": 0.34}
        )
    )
    return shapes


def test_records_get_the_version_of_their_shape_across_0011(engine: Engine) -> None:
    """0010 -> 0011 gives each stored record the version of its shape, leaves its bytes as
    they were, and requests the computed windows holding an older shape (and only those);
    later, the scheduler's request of records older than RECORD_VERSION finds a window whose
    record is outdated; the downgrade drops the column and keeps the records."""
    migrate.upgrade(engine, "0010")
    now = datetime(2026, 11, 1, tzinfo=UTC)
    hour = timedelta(hours=1)
    first = datetime(2026, 10, 1, tzinfo=UTC)
    shapes = _older_shapes()
    states = sa.table(
        "window_states",
        *(sa.column(name, sa.Integer()) for name in ("model_id", "version", "computed_version")),
        *(sa.column(name, UTCDateTime()) for name in ("starts_at", "ends_at", "checkpoint_at")),
        sa.column("failures", sa.Integer()),
    )
    results = sa.table(
        "window_results",
        *(sa.column(name, sa.Integer()) for name in ("model_id", "version", "n", "n_pos")),
        *(sa.column(name, UTCDateTime()) for name in ("starts_at", "ends_at", "computed_at")),
        sa.column("unlabelled", sa.Integer()),
        sa.column("segment", sa.String()),
        sa.column("computed_by", sa.String()),
        sa.column("record", sa.JSON()),
    )
    with engine.begin() as conn:
        conn.execute(
            text(
                'INSERT INTO models (name, score_kind, "window", threshold, pi0,'
                " reference_kind, reference_windows, grace_seconds, max_segments,"
                " created_at, updated_at) VALUES ('old', 'probability', '1h', 0.5, '[]',"
                " 'trailing', 7, 600, 20, :now, :now)"
            ),
            {"now": now},
        )
        model_id = conn.scalar(text("SELECT id FROM models WHERE name = 'old'"))
        for i, (record, _) in enumerate(shapes):
            start = first + i * hour
            window = {"model_id": model_id, "starts_at": start, "ends_at": start + hour}
            conn.execute(
                insert(states).values(
                    **window, version=1, computed_version=1, checkpoint_at=now, failures=0
                )
            )
            conn.execute(
                insert(results).values(
                    **window,
                    segment=ALL_SEGMENTS,
                    computed_at=now,
                    computed_by="test",
                    version=1,
                    n=record["n"],
                    n_pos=record["n_pos"],
                    unlabelled=record["unlabelled"],
                    record=record,
                )
            )
        stored_before = (
            conn.execute(select(cast(results.c.record, Text)).order_by(results.c.starts_at))
            .scalars()
            .all()
        )
    migrate.upgrade(engine)
    sessions = create_session_factory(engine)
    with sessions() as session:
        found = session.execute(
            select(WindowResult.record_version, cast(WindowResult.record, Text)).order_by(
                WindowResult.starts_at
            )
        ).all()
        assert [version for version, _ in found] == [version for _, version in shapes]
        assert [text_ for _, text_ in found] == stored_before
        requested = session.execute(
            select(WindowState.version, WindowState.requested_at.is_not(None)).order_by(
                WindowState.starts_at
            )
        ).all()
        assert [tuple(row) for row in requested] == [
            (1, False) if version == RECORD_VERSION else (2, True) for _, version in shapes
        ]
        session.execute(
            update(WindowResult)
            .where(WindowResult.starts_at == first)
            .values(record_version=RECORD_VERSION - 1)
        )
        model = session.get_one(Model, model_id)
        assert request_outdated_records(session, model=model, now=now) == 1
        assert request_outdated_records(session, model=model, now=now) == 0
        session.commit()
        assert session.get_one(WindowState, (model_id, first)).version == 2
    migrate.downgrade(engine, "0010")
    assert "record_version" not in {
        c["name"] for c in inspect(engine).get_columns("window_results")
    }
    with engine.connect() as conn:
        after = (
            conn.execute(select(cast(results.c.record, Text)).order_by(results.c.starts_at))
            .scalars()
            .all()
        )
    assert after == stored_before


def _latest_versions(engine: Engine) -> dict[str, int]:
    """Per segment, ``record_version`` of its row of ``window_results_latest``."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT segment, record_version FROM window_results_latest"))
        return dict(rows.tuples().all())


def test_the_latest_windows_carry_their_records_version_across_0012(engine: Engine) -> None:
    """0011 -> 0012 gives each pair's row of ``window_results_latest`` the ``record_version``
    of its latest window, and the triggers keep it as they keep the other columns (a newer
    window, an older one, a deleted latest window falling back to the one before, an update);
    down to 0011 the column goes and the triggers still follow the windows; up again it is
    filled anew."""
    migrate.upgrade(engine, "0011")
    now = datetime(2026, 11, 1, tzinfo=UTC)
    hour = timedelta(hours=1)
    record = _golden_record("2021-03-01T00:15:00+00:00 *")
    sessions = create_session_factory(engine)
    older = RECORD_VERSION - 1

    def row(segment: str, hours_ago: int, version: int) -> dict[str, Any]:
        start = now - hours_ago * hour
        return {
            "model_id": model_id,
            "segment": segment,
            "starts_at": start,
            "ends_at": start + hour,
            "computed_at": now,
            "computed_by": "test",
            "version": 1,
            "n": record["n"],
            "n_pos": record["n_pos"],
            "unlabelled": record["unlabelled"],
            "prior": None,
            "record": record,
            "record_version": version,
            "alerts": "[]",
        }

    with sessions() as session:
        model, _ = put_model(
            session, name="m", config=ModelConfig(window="1h"), now=now, max_models=10
        )
        model_id = model.id
        session.execute(
            insert(WindowResult),
            [row(ALL_SEGMENTS, 2, RECORD_VERSION), row(ALL_SEGMENTS, 1, older)],
        )
        session.execute(insert(WindowResult), [row("a", 1, RECORD_VERSION)])
        session.commit()
    migrate.upgrade(engine)
    assert _latest_versions(engine) == {ALL_SEGMENTS: older, "a": RECORD_VERSION}

    def follows(change: Any, expected: dict[str, int]) -> None:
        with sessions() as session:
            session.execute(change)
            session.commit()
        assert _latest_versions(engine) == expected

    latest = (WindowResult.segment == ALL_SEGMENTS, WindowResult.starts_at == now - hour)
    follows(
        delete(WindowResult).where(*latest), {ALL_SEGMENTS: RECORD_VERSION, "a": RECORD_VERSION}
    )
    follows(
        insert(WindowResult).values(row(ALL_SEGMENTS, 1, older)),
        {ALL_SEGMENTS: older, "a": RECORD_VERSION},
    )
    follows(
        insert(WindowResult).values(row(ALL_SEGMENTS, 3, RECORD_VERSION)),
        {ALL_SEGMENTS: older, "a": RECORD_VERSION},
    )
    follows(
        update(WindowResult).where(WindowResult.segment == "a").values(record_version=older),
        {ALL_SEGMENTS: older, "a": older},
    )
    migrate.downgrade(engine, "0011")
    assert "record_version" not in {
        c["name"] for c in inspect(engine).get_columns("window_results_latest")
    }
    with sessions() as session:
        session.execute(insert(WindowResult).values(row(ALL_SEGMENTS, 0, RECORD_VERSION)))
        session.commit()
    migrate.upgrade(engine)
    assert _latest_versions(engine) == {ALL_SEGMENTS: RECORD_VERSION, "a": older}
