"""Storage figures of the PostgreSQL layout at one day of ``--rows`` predictions (a script).

    .venv/bin/python -m bench.storage [--rows 10000000] [--days 400] [--keep]

Creates a scratch database on ``CALMON_BENCH_POSTGRES_URL`` (default the local server's
``postgres`` database), migrates it, and writes ``--rows`` predictions of one model into one
day with random 32-character ids, a 10-character segment on each, half of them labelled, and
their registry rows (``INSERT … SELECT`` in the server, in batches of 10^6). Then prints:

- per row and in total: the day partition's heap and each of its indexes, the registry's heap
  and primary key (over its hash partitions);
- the change scan of the scheduler (one ``scan_model`` of the model, a scan after an earlier
  one and after the last write, so it finds nothing: the usual tick), milliseconds from the
  first statement to the commit, with one day partition and with ``--days`` attached;
- expiry of the day: registry ids deleted by page batches, then the partition dropped:
  seconds for each part.

The scratch database is dropped at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy.orm import Session, sessionmaker

from bench.scratch import migrated_scratch
from calmon.db.models import Model
from calmon.db.partitions import ensure_days, partition_name
from calmon.services.model_registry import ModelConfig, put_model
from calmon.services.retention import run_retention
from calmon.services.windows.planning import scan_model

DAY = date(2026, 1, 5)
CHUNK = 1_000_000
#: the scan margin (the default)
MARGIN = timedelta(minutes=5)


def _size(conn: psycopg.Connection[Any], query: str, *args: object) -> int:
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return int(row[0] or 0)


def _scan_ms(sessions: sessionmaker[Session], model_id: int, now: datetime) -> float:
    """Milliseconds of one ``scan_model`` of the model and its commit (median of 5), the
    scans ``now`` and a second apart."""
    times = []
    for k in range(5):
        began = time.perf_counter()
        with sessions() as session:
            model = session.get_one(Model, model_id)
            scan_model(session, model=model, now=now + timedelta(seconds=k), margin=MARGIN)
            session.commit()
        times.append((time.perf_counter() - began) * 1000)
    return sorted(times)[2]


def main() -> None:
    """Run the measurements and print them."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=400, help="partitions for the scan")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    with migrated_scratch(keep=args.keep) as scratch:
        sessions, libpq_url = scratch.sessions, scratch.libpq_url
        now = datetime.combine(DAY, datetime.min.time(), tzinfo=UTC) + timedelta(hours=23)
        with sessions() as session:
            model, _ = put_model(session, name="m", config=ModelConfig(), now=now, max_models=10)
            ensure_days(session.connection(), [DAY])
            session.commit()
        began = time.perf_counter()
        with psycopg.connect(libpq_url, autocommit=True) as conn:
            for first in range(0, args.rows, CHUNK):
                conn.execute(
                    "WITH r AS (SELECT md5(random()::text) AS id, %(day)s::timestamptz"
                    " + random() * interval '1 day' AS ts, g FROM generate_series(%(a)s, %(b)s) g),"
                    " k AS (INSERT INTO prediction_keys SELECT %(m)s, id, ts FROM r)"
                    " INSERT INTO predictions SELECT %(m)s, id, ts, random(),"
                    " CASE WHEN g %% 2 = 0 THEN (g %% 3 = 0)::int END, 'country=FR',"
                    " %(now)s, CASE WHEN g %% 2 = 0 THEN %(now)s::timestamptz END, %(now)s FROM r",
                    {
                        "day": DAY.isoformat() + "T00:00:00Z",
                        "a": first,
                        "b": min(first + CHUNK, args.rows) - 1,
                        "m": model.id,
                        "now": now,
                    },
                )
            conn.execute("VACUUM ANALYZE predictions")
            conn.execute("VACUUM ANALYZE prediction_keys")
            print(f"{args.rows:,} rows of one day written in {time.perf_counter() - began:.0f} s")
            part = partition_name(DAY)
            heap = _size(conn, "SELECT pg_relation_size(%s::regclass)", part)
            indexes = conn.execute(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass",
                (part,),
            ).fetchall()
            keys_heap = _size(
                conn,
                "SELECT sum(pg_relation_size(inhrelid)) FROM pg_inherits"
                " WHERE inhparent = 'prediction_keys'::regclass",
            )
            keys_index = _size(
                conn,
                "SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_inherits h"
                " JOIN pg_index i ON i.indrelid = h.inhrelid"
                " WHERE h.inhparent = 'prediction_keys'::regclass",
            )
            n = args.rows
            print(f"day partition heap: {heap / 2**20:,.0f} MiB = {heap / n:.0f} B/row")
            for index, size in indexes:
                print(f"  index {index}: {size / 2**20:,.0f} MiB = {size / n:.0f} B/row")
            print(
                f"registry heap: {keys_heap / 2**20:,.0f} MiB = {keys_heap / n:.0f} B/row;"
                f" primary key {keys_index / 2**20:,.0f} MiB = {keys_index / n:.0f} B/row"
            )
        # A first scan (every window new), then the usual ticks, past the margin of the writes.
        _scan_ms(sessions, model.id, now + 2 * MARGIN)
        one = _scan_ms(sessions, model.id, now + 3 * MARGIN)
        with sessions() as session:
            ensure_days(session.connection(), [DAY + timedelta(days=k) for k in range(args.days)])
            session.commit()
        many = _scan_ms(sessions, model.id, now + 4 * MARGIN)
        print(
            f"change scan (scan_model and commit): 1 partition {one:.1f} ms,"
            f" {args.days} partitions {many:.1f} ms"
        )
        began = time.perf_counter()
        result = run_retention(
            sessions, now=now + timedelta(days=2), retention_days=1, batch_size=50_000
        )
        print(
            f"expiry of the day ({result.predictions:,} predictions): registry ids and drop"
            f" in {time.perf_counter() - began:.1f} s"
        )


if __name__ == "__main__":
    main()
