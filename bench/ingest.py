"""Ingestion throughput on PostgreSQL, end to end through `calmon api` (a script, not a test).

    .venv/bin/python bench/ingest.py [--predictions 1000000] [--batch 1000] [--clients 8]
        [--large-batch 10000] [--workers 2] [--postgres URL] [--service] [--keep]
    .venv/bin/python bench/ingest.py --client [--predictions 1000000] [--senders 2] [--rounds 2]

Creates a scratch database on ``--postgres`` (default ``CALMON_TEST_POSTGRES_URL``, else the
local server's ``postgres`` database), migrates it, starts ``calmon api --workers N`` on it
(default settings, logs to a scratch file) and creates a ``probability`` model. Then, in one
run, and described in docs/measurements/ingestion.md:

- api, three phases, calmon's tables emptied before each: JSON bodies, then Arrow IPC stream
  bodies (``docs/reference/api.md``; the segment dictionary-encoded), in batches of ``--batch``,
  then Arrow in batches of ``--large-batch`` (0: no such phase). In each, ``--clients`` client
  processes send ``--predictions`` predictions (random 32-character ids, event times spread over
  the last day, a segment on every prediction, a label on half of them). Bodies are serialised
  before the clock starts and each client keeps one connection alive (opened 50 ms apart), so
  the clients cost little. The rate is predictions over the time from the first request sent to
  the last answer received. Every answer must be 200 with ``new`` equal to the batch size. Also
  printed: latency percentiles per request, CPU per prediction of the workers (and each worker's
  CPU seconds, which shows how connections were shared), of the database server processes
  serving them, and of the clients, and how many cores the machine had busy (ours and others').
- stored exactly once: ``count(*)`` and ``count(DISTINCT client_id)`` of the model's rows equal
  the number of predictions sent (and no request failed).
- memory: each worker's resident set (``VmRSS`` in ``/proc``) sampled every 0.2 s during the
  load: first sample, sample after a tenth of the run, peak, last sample.
- service (``--service``): the API is stopped, ``predictions`` truncated, and the same bodies
  stored from as many processes through the service layer in-process (model look-up,
  validation, ``ingest_predictions``, commit: what the route does, without HTTP, uvicorn and
  FastAPI), which splits the workers' CPU between the web layer and the rest.
- copy baselines, the API stopped, each from one process, one binary ``COPY`` and one commit
  of the same rows (the columns the API writes, with the same values; streams built before
  the clock starts):

  (a) minimal: into a plain table of the same columns with just the unique key
      ``(model_id, client_id)`` and a time index ``(model_id, ts)``;
  (b) calmon: into calmon's tables as they are (on PostgreSQL the day partitions of
      ``predictions`` and the id registry ``prediction_keys``, both emptied first).

- ratio of each API phase's rate to each baseline, against the targets (JSON: ≥ 0.5 of (a),
  stretch ≥ 0.6; Arrow: ≥ 0.8 of (a)) and ≥ 80,000 predictions/s, with the machine's load
  average before each phase and at the end.

With ``--client`` it measures instead the sender package ``calmon_client`` (``client/``, which
must be importable) against a hand-written sender, on the same API: ``--senders`` processes
each send their share of ``--predictions`` predictions, first as a plain loop over the rows
(one kept-alive ``httpx.Client``, each batch of ``--batch`` built as dicts, encoded with the
standard ``json`` module and posted, the answer checked), then through one
``calmon_client.Monitor`` per process (``log`` for each prediction, then ``close``, which
returns once all are acknowledged), ``--rounds`` times each in the order A B B A A B …. Both
start from the same kind of Python values (ids, ISO 8601 event times, scores, labels,
segments, built before the clock starts; new ids each run); the tables are emptied before each
run. Printed: each run's rate, the CPU per prediction of the senders, the API workers and the
database, the cores busy (and how much of that was other processes), and the ratio of the
medians, Monitor / hand-written.

The scratch database is dropped at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import multiprocessing.synchronize
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import psycopg
from psycopg import sql

from bench.scratch import create_scratch, drop_scratch
from calmon.db import migrate
from calmon.db.session import create_db_engine, create_session_factory
from calmon.services.ingest import ingest_predictions
from calmon.services.ingest_batches import prediction_columns
from calmon.services.ingest_schemas import PROBABILITY_PREDICTION_BATCH
from calmon.services.model_registry import get_model
from calmon.settings import Settings
from harness.processes import cpu_seconds

RATE_TARGET = 80_000
RATIO_TARGET = 0.5
RATIO_STRETCH = 0.6
#: Arrow IPC stream bodies, 1,000 rows a request: of copy (a)
ARROW_RATIO_TARGET = 0.8
MODEL = "bench"
SEGMENTS = ("country=FR", "country=DE", "country=GB", "country=US")
PRIOR = 0.05
STARTUP_SECONDS = 60
RSS_PERIOD = 0.2
#: seconds between the connections of two clients: connections opened in one burst are all
#: accepted by whichever worker wakes first, and a kept-alive connection stays with it
CONNECT_SPACING = 0.05
PG_EPOCH_US = 946_684_800 * 1_000_000
COLUMNS = "model_id, client_id, ts, score, label, segment, received_at, labelled_at, changed_at"
MINIMAL_TABLE = (
    "CREATE TABLE bench_minimal (model_id integer NOT NULL, client_id varchar(128) NOT NULL,"
    " ts timestamptz NOT NULL, score float8 NOT NULL, label int2, segment varchar(64),"
    " received_at timestamptz NOT NULL, labelled_at timestamptz, changed_at timestamptz NOT NULL,"
    " PRIMARY KEY (model_id, client_id));"
    " CREATE INDEX bench_minimal_model_id_ts ON bench_minimal (model_id, ts)"
)


@dataclass(frozen=True)
class Rows:
    """The predictions of one run, column by column (``label`` is -1 when absent)."""

    ids: np.ndarray[Any, np.dtype[np.bytes_]]
    ts_us: np.ndarray[Any, np.dtype[np.int64]]
    scores: np.ndarray[Any, np.dtype[np.float64]]
    labels: np.ndarray[Any, np.dtype[np.int8]]
    segments: np.ndarray[Any, np.dtype[np.int8]]
    #: the event times as clients send them (ISO 8601, UTC, microseconds)
    stamps: np.ndarray[Any, np.dtype[np.str_]]


def make_rows(n: int, seed: int) -> Rows:
    """``n`` predictions of a ``probability`` model: random ids, the last day of event times."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    ids = np.array([bytes(row).hex().encode() for row in raw], dtype="S32")
    now_us = int(time.time()) * 1_000_000
    ts_us = now_us - rng.integers(0, 86_400 * 1_000_000, size=n)
    truth = rng.random(n) < PRIOR
    scores = 1.0 / (1.0 + np.exp(-(rng.normal(size=n) + 2.5 * truth - 3.0)))
    labels = np.where(rng.random(n) < 0.5, truth.astype(np.int8), np.int8(-1)).astype(np.int8)
    segments = rng.integers(0, len(SEGMENTS), size=n).astype(np.int8)
    stamps = np.char.add(np.datetime_as_string(ts_us.astype("datetime64[us]"), unit="us"), "Z")
    return Rows(ids, ts_us.astype(np.int64), scores, labels, segments, stamps)


def json_bodies(rows: Rows, batches: list[range]) -> list[bytes]:
    """The request bodies of ``batches`` (ranges of row positions)."""
    bodies = []
    for batch in batches:
        items = []
        for i in batch:
            item: dict[str, object] = {
                "id": rows.ids[i].decode(),
                "timestamp": str(rows.stamps[i]),
                "score": float(rows.scores[i]),
                "segment": SEGMENTS[rows.segments[i]],
            }
            if rows.labels[i] >= 0:
                item["label"] = int(rows.labels[i])
            items.append(item)
        bodies.append(orjson.dumps({"predictions": items}))
    return bodies


def arrow_bodies(rows: Rows, batches: list[range]) -> list[bytes]:
    """The Arrow IPC stream bodies of ``batches`` (ranges of row positions): the columns of
    docs/reference/api.md, the segment dictionary-encoded as a data frame's categorical column
    is."""
    import pyarrow as pa

    segments = pa.array(SEGMENTS)
    bodies = []
    for batch in batches:
        part = slice(batch.start, batch.stop)
        labels = rows.labels[part]
        table = pa.table(
            {
                "id": pa.array(rows.ids[part].astype(str)),
                "timestamp": pa.array(rows.ts_us[part], pa.timestamp("us", tz="UTC")),
                "score": pa.array(rows.scores[part]),
                "label": pa.array(labels, pa.int8(), mask=labels < 0),
                "segment": pa.DictionaryArray.from_arrays(pa.array(rows.segments[part]), segments),
            }
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        bodies.append(sink.getvalue().to_pybytes())
    return bodies


def copy_stream(rows: Rows, model_id: int) -> bytes:
    """The binary COPY stream of ``rows`` for the columns in ``COLUMNS``, as the API stores them
    (received, labelled and changed now)."""
    now = int(time.time() * 1_000_000) - PG_EPOCH_US
    segment_fields = [s.encode() for s in SEGMENTS]
    pack_head = struct.Struct(">hii").pack  # field count, then model_id (length, value)
    pack_int8 = struct.Struct(">iq").pack
    pack_float8 = struct.Struct(">id").pack
    pack_int2 = struct.Struct(">ih").pack
    null = struct.pack(">i", -1)
    parts = [b"PGCOPY\n\xff\r\n\x00" + bytes(8)]
    for i in range(len(rows.ids)):
        client_id = bytes(rows.ids[i])
        segment = segment_fields[rows.segments[i]]
        label = int(rows.labels[i])
        parts.append(
            pack_head(9, 4, model_id)
            + struct.pack(">i", len(client_id))
            + client_id
            + pack_int8(8, int(rows.ts_us[i]) - PG_EPOCH_US)
            + pack_float8(8, float(rows.scores[i]))
            + (pack_int2(2, label) if label >= 0 else null)
            + struct.pack(">i", len(segment))
            + segment
            + pack_int8(8, now)
            + (pack_int8(8, now) if label >= 0 else null)
            + pack_int8(8, now)
        )
    parts.append(b"\xff\xff")
    return b"".join(parts)


def key_stream(rows: Rows, model_id: int) -> bytes:
    """The binary COPY stream of the registry rows (model_id, client_id, ts) of ``rows``."""
    pack_head = struct.Struct(">hii").pack
    pack_int8 = struct.Struct(">iq").pack
    parts = [b"PGCOPY\n\xff\r\n\x00" + bytes(8)]
    for i in range(len(rows.ids)):
        client_id = bytes(rows.ids[i])
        parts.append(
            pack_head(3, 4, model_id)
            + struct.pack(">i", len(client_id))
            + client_id
            + pack_int8(8, int(rows.ts_us[i]) - PG_EPOCH_US)
        )
    parts.append(b"\xff\xff")
    return b"".join(parts)


@dataclass
class ClientResult:
    """What one client process saw."""

    started: float = 0.0
    finished: float = 0.0
    predictions: int = 0
    cpu: float = 0.0
    failures: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


def client_main(
    port: int,
    delay: float,
    bodies: list[bytes],
    sizes: list[int],
    content_type: str,
    barrier: multiprocessing.synchronize.Barrier,
    results: mp.Queue[ClientResult],
) -> None:
    """Send ``bodies`` (of ``content_type``) one after the other on one kept-alive connection,
    opened after ``delay`` seconds."""
    result = ClientResult()
    time.sleep(delay)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.connect()
    connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    headers = {"Content-Type": content_type}
    path = f"/v1/models/{MODEL}/predictions"
    barrier.wait()
    result.started = time.perf_counter()
    cpu = time.process_time()
    for body, size in zip(bodies, sizes, strict=True):
        sent = time.perf_counter()
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        answer = response.read()
        result.latencies.append(time.perf_counter() - sent)
        new = orjson.loads(answer).get("new") if response.status == 200 else None
        if new != size:
            result.failures.append(f"{response.status} {answer[:200]!r}")
        else:
            result.predictions += size
    result.finished = time.perf_counter()
    result.cpu = time.process_time() - cpu
    results.put(result)
    barrier.wait()
    connection.close()


def worker_pids(parent: int) -> list[int]:
    """The uvicorn worker processes under ``parent`` (spawned children running the app)."""
    pids = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
                pids.append(int(child))
    return sorted(pids)


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError(f"no VmRSS for {pid}")


def machine_cpu_seconds() -> float:
    """CPU seconds spent so far by the whole machine, all cores (not idle, not waiting)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class RssSampler(threading.Thread):
    """Samples the resident set of some processes until stopped."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.samples: dict[int, list[int]] = {pid: [] for pid in pids}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            for pid, samples in self.samples.items():
                samples.append(rss_kib(pid))
            self._done.wait(RSS_PERIOD)

    def stop(self) -> None:
        self._done.set()
        self.join()
        for pid, samples in self.samples.items():
            samples.append(rss_kib(pid))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_api(url: str, port: int, workers: int, log: Path) -> subprocess.Popen[bytes]:
    """``calmon api`` on ``url``; returns once ``/readyz`` answers 200."""
    calmon = Path(sys.executable).parent / "calmon"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALMON_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["CALMON_DATABASE_URL"] = url
    process = subprocess.Popen(
        [str(calmon), "api", "--workers", str(workers), "--port", str(port)],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"calmon api exited with {process.returncode}; see {log}")
        try:
            if http_call(port, "GET", "/readyz")[0] == 200 and len(worker_pids(process.pid)) == (
                workers if workers > 1 else 0
            ):
                return process
        except OSError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"calmon api did not become ready; see {log}")


def http_call(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def backend_cpu(admin_url: str, database: str) -> dict[int, float]:
    """CPU seconds used so far by each client's server process on ``database`` (background
    work such as autovacuum is left out, as it is for the COPY)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        pids = [
            int(row[0])
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                (database,),
            )
        ]
    found = {}
    for pid in pids:
        try:
            found[pid] = cpu_seconds(pid)
        except OSError:
            continue
    return found


def checkpoint(admin_url: str, database: str) -> None:
    """Flush dirty pages so that neither measurement pays for the other's checkpoint."""
    base = admin_url.rpartition("/")[0]
    with psycopg.connect(f"{base}/{database}", autocommit=True) as conn:
        conn.execute("CHECKPOINT")


@dataclass
class Run:
    """What one phase measured: wall time from the first request to the last answer, what
    each client saw, CPU seconds of the server processes serving them, of the machine, and
    the resident sets and CPU of the API workers (API phase)."""

    seconds: float
    clients: list[ClientResult]
    database_cpu: float
    machine_cpu: float
    rss_kib: dict[int, list[int]]
    worker_cpu: dict[int, float]


def run_phase(
    target: Callable[..., None],
    per_client: list[tuple[Any, ...]],
    *,
    admin_url: str,
    database: str,
    workers: list[int],
) -> Run:
    """Start one process per entry of ``per_client`` running ``target(*entry, barrier,
    results)``, release them together, and measure until every one has reported. Each waits on
    the barrier again before closing its connections, so that the server processes serving
    them are still there to be measured."""
    context = mp.get_context("fork")
    barrier = context.Barrier(len(per_client) + 1)
    results: mp.Queue[ClientResult] = context.Queue()
    processes = [
        context.Process(target=target, args=(*entry, barrier, results), daemon=True)
        for entry in per_client
    ]
    for process in processes:
        process.start()
    sampler = RssSampler(workers)
    worker_before = {pid: cpu_seconds(pid) for pid in workers}
    database_before = backend_cpu(admin_url, database)
    machine_before = machine_cpu_seconds()
    sampler.start()
    barrier.wait()
    outcome = [results.get() for _ in processes]
    machine = machine_cpu_seconds() - machine_before
    sampler.stop()
    database_after = backend_cpu(admin_url, database)
    barrier.wait()
    for process in processes:
        process.join()
    return Run(
        seconds=max(r.finished for r in outcome) - min(r.started for r in outcome),
        clients=outcome,
        database_cpu=sum(t - database_before.get(pid, 0.0) for pid, t in database_after.items()),
        machine_cpu=machine,
        rss_kib=sampler.samples,
        worker_cpu={pid: cpu_seconds(pid) - worker_before[pid] for pid in workers},
    )


def service_main(
    url: str,
    bodies: list[bytes],
    barrier: multiprocessing.synchronize.Barrier,
    results: mp.Queue[ClientResult],
) -> None:
    """Store ``bodies`` through the service layer in this process, as the route does between
    reading a body and writing the answer (model look-up, validation, ingestion, commit), but
    without HTTP, uvicorn or FastAPI."""
    engine = create_db_engine(Settings(database_url=url))
    sessions = create_session_factory(engine)
    result = ClientResult()
    barrier.wait()
    result.started = time.perf_counter()
    cpu = time.process_time()
    for body in bodies:
        with sessions() as session:
            model = get_model(session, name=MODEL)
            assert model is not None
            items = PROBABILITY_PREDICTION_BATCH.validate_json(body)["predictions"]
            rows = prediction_columns(items)
            stored = ingest_predictions(session, model=model, rows=rows, now=datetime.now(UTC))
            session.commit()
        if stored.new == len(rows):
            result.predictions += len(rows)
        else:
            result.failures.append(f"{stored}")
    result.finished = time.perf_counter()
    result.cpu = time.process_time() - cpu
    results.put(result)
    barrier.wait()
    engine.dispose()


def run_copy(libpq_url: str, loads: list[tuple[str, str, bytes]], n: int) -> tuple[float, float]:
    """Seconds to load the emptied tables of ``loads`` ((table, columns, binary COPY stream of
    ``n`` rows)) with one COPY each and one commit, and the server process's CPU seconds."""
    with psycopg.connect(libpq_url) as conn:
        for table, _columns, _stream in loads:
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(table)))
        conn.commit()
        conn.execute("CHECKPOINT")
        conn.commit()
        cpu_before = cpu_seconds(conn.info.backend_pid)
        started = time.perf_counter()
        for table, columns, stream in loads:
            statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
                sql.Identifier(table),
                sql.SQL(", ").join(sql.Identifier(c.strip()) for c in columns.split(",")),
            )
            with conn.cursor().copy(statement) as copy:
                for offset in range(0, len(stream), 1 << 20):
                    copy.write(stream[offset : offset + (1 << 20)])
        conn.commit()
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(conn.info.backend_pid) - cpu_before
        for table, _columns, _stream in loads:
            count = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
            ).fetchone()
            assert count is not None
            assert count[0] == n, (table, count)
    return seconds, cpu


def partitioned(libpq_url: str) -> bool:
    """Whether the database keeps ids in the ``prediction_keys`` registry."""
    with psycopg.connect(libpq_url) as conn:
        found = conn.execute("SELECT to_regclass('prediction_keys')").fetchone()
    return found is not None and found[0] is not None


def stored_counts(libpq_url: str, model_id: int) -> tuple[int, int]:
    with psycopg.connect(libpq_url) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT client_id) FROM predictions WHERE model_id = %s",
            (model_id,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


#: one prediction as a sender holds it: (id, timestamp, score, label or None, segment)
Prediction = tuple[str, str, float, int | None, str]


def sender_values(rows: Rows) -> list[Prediction]:
    """``rows`` as the Python values a service would hand to its sender."""
    labels = rows.labels.tolist()
    return [
        (client_id, stamp, score, None if label < 0 else label, SEGMENTS[segment])
        for client_id, stamp, score, label, segment in zip(
            [i.decode() for i in rows.ids.tolist()],
            rows.stamps.tolist(),
            rows.scores.tolist(),
            labels,
            rows.segments.tolist(),
            strict=True,
        )
    ]


def raw_httpx_main(
    port: int,
    predictions: list[Prediction],
    batch: int,
    barrier: multiprocessing.synchronize.Barrier,
    results: mp.Queue[ClientResult],
) -> None:
    """The hand-written sender: batches of ``batch`` built as dicts, encoded with ``json``
    and posted one after the other on one kept-alive ``httpx.Client``."""
    result = ClientResult()
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    path = f"/v1/models/{MODEL}/predictions"
    headers = {"Content-Type": "application/json"}
    barrier.wait()
    result.started = time.perf_counter()
    cpu = time.process_time()
    for first in range(0, len(predictions), batch):
        items = []
        for client_id, stamp, score, label, segment in predictions[first : first + batch]:
            item: dict[str, object] = {
                "id": client_id,
                "timestamp": stamp,
                "score": score,
                "segment": segment,
            }
            if label is not None:
                item["label"] = label
            items.append(item)
        sent = time.perf_counter()
        response = client.post(
            path, content=json.dumps({"predictions": items}).encode(), headers=headers
        )
        result.latencies.append(time.perf_counter() - sent)
        if response.status_code != 200 or response.json()["new"] != len(items):
            result.failures.append(f"{response.status_code} {response.text[:200]}")
        else:
            result.predictions += len(items)
    result.finished = time.perf_counter()
    result.cpu = time.process_time() - cpu
    results.put(result)
    barrier.wait()
    client.close()


def monitor_main(
    port: int,
    predictions: list[Prediction],
    batch: int,
    barrier: multiprocessing.synchronize.Barrier,
    results: mp.Queue[ClientResult],
) -> None:
    """The same predictions through ``calmon_client.Monitor``: ``log`` each, then ``close``
    (returns once the server has acknowledged all of them)."""
    from calmon_client import Monitor

    result = ClientResult()
    monitor = Monitor(
        f"http://127.0.0.1:{port}",
        MODEL,
        batch_size=batch,
        max_queue=max(len(predictions), batch),
        when_full="block",
        close_timeout=600,
    )
    log = monitor.log
    barrier.wait()
    result.started = time.perf_counter()
    cpu = time.process_time()
    for client_id, stamp, score, label, segment in predictions:
        log(client_id, score, stamp, label, segment)
    monitor.close()
    result.finished = time.perf_counter()
    result.cpu = time.process_time() - cpu
    stats = monitor.stats()
    result.predictions = stats.new
    if stats.new != len(predictions):
        result.failures.append(f"{stats}")
    results.put(result)
    barrier.wait()


def compare_client(args: argparse.Namespace, admin_url: str, database: str, url: str) -> bool:
    """``--client``: the hand-written sender and ``calmon_client.Monitor`` on one API,
    ``--rounds`` times each in alternating order (the machine's load drifts); prints every
    rate, each sender's median and their ratio. True when every prediction was stored exactly
    once."""
    libpq_url = url.replace("postgresql+psycopg://", "postgresql://", 1)
    n = args.predictions
    log = Path(tempfile.mkdtemp(prefix="calmon-bench-")) / "api.log"
    port = free_port()
    api = start_api(url, port, args.workers, log)
    exact = True
    senders: dict[str, Callable[..., None]] = {
        "hand-written httpx sender": raw_httpx_main,
        "calmon_client.Monitor": monitor_main,
    }
    rates: dict[str, list[float]] = {label: [] for label in senders}
    try:
        workers = worker_pids(api.pid) or [api.pid]
        status, answer = http_call(
            port, "PUT", f"/v1/models/{MODEL}", orjson.dumps({"score_kind": "probability"})
        )
        assert status == 201, answer
        with psycopg.connect(libpq_url) as conn:
            found = conn.execute("SELECT id FROM models WHERE name = %s", (MODEL,)).fetchone()
        assert found is not None
        model_id = int(found[0])
        tables = ["predictions", "prediction_keys"] if partitioned(libpq_url) else ["predictions"]
        order = list(senders)
        for phase in range(2 * args.rounds):
            label = order[phase % 2 if (phase // 2) % 2 == 0 else 1 - phase % 2]
            values = sender_values(make_rows(n, args.seed + phase))
            with psycopg.connect(libpq_url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("TRUNCATE {}").format(
                        sql.SQL(", ").join(sql.Identifier(t) for t in tables)
                    )
                )
            checkpoint(admin_url, database)
            run = run_phase(
                senders[label],
                [(port, values[s :: args.senders], args.batch) for s in range(args.senders)],
                admin_url=admin_url,
                database=database,
                workers=workers,
            )
            failures = [f for r in run.clients for f in r.failures]
            count, distinct = stored_counts(libpq_url, model_id)
            once = count == distinct == n and not failures
            exact = exact and once
            rates[label].append(n / run.seconds)
            sender_cpu = sum(r.cpu for r in run.clients)
            worker_cpu = sum(run.worker_cpu.values())
            other = run.machine_cpu - sender_cpu - worker_cpu - run.database_cpu
            print(
                f"{label}: {n:,} predictions in {run.seconds:.2f} s = {rates[label][-1]:,.0f}/s"
                f" ({args.senders} processes, batches of {args.batch}); CPU µs per prediction:"
                f" senders {sender_cpu / n * 1e6:.1f}, workers {worker_cpu / n * 1e6:.1f},"
                f" database {run.database_cpu / n * 1e6:.1f}; cores busy"
                f" {run.machine_cpu / run.seconds:.2f}, of which other processes"
                f" {other / run.seconds:.2f}; stored {count:,} rows, {distinct:,} distinct ids"
                + ("" if once else f" MISMATCH {failures[:3]}"),
                flush=True,
            )
    finally:
        api.send_signal(signal.SIGINT)
        api.wait(timeout=30)
        shutil.rmtree(log.parent, ignore_errors=True)
    raw, monitor = (float(np.median(rates[label])) for label in senders)
    print(
        f"ratio: calmon_client.Monitor / hand-written sender = {monitor / raw:.2f}"
        f" (medians of {args.rounds} run(s) each: {monitor:,.0f} / {raw:,.0f} predictions/s)"
    )
    return exact


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def parse_args() -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--predictions", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000, help="predictions per request")
    parser.add_argument(
        "--large-batch",
        type=int,
        default=10_000,
        help="predictions per request of the last Arrow phase (0: no such phase)",
    )
    parser.add_argument("--clients", type=int, default=8, help="client processes")
    parser.add_argument("--workers", type=int, default=2, help="workers of calmon api")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("CALMON_TEST_POSTGRES_URL")
        or "postgresql://postgres@127.0.0.1:5432/postgres",
        help="libpq URL of a maintenance database on a server where databases may be created",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--service",
        action="store_true",
        help="also store the same batches through the service layer without HTTP (cost split)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--client",
        action="store_true",
        help="instead: calmon_client.Monitor against a hand-written httpx sender",
    )
    parser.add_argument(
        "--senders", type=int, default=2, help="sending processes of each kind (--client)"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="runs of each sender, alternating (--client)"
    )
    return parser.parse_args()


@dataclass
class ApiServer:
    """The ``calmon api`` process of the API phase while it runs, so that whatever stops the
    benchmark early (an error, Ctrl-C) can still kill it."""

    process: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        """Stop the API as an operator would (SIGINT), waiting up to 30 s for it to exit."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=30)
        self.process = None

    def kill(self) -> None:
        """Kill the API if it still runs (the benchmark ended early)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def main() -> None:
    """Run the benchmark and print its figures."""
    args = parse_args()
    name, libpq_url = create_scratch(args.postgres)
    url = libpq_url.replace("postgresql://", "postgresql+psycopg://", 1)
    log = Path(tempfile.mkdtemp(prefix="calmon-bench-")) / "api.log"
    api = ApiServer()
    try:
        engine = create_db_engine(Settings(database_url=url))
        migrate.upgrade(engine)
        engine.dispose()
        if args.client:
            if not compare_client(args, args.postgres, name, url):
                raise SystemExit(1)
            return
        if not ingest(args, name, libpq_url, log, api):
            raise SystemExit(1)
    finally:
        api.kill()
        if not args.keep:
            drop_scratch(name, args.postgres)
            shutil.rmtree(log.parent, ignore_errors=True)


#: the request formats of the API phases, by name: (Content-Type, body builder)
FORMATS: dict[str, tuple[str, Callable[[Rows, list[range]], list[bytes]]]] = {
    "json": ("application/json", json_bodies),
    "arrow": ("application/vnd.apache.arrow.stream", arrow_bodies),
}


def ingest(
    args: argparse.Namespace, database: str, libpq_url: str, log: Path, api: ApiServer
) -> bool:
    """The ingestion benchmark on the migrated scratch ``database``: one API phase per request
    format and size (JSON and Arrow with ``--batch`` rows a request, then Arrow with
    ``--large-batch``), calmon's tables emptied before each, then the service phase
    (``--service``) and the copy baselines, the API stopped. ``api`` holds the API process while
    it runs. True when every prediction was stored exactly once in every phase."""
    url = libpq_url.replace("postgresql://", "postgresql+psycopg://", 1)
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute(MINIMAL_TABLE)
    registry = partitioned(libpq_url)
    calmon_tables = ["predictions", "prediction_keys"] if registry else ["predictions"]
    n = args.predictions
    t0 = time.perf_counter()
    rows = make_rows(n, args.seed)
    phases = [("json", args.batch), ("arrow", args.batch)]
    if args.large_batch:
        phases.append(("arrow", args.large_batch))
    loads = {}
    for kind, size in phases:
        batches = [range(start, min(start + size, n)) for start in range(0, n, size)]
        shares = [batches[c :: args.clients] for c in range(args.clients)]
        loads[kind, size] = (
            [FORMATS[kind][1](rows, share) for share in shares],
            [[len(batch) for batch in share] for share in shares],
        )
    print(f"rows and bodies built in {time.perf_counter() - t0:.1f} s", flush=True)

    port = free_port()
    api.process = start_api(url, port, args.workers, log)
    workers = worker_pids(api.process.pid) or [api.process.pid]
    model_id = create_model(port, libpq_url)
    rates: dict[str, float] = {}
    exact = True
    for kind, size in phases:
        truncate(libpq_url, calmon_tables)
        checkpoint(args.postgres, database)
        bodies, sizes = loads[kind, size]
        label = f"{kind} x{size}"
        print(f"-- {label} (load average {load_average()})", flush=True)
        rates[label], stored_once = api_phase(
            args,
            database,
            (port, workers),
            (bodies, sizes, FORMATS[kind][0]),
            counted=lambda: stored_counts(libpq_url, model_id),
        )
        exact = exact and stored_once
    api.stop()
    json_bodies_ = loads["json", args.batch][0]
    if args.service:
        service_phase(args, database, libpq_url, json_bodies_, registry=registry)
    copy_baselines(libpq_url, rows, model_id, rates, registry=registry)
    print(f"load average at the end: {load_average()}")
    return exact


def truncate(libpq_url: str, tables: list[str]) -> None:
    """Empty ``tables`` (calmon's, between phases)."""
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(sql.Identifier(t) for t in tables))
        )


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (it is shared: this says how busy)."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def create_model(port: int, libpq_url: str) -> int:
    """Create the benchmark's ``probability`` model through the API; its id in the database
    (the stored rows are counted by it)."""
    status, answer = http_call(
        port, "PUT", f"/v1/models/{MODEL}", orjson.dumps({"score_kind": "probability"})
    )
    assert status == 201, answer
    with psycopg.connect(libpq_url) as conn:
        found = conn.execute("SELECT id FROM models WHERE name = %s", (MODEL,)).fetchone()
    assert found is not None
    return int(found[0])


def api_phase(
    args: argparse.Namespace,
    database: str,
    server: tuple[int, list[int]],
    load: tuple[list[list[bytes]], list[list[int]], str],
    *,
    counted: Callable[[], tuple[int, int]],
) -> tuple[float, bool]:
    """An API phase: ``--clients`` processes send their bodies of ``load`` (bodies and their
    sizes per client, and their Content-Type) to the API on ``server`` (its port and worker
    pids); prints the rate, latencies, CPU split, what was stored (``counted``: rows and
    distinct ids) and the workers' memory. Returns the rate and whether every prediction was
    stored exactly once."""
    port, workers = server
    bodies, sizes, content_type = load
    n = args.predictions
    run = run_phase(
        client_main,
        [
            (port, c * CONNECT_SPACING, bodies[c], sizes[c], content_type)
            for c in range(args.clients)
        ],
        admin_url=args.postgres,
        database=database,
        workers=workers,
    )
    sent = sum(r.predictions for r in run.clients)
    failures = [f for r in run.clients for f in r.failures]
    latencies = np.array([x for r in run.clients for x in r.latencies]) * 1000
    api_rate = n / run.seconds
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
    print(
        f"api:   {n:,} predictions in {run.seconds:.2f} s = {api_rate:,.0f} predictions/s"
        f" ({len(latencies):,} requests of up to {max(max(s) for s in sizes):,},"
        f" {args.clients} clients,"
        f" {args.workers} workers; latency ms p50 {p50:.0f} p90 {p90:.0f} p99 {p99:.0f})"
    )
    print_cpu(run, n)
    count, distinct = counted()
    exact = count == distinct == n == sent and not failures
    print(
        f"stored: {count:,} rows, {distinct:,} distinct ids, {len(failures)} failed requests:"
        f" {'each prediction stored exactly once' if exact else 'MISMATCH'}"
    )
    for failure in failures[:5]:
        print(f"       failed: {failure}")
    print_rss(run)
    return api_rate, exact


def print_cpu(run: Run, n: int) -> None:
    """The API phase's CPU per prediction (workers, each worker's seconds, database,
    clients) and the cores busy, ours and the machine's other processes'."""
    worker_cpu = sum(run.worker_cpu.values())
    client_cpu = sum(r.cpu for r in run.clients)
    other_cpu = run.machine_cpu - worker_cpu - run.database_cpu - client_cpu
    print(
        f"       CPU µs per prediction: workers {worker_cpu / n * 1e6:.1f} ("
        + ", ".join(f"{seconds:.1f} s" for seconds in run.worker_cpu.values())
        + f"), database {run.database_cpu / n * 1e6:.1f}, clients {client_cpu / n * 1e6:.1f}"
    )
    print(
        f"       cores busy: {run.machine_cpu / run.seconds:.2f} of {os.cpu_count()}, of which"
        f" other processes of the machine {other_cpu / run.seconds:.2f}"
    )


def print_rss(run: Run) -> None:
    """Each worker's resident set during the API phase: first sample, after a tenth of the
    run (warmed up), peak and last, which shows growth under load."""
    print(
        f"worker RSS MiB, sampled every {RSS_PERIOD} s: first / after 10 % of the run / peak / last"
    )
    for pid, samples in run.rss_kib.items():
        warm = samples[len(samples) // 10]
        print(
            f"       {pid}: {mib(samples[0])} / {mib(warm)} / {mib(max(samples))} /"
            f" {mib(samples[-1])} ({len(samples)} samples)"
        )


def service_phase(
    args: argparse.Namespace,
    database: str,
    libpq_url: str,
    bodies: list[list[bytes]],
    *,
    registry: bool,
) -> None:
    """``--service``: calmon's tables emptied, the same ``bodies`` stored through the service
    layer in-process, without HTTP; prints the rate and the CPU split, which tells the web
    layer's share of the workers' CPU from the rest's."""
    url = libpq_url.replace("postgresql://", "postgresql+psycopg://", 1)
    n = args.predictions
    calmon_tables = ["predictions", "prediction_keys"] if registry else ["predictions"]
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("TRUNCATE {}").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in calmon_tables)
            )
        )
        conn.execute("CHECKPOINT")
    service = run_phase(
        service_main,
        [(url, bodies[c]) for c in range(args.clients)],
        admin_url=args.postgres,
        database=database,
        workers=[],
    )
    service_failures = [f for r in service.clients for f in r.failures]
    assert not service_failures, service_failures[:3]
    print(
        f"service: {n:,} predictions in {service.seconds:.2f} s ="
        f" {n / service.seconds:,.0f} predictions/s ({args.clients} processes)"
    )
    print(
        "       CPU µs per prediction: service processes"
        f" {sum(r.cpu for r in service.clients) / n * 1e6:.1f},"
        f" database {service.database_cpu / n * 1e6:.1f}"
    )


def copy_baselines(
    libpq_url: str, rows: Rows, model_id: int, api_rates: dict[str, float], *, registry: bool
) -> None:
    """The copy baselines (a) into the minimal table and (b) into calmon's tables (with the
    id registry when partitioned), then each API phase's rate (``api_rates``, by phase)
    against them and the targets."""
    n = len(rows.ids)
    stream = copy_stream(rows, model_id)
    baselines = {
        "copy (a) minimal table": [("bench_minimal", COLUMNS, stream)],
        "copy (b) calmon's tables": [("predictions", COLUMNS, stream)]
        + (
            [("prediction_keys", "model_id, client_id, ts", key_stream(rows, model_id))]
            if registry
            else []
        ),
    }
    rates = {}
    for label, loads in baselines.items():
        copy_seconds, copy_cpu = run_copy(libpq_url, loads, n)
        rates[label] = n / copy_seconds
        print(
            f"{label}: {n:,} rows in {copy_seconds:.2f} s = {rates[label]:,.0f} rows/s"
            f" (database CPU µs per row {copy_cpu / n * 1e6:.1f})"
        )
    minimal, own = rates.values()
    for label, api_rate in api_rates.items():
        print_ratio(label, api_rate, minimal, own)


def print_ratio(label: str, api_rate: float, minimal: float, own: float) -> None:
    """An API phase's rate as a fraction of the copy baselines' (``minimal``: (a), ``own``:
    (b)) against its ratio targets (JSON's, or Arrow's), and against the absolute rate
    target."""
    ratio = api_rate / minimal
    if label.startswith("arrow"):
        verdict = "met" if ratio >= ARROW_RATIO_TARGET else "MISSED"
        targets = f"target ≥ {ARROW_RATIO_TARGET}"
    else:
        verdict = (
            "stretch met"
            if ratio >= RATIO_STRETCH
            else "met"
            if ratio >= RATIO_TARGET
            else "MISSED"
        )
        targets = f"target ≥ {RATIO_TARGET}, stretch ≥ {RATIO_STRETCH}"
    print(
        f"ratio {label}: {ratio:.2f} of copy (a) ({targets}: {verdict}); {api_rate / own:.2f}"
        f" of copy (b); {api_rate:,.0f}/s against the rate target {RATE_TARGET:,}/s:"
        f" {'met' if api_rate >= RATE_TARGET else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
