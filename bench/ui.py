"""Load time of a model page of 500 windows in headless Chromium, or of the model list at many
segments (a script, not a test).

    PYTHONPATH=. .venv/bin/python bench/ui.py [--windows 500] [--runs 7]
    PYTHONPATH=. .venv/bin/python bench/ui.py --list [--models 100] [--segments 1000] [--runs 7]
        [--postgres]

Starts `calmon serve` on a scratch SQLite database, feeds it a `calmon simulate` stream (three
phases of 3 windows) whose windows its scheduler computes, stores those records again as
``--windows`` earlier windows of another model (what the window service reads is the same; it
is only quicker than computing them), then loads that model's page ``--runs`` times in
Chromium (Debian's ``chromium`` or ``CALMON_CHROMIUM``) and prints, per load, the time from
navigation start to the end of the load event, the server's share (request start to response
end) and the browser's (response end to load end), the page's size and element count, and
the median's ratio to the 1 s budget.

With ``--list``: a scratch SQLite database holds ``--models`` models of ``--segments`` tracked
segments, each with one stored window of ``*`` and of every segment (the documented record
with every value defined, ``harness/records.py``; one segment in a hundred alerting,
the others quiet; stored with their alert states, as the scheduler stores them), and the API
app (``create_app``, real routes through the ASGI client) serves ``/ui``: the first load (the
``*`` records read), then ``--runs`` loads, their median and its ratio to the 0.1 s budget,
the CPU time the process spent on each, and the same for a database of one model with ten
segments, measured in the same run. With ``--postgres`` the same windows are stored in a
PostgreSQL scratch database (``bench/scratch.py``) and only the many-model list is timed.
"""

from __future__ import annotations

import argparse
import copy
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import insert, text

from bench.scratch import Scratch, migrated_scratch
from calmon.api.app import create_app
from calmon.db import migrate
from calmon.db.models import Model, ModelSegment, WindowResult
from calmon.db.session import create_db_engine
from calmon.records import WindowRecord
from calmon.services.windows.record import record_alerts
from calmon.settings import Settings
from harness.browser import Offline, chromium, chromium_path, load_seconds
from harness.processes import wait_until_up
from harness.records import make_record
from harness.stack import SERVE, LocalStack
from harness.web_view import MODEL, simulate, store_copies

TARGET = "bench"
#: the load time of a page of 500 windows the ratio is printed against (docs/reference/ui.md,
#: "Speed")
BUDGET_SECONDS = 1.0
SERVER_PART = (
    "() => { const n = performance.getEntriesByType('navigation')[0];"
    " return n.responseEnd - n.requestStart; }"
)


#: seconds the model list may take at 100 models of 1,000 segments
LIST_BUDGET = 0.1
LIST_START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


def _list_database(path: Path, *, models: int, segments: int) -> str:
    """A migrated SQLite file of ``models`` x (1 + ``segments``) stored windows; its URL."""
    url = f"sqlite:///{path}"
    engine = create_db_engine(Settings(database_url=url))
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    alerting = make_record(segment="*", pi0=(0.01, 0.05))
    quiet = copy.deepcopy(alerting)
    quiet["reference"]["prior"] = quiet["prior"]
    texts = {True: json.dumps(alerting), False: json.dumps(quiet)}
    judged = {
        True: record_alerts(cast(WindowRecord, alerting)),
        False: record_alerts(cast(WindowRecord, quiet)),
    }
    start, end = (
        f"{t:%Y-%m-%d %H:%M:%S}.000000" for t in (LIST_START, LIST_START + timedelta(minutes=5))
    )
    with sqlite3.connect(path) as db:
        for m in range(models):
            db.execute(
                "INSERT INTO models (id, name, score_kind, window, threshold, pi0,"
                " reference_kind, reference_windows, grace_seconds, max_segments, created_at,"
                " updated_at) VALUES (?, ?, 'probability', '5m', 0.5, '[0.01, 0.05]',"
                " 'trailing', 7, 0, 1000, ?, ?)",
                (m + 1, f"model-{m:03d}", end, end),
            )
            names = [f"country=C{s:04d}" for s in range(segments)]
            db.executemany(
                "INSERT INTO model_segments (model_id, name, position, first_seen_at)"
                " VALUES (?, ?, ?, ?)",
                [(m + 1, name, p, end) for p, name in enumerate(names)],
            )
            db.executemany(
                "INSERT INTO window_results (model_id, segment, starts_at, ends_at, computed_at,"
                " computed_by, version, n, n_pos, unlabelled, prior, record, alerts)"
                " VALUES (?, ?, ?, ?, ?, 'bench', 1, 20000, 1000, 37, 0.05, ?, ?)",
                [
                    (m + 1, name, start, end, end, texts[p % 100 == 7], judged[p % 100 == 7])
                    for p, name in enumerate(["*", *names])
                ],
            )
        db.execute("ANALYZE")
    return url


def _list_loads(url: str, runs: int) -> tuple[float, list[float], list[float]]:
    """Seconds of the first load of ``/ui``, and of the ``runs`` next ones: elapsed, then
    the CPU time this process spent on each (the app runs in it: a figure a loaded machine
    changes less than the elapsed one)."""
    settings = Settings(
        database_url=url, retention_days=0, log_level="WARNING", scheduler_interval=3600
    )
    with TestClient(create_app(settings)) as client:
        times, cpu = [], []
        for _ in range(runs + 1):
            started, used = time.perf_counter(), time.process_time()
            response = client.get("/ui")
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
            response.raise_for_status()
    return times[0], times[1:], cpu[1:]


def _fill_postgresql(scratch: Scratch, *, models: int, segments: int) -> None:
    """The windows of :func:`_list_database`, stored in a PostgreSQL scratch database."""
    alerting = cast(WindowRecord, make_record(segment="*", pi0=(0.01, 0.05)))
    quiet = copy.deepcopy(alerting)
    quiet["reference"]["prior"] = quiet["prior"]  # type: ignore[index]
    records = {True: alerting, False: quiet}
    judged = {kind: record_alerts(record) for kind, record in records.items()}
    end = LIST_START + timedelta(minutes=5)
    names = [f"country=C{s:04d}" for s in range(segments)]
    for m in range(models):
        with scratch.sessions() as session:
            model = Model(
                name=f"model-{m:03d}",
                score_kind="probability",
                window="5m",
                threshold=0.5,
                pi0=[0.01, 0.05],
                reference_kind="trailing",
                reference_windows=7,
                grace_seconds=0,
                max_segments=1000,
                created_at=end,
                updated_at=end,
            )
            session.add(model)
            session.flush()
            session.execute(
                insert(ModelSegment),
                [
                    {"model_id": model.id, "name": name, "position": p, "first_seen_at": end}
                    for p, name in enumerate(names)
                ],
            )
            session.execute(
                insert(WindowResult),
                [
                    {
                        "model_id": model.id,
                        "segment": name,
                        "starts_at": LIST_START,
                        "ends_at": end,
                        "computed_at": end,
                        "computed_by": "bench",
                        "version": 1,
                        "n": 20000,
                        "n_pos": 1000,
                        "unlabelled": 37,
                        "prior": 0.05,
                        "record": records[p % 100 == 7],
                        "alerts": judged[p % 100 == 7],
                    }
                    for p, name in enumerate(["*", *names])
                ],
            )
            session.commit()
    with scratch.engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()


def _list_postgresql(args: argparse.Namespace) -> int:
    with migrated_scratch() as scratch:
        started = time.perf_counter()
        _fill_postgresql(scratch, models=args.models, segments=args.segments)
        stored = time.perf_counter() - started
        print(f"stored {args.models} models x (1 + {args.segments}) windows in {stored:.0f} s")
        first, times, cpu = _list_loads(scratch.settings.database_url, args.runs)
    median = statistics.median(times)
    print(
        f"PostgreSQL: model list, {args.models} models x {args.segments} segments:"
        f" first load {first:.3f} s"
    )
    print("next loads, s: " + ", ".join(f"{t:.3f}" for t in times))
    print(f"median {median:.3f} s; ratio to the {LIST_BUDGET} s budget: {median / LIST_BUDGET:.2f}")
    print(
        "CPU time of this process for those loads, s: "
        + ", ".join(f"{t:.3f}" for t in cpu)
        + f"; median {statistics.median(cpu):.3f} s"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    if args.postgres:
        return _list_postgresql(args)
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        started = time.perf_counter()
        url = _list_database(directory / "many.db", models=args.models, segments=args.segments)
        stored = time.perf_counter() - started
        print(f"stored {args.models} models x (1 + {args.segments}) windows in {stored:.0f} s")
        first, times, cpu = _list_loads(url, args.runs)
        few_first, few, _ = _list_loads(
            _list_database(directory / "few.db", models=1, segments=10), args.runs
        )
    median, few_median = statistics.median(times), statistics.median(few)
    print(f"model list, {args.models} models x {args.segments} segments: first load {first:.3f} s")
    print("next loads, s: " + ", ".join(f"{t:.3f}" for t in times))
    print(f"median {median:.3f} s; ratio to the {LIST_BUDGET} s budget: {median / LIST_BUDGET:.2f}")
    print(
        "CPU time of those loads, s: "
        + ", ".join(f"{t:.3f}" for t in cpu)
        + f"; median {statistics.median(cpu):.3f} s"
    )
    print(
        f"1 model x 10 segments: first load {few_first:.3f} s, median {few_median:.3f} s;"
        f" ratio of the medians: {median / few_median:.1f}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--list", action="store_true", help="time the model list instead")
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument(
        "--postgres", action="store_true", help="--list on a PostgreSQL scratch database"
    )
    args = parser.parse_args()
    if args.list:
        return _list(args)
    path = chromium_path()
    if path is None:
        print("no Chromium: install the `chromium` package or set CALMON_CHROMIUM")
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        database_url = f"sqlite:///{directory / 'calmon.db'}"
        stack = LocalStack.create(directory, database_url=database_url, scheduler_interval="1")
        with stack.start(SERVE) as serve:
            wait_until_up(stack.base, serve)
            simulate(
                stack.base, model=MODEL, truth=directory / "truth.json", env=stack.environment()
            )
            created = httpx.put(f"{stack.base}/v1/models/{TARGET}", json={"window": "5m"})
            created.raise_for_status()
            store_copies(database_url, source=MODEL, target=TARGET, count=args.windows)
            url = f"{stack.base}/ui/models/{TARGET}"
            with chromium(path) as browser:
                recorder = Offline(browser, stack.base)
                with recorder.context() as context:
                    page = context.new_page()
                    page.goto(url, wait_until="load")  # warm-up: imports, caches
                    times, servers = [], []
                    for _ in range(args.runs):
                        _, (elapsed,) = load_seconds(page, url, runs=1)
                        times.append(elapsed)
                        servers.append(page.evaluate(SERVER_PART) / 1000.0)
                    median = statistics.median(times)
                    size, elements = page.evaluate(
                        "() => [performance.getEntriesByType('navigation')[0].transferSize,"
                        " document.getElementsByTagName('*').length]"
                    )
                    rows = page.locator("#verdicts tbody tr").count()
                elsewhere = recorder.elsewhere()
    print(f"model page of {rows} windows, {args.runs} loads in Chromium")
    print("load (navigation start to load end), s: " + ", ".join(f"{t:.3f}" for t in times))
    print(f"median {median:.3f} s, fastest {min(times):.3f} s")
    print(
        "of which the server (request start to response end), s: "
        + ", ".join(f"{t:.3f}" for t in servers)
    )
    drawing = [t - server for t, server in zip(times, servers, strict=True)]
    print(f"browser part (response end to load end): median {statistics.median(drawing):.3f} s")
    print(f"page: {size / 1024:.0f} KiB transferred, {elements} elements")
    print(f"requests to another host: {len(elsewhere)}")
    print(f"ratio to the {BUDGET_SECONDS:.0f} s budget: {median / BUDGET_SECONDS:.2f}")
    return 0 if rows == args.windows and not elsewhere else 1


if __name__ == "__main__":
    sys.exit(main())
