"""A back-fill computed by 1, then 2 (or more) `calmon scheduler` processes on PostgreSQL (a
script, not a test).

    .venv/bin/python bench/scheduler_scaleout.py [--models 4] [--windows 50] [--rows 100000]
        [--processes 1,2] [--interval 1]

Creates a scratch database on ``CALMON_BENCH_POSTGRES_URL`` (default the local server's
``postgres`` database), ``--models`` models (hourly windows, trailing reference of 7 windows,
π0 0.05 and 0.5, no grace) and ``--windows`` windows of ``--rows`` predictions for each (π =
0.01, every prediction labelled, written with binary ``COPY`` as ``bench/windows.py`` does).
Then, for each count of ``--processes``, it forgets every computed window (results, states,
scan marks), starts that many real `calmon scheduler` processes and waits until every window
is computed, and prints:

The scan margin is 5 s (``MARGIN``) and the back-fill starts once it has passed since the
load, so that scans do not re-read the bulk load (what they do for a margin after it).

- wall time from the processes' start to the last window stored (it includes their start,
  about a second, and the leader's first scan);
- how many windows each process computed (from its "window computed" log lines), and that
  every window was computed exactly once;
- the CPU seconds of each scheduler process (its resource usage at exit) and of the whole
  machine over the run (``/proc/stat``), the rest being PostgreSQL and whatever else runs.

A model with a trailing reference computes one window at a time, oldest first, so processes
share the work across models: use at least as many models as processes. The scratch database
is dropped at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import psycopg

from bench.scratch import migrated_scratch
from calmon.db.partitions import ensure_days
from calmon.services.model_registry import ModelConfig, ReferenceConfig, put_model

HERE = Path(__file__).resolve().parent
TIMEOUT = 3600.0
#: CALMON_SCHEDULER_SCAN_MARGIN of the run: after a bulk load, every loaded row is re-read by
#: each scan for a margin (``docs/reference/scheduler.md``); the back-fill starts a margin after the
#: load
MARGIN = 5


def _windows_bench() -> ModuleType:
    """``bench/windows.py`` (its COPY writer), loaded from its file."""
    spec = importlib.util.spec_from_file_location("bench_windows", HERE / "windows.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_total() -> float:
    """CPU seconds the whole machine spent busy (every core), from ``/proc/stat``."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(value) for value in fields]
    idle = ticks[3] + ticks[4]
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _pending(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[int, int]:
    """(window states, of which pending)."""
    row = conn.execute(
        "SELECT count(*), count(*) FILTER"
        " (WHERE computed_version IS NULL OR computed_version < version) FROM window_states"
    ).fetchone()
    assert row is not None
    return int(str(row[0])), int(str(row[1]))


def _computed(log: Path) -> list[dict[str, object]]:
    records = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("message") == "window computed":
                records.append(record)
    return records


def _run(
    *, url: str, libpq_url: str, processes: int, interval: float, total: int, logs: Path
) -> dict[str, object]:
    """One back-fill by ``processes`` schedulers; returns what it measured."""
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute("TRUNCATE window_results, window_scores, window_states, model_scans")
        conn.execute("VACUUM ANALYZE")
    env = {
        **os.environ,
        "CALMON_DATABASE_URL": url,
        "CALMON_SCHEDULER_INTERVAL": str(interval),
        "CALMON_SCHEDULER_SCAN_MARGIN": str(MARGIN),
        "CALMON_RETENTION_DAYS": "0",
        "CALMON_LOG_LEVEL": "INFO",
    }
    cpu_began = _cpu_total()
    began = time.perf_counter()
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    for i in range(processes):
        log = logs / f"p{processes}-{i}.log"
        with log.open("wb") as handle:
            process = subprocess.Popen(
                [sys.executable, "-m", "calmon.cli", "scheduler", "--metrics-port", "0"],
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        started.append((process, log))
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        while True:
            states, pending = _pending(conn)
            if states == total and pending == 0:
                break
            if time.perf_counter() - began > TIMEOUT:
                raise SystemExit("timed out")
            time.sleep(0.2)
    wall = time.perf_counter() - began
    cpu_machine = _cpu_total() - cpu_began
    cpu: list[float] = []
    for process, _ in started:
        process.send_signal(signal.SIGTERM)
    for process, _ in started:
        _, _, usage = os.wait4(process.pid, 0)
        process.returncode = 0
        cpu.append(usage.ru_utime + usage.ru_stime)
    shares = [len(_computed(log)) for _, log in started]
    once = Counter(
        (str(r["model"]), str(r["window_start"]), int(str(r["version"])))
        for _, log in started
        for r in _computed(log)
    )
    windows = Counter((model, start) for model, start, _ in once)
    return {
        "processes": processes,
        "wall_seconds": round(wall, 1),
        "windows_per_process": shares,
        "every_window_once": len(windows) == total and set(windows.values()) == {1},
        "scheduler_cpu_seconds": [round(c, 1) for c in cpu],
        "machine_cpu_seconds": round(cpu_machine, 1),
    }


def main() -> None:
    """Run the benchmark and print its report."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", type=int, default=4, help="models of the back-fill")
    parser.add_argument("--windows", type=int, default=50, help="windows per model")
    parser.add_argument("--rows", type=int, default=100_000, help="predictions per window")
    parser.add_argument("--processes", default="1,2", help="scheduler counts, comma-separated")
    parser.add_argument("--interval", type=float, default=1.0, help="CALMON_SCHEDULER_INTERVAL")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    counts = [int(value) for value in args.processes.split(",")]
    copies = _windows_bench()

    with migrated_scratch(keep=args.keep, retention_days=0) as scratch:
        settings, factory, libpq_url = scratch.settings, scratch.sessions, scratch.libpq_url
        ids = []
        with factory() as session:
            for m in range(args.models):
                created, _ = put_model(
                    session,
                    name=f"bench-{m}",
                    max_models=max(settings.max_models, args.models),
                    config=ModelConfig(
                        window="1h",
                        pi0=[0.05, 0.5],
                        grace="0s",
                        reference=ReferenceConfig(kind="trailing", windows=7),
                    ),
                    now=datetime.now(UTC),
                )
                ids.append(created.id)
            session.commit()
        total = args.models * args.windows
        print(
            f"{args.models} models x {args.windows} windows x {args.rows:,} predictions "
            f"= {total} windows; schedulers: {args.processes}; cpus: {os.cpu_count()}"
        )
        began = time.perf_counter()
        with factory() as session:
            # PostgreSQL keeps predictions in day partitions: make those of the windows
            days = {(copies.FIRST + i * copies.WINDOW).date() for i in range(args.windows + 1)}
            ensure_days(session.connection(), days)
            session.commit()
        with psycopg.connect(libpq_url) as conn:
            for m, model_id in enumerate(ids):
                for i in range(args.windows):
                    start = copies.FIRST + i * copies.WINDOW
                    body = copies._copy_body(model_id, start, args.rows, 0, seed=m * 10_000 + i)
                    copies._copy(conn, body)
                    conn.commit()
                starts = [copies.FIRST + i * copies.WINDOW for i in range(args.windows)]
                copies._record_copied(factory, model_id, starts)
        print(f"inserted with binary COPY in {time.perf_counter() - began:.1f} s")
        time.sleep(MARGIN)
        with tempfile.TemporaryDirectory() as logs:
            results = [
                _run(
                    url=settings.database_url,
                    libpq_url=libpq_url,
                    processes=n,
                    interval=args.interval,
                    total=total,
                    logs=Path(logs),
                )
                for n in counts
            ]
        print("processes  wall s  windows/h  per process        scheduler CPU s    machine CPU s")
        for result in results:
            wall = float(str(result["wall_seconds"]))
            print(
                f"{result['processes']:>9}  {wall:6.1f}  {total / wall * 3600:9.0f}  "
                f"{result['windows_per_process']!s:<17}  "
                f"{result['scheduler_cpu_seconds']!s:<17}  {result['machine_cpu_seconds']}"
            )
        for result in results:
            print(json.dumps(result))


if __name__ == "__main__":
    main()
