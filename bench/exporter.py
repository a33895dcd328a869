"""Cost of ``/metrics`` at the caps: refresh time, scrape bytes, samples and time (a script).

    PYTHONPATH=. .venv/bin/python bench/exporter.py [--models 100] [--segments 1000]
        [--pi0 2] [--unbudgeted-models 10] [--max-series 20000] [--runs 3]

Builds a scratch PostgreSQL database (``bench/scratch.py``) holding ``--models`` models of
``max_segments`` 1,000, each with ``--segments`` tracked segments and one stored window per
segment and for ``*``: the documented record with every value defined and ``--pi0``
configured priors (``harness/records.py``), the most series a window can give.
Then the API app (``create_app``, real HTTP routes through the ASGI client) is started on it,
with a statement timeout of an hour so that the largest refresh completes (with the default
30 s, a refresh of everything at 10 models was cut off on a loaded 2-core machine), and, per
configuration, its exporter is refreshed and ``/metrics`` scraped ``--runs`` times:

- with ``--max-series`` (``CALMON_METRICS_MAX_SERIES``), on every model;
- without a budget that binds (10^9: everything exported, as before the budget existed), on
  the first ``--unbudgeted-models`` models only, once (everything at the caps is about 15
  million samples and 1.4 GB of text; the figures scale linearly with the models), then with
  the budget on the same models.

Prints, per configuration, the windows and series exported, the segments omitted, the refresh
time (median), the same refresh reading every pair's latest window into Python and choosing
there (as before the budget was applied in SQL; median, and the ratio of the two), the
scrape's bytes and its time (median).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from psycopg import sql
from sqlalchemy import insert

from bench.scratch import Scratch, migrated_scratch
from calmon.api.app import create_app
from calmon.db.models import Model, ModelSegment, WindowLatest, WindowResult
from calmon.exporter.refresh import WindowExporter
from calmon.exporter.snapshot import build_snapshot, load_candidates, load_records, select_windows
from calmon.records import RECORD_VERSION
from calmon.settings import Settings
from harness.records import make_record

UNBOUNDED = 10**9
#: seconds a statement may run: the bulk loads and the largest refresh must complete
LONG_STATEMENTS = 3600.0
START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
LENGTH = timedelta(minutes=5)


def _store(scratch: Scratch, *, first: int, models: int, segments: int, pi0: int) -> None:
    """Models ``first`` .. ``first + models - 1``, each with its tracked segments and one
    window of ``*`` and of every segment."""
    priors = [0.01, 0.05, 0.1, 0.25, 0.5][:pi0]
    record = make_record(segment="*", pi0=tuple(priors))
    now = datetime.now(UTC)
    with scratch.sessions() as session:
        ids = []
        for m in range(first, first + models):
            model = Model(
                name=f"model-{m:03d}",
                score_kind="probability",
                window="5m",
                threshold=0.5,
                pi0=priors,
                reference_kind="trailing",
                reference_windows=7,
                grace_seconds=0,
                max_segments=1000,
                created_at=now,
                updated_at=now,
            )
            session.add(model)
            session.flush()
            ids.append(model.id)
        names = [f"country=C{s:04d}" for s in range(segments)]
        session.execute(
            insert(ModelSegment),
            [
                {"model_id": i, "name": name, "position": p, "first_seen_at": now}
                for i in ids
                for p, name in enumerate(names)
            ],
        )
        session.commit()
    columns = sql.SQL(", ").join(
        sql.Identifier(name)
        for name in (
            "model_id",
            "segment",
            "starts_at",
            "ends_at",
            "computed_at",
            "computed_by",
            "version",
            "n",
            "n_pos",
            "unlabelled",
            "prior",
            "record",
            "record_version",
        )
    )
    table = sql.Identifier(WindowResult.__tablename__)
    raw = scratch.engine.raw_connection()
    try:
        cursor = raw.cursor()
        for i in ids:
            with cursor.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns)) as copy:
                for segment in ["*", *names]:
                    stored = json.dumps({**record, "segment": segment})
                    copy.write(
                        f"{i}\t{segment}\t{START.isoformat()}\t{(START + LENGTH).isoformat()}\t"
                        f"{now.isoformat()}\tbench\t1\t20000\t1000\t37\t0.05\t"
                        f"{stored.replace(chr(92), chr(92) * 2)}\t{RECORD_VERSION}\n"
                    )
            raw.commit()
        cursor.execute(sql.SQL("ANALYZE {}").format(table))
        cursor.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(WindowLatest.__tablename__)))
        raw.commit()
    finally:
        raw.close()


def _every_key_refresh(scratch: Scratch, *, max_series: int) -> float:
    """Seconds of the same refresh choosing among every (model, segment) pair's latest
    window read into Python (``load_candidates``), as refreshes did before
    ``load_current``: the baseline of the ratio, measured in the same run."""
    started = time.perf_counter()
    with scratch.sessions() as session:
        selection = select_windows(load_candidates(session), max_series=max_series)
        build_snapshot(
            load_records(session, selection.windows),
            max_series=max_series,
            omitted=selection.omitted,
        )
        session.rollback()
    return time.perf_counter() - started


def _measure(scratch: Scratch, *, max_series: int, runs: int, label: str) -> None:
    settings = Settings(
        database_url=scratch.settings.database_url,
        scheduler_interval=3600,
        retention_days=0,
        metrics_max_series=max_series,
        log_level="WARNING",
        db_statement_timeout=scratch.settings.db_statement_timeout,
    )
    with TestClient(create_app(settings)) as client:
        exporter: WindowExporter = client.app.state.window_exporter  # type: ignore[attr-defined]
        while exporter.collector.snapshot.loaded_at == 0.0:  # the start-up refresh
            time.sleep(0.1)
        refreshes, scrapes, baselines = [], [], []
        body = b""
        for _ in range(runs):
            started = time.perf_counter()
            assert exporter.refresh() is not None
            refreshes.append(time.perf_counter() - started)
            baselines.append(_every_key_refresh(scratch, max_series=max_series))
            started = time.perf_counter()
            response = client.get("/metrics")
            scrapes.append(time.perf_counter() - started)
            assert response.status_code == 200
            body = response.content
        snapshot = exporter.collector.snapshot
        omitted = sum(
            s.value
            for f in snapshot.families
            if f.name == "calmon_exporter_segments_omitted"
            for s in f.samples
        )
        samples = body.count(b"\ncalmon_")
        ratio = statistics.median(refreshes) / statistics.median(baselines)
        del response
    print(
        f"{label}: {snapshot.windows:,} windows, {snapshot.series:,} series "
        f"({samples:,} calmon_ samples on the scrape), {int(omitted):,} "
        f"segments omitted; refresh {statistics.median(refreshes):.2f} s "
        f"(runs {', '.join(f'{t:.2f}' for t in refreshes)}); reading every key instead "
        f"{statistics.median(baselines):.2f} s (ratio {ratio:.2f}); "
        f"scrape {len(body) / 1e6:.2f} MB "
        f"in {statistics.median(scrapes):.2f} s (runs {', '.join(f'{t:.2f}' for t in scrapes)})",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument("--pi0", type=int, default=2, choices=range(6))
    parser.add_argument("--unbudgeted-models", type=int, default=10)
    parser.add_argument("--max-series", type=int, default=Settings().metrics_max_series)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    few = min(args.unbudgeted_models, args.models)
    with migrated_scratch(db_statement_timeout=LONG_STATEMENTS) as scratch:
        started = time.perf_counter()
        _store(scratch, first=0, models=few, segments=args.segments, pi0=args.pi0)
        print(
            f"stored {few} models x (1 + {args.segments}) windows, {args.pi0} configured pi0, "
            f"in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        _measure(scratch, max_series=UNBOUNDED, runs=1, label=f"{few} models, no budget")
        _measure(
            scratch,
            max_series=args.max_series,
            runs=args.runs,
            label=f"{few} models, budget {args.max_series:,}",
        )
        if args.models > few:
            started = time.perf_counter()
            _store(
                scratch,
                first=few,
                models=args.models - few,
                segments=args.segments,
                pi0=args.pi0,
            )
            print(
                f"stored {args.models - few} more models in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
            _measure(
                scratch,
                max_series=args.max_series,
                runs=args.runs,
                label=f"{args.models} models, budget {args.max_series:,}",
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
