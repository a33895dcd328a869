"""Speed of window computation on PostgreSQL (a script, not a test).

    .venv/bin/python bench/windows.py [--rows 1000000] [--windows 30] [--segments 0]
    .venv/bin/python bench/windows.py --rows 0 [--fixed-rows 4000]   # the fixed cost alone

Creates a scratch database on ``CALMON_BENCH_POSTGRES_URL`` (default the local server's
``postgres`` database), writes ``--windows`` hourly windows of ``--rows`` predictions each
with binary ``COPY`` straight into ``predictions`` (π = 0.01, every prediction labelled), then
prints, each timing in the same run as its baseline (the machine may be shared):

- baseline: ``SELECT score, label`` of one window's rows, psycopg ``fetchall`` then
  ``np.array`` (the plain way to get the rows into NumPy), the faster of the planner's own
  plan and the scheduler's index path;
- load: the scheduler's read of the same rows (``array_send(array_agg(...))``);
- one window: scan + compute + store + commit of the first window (no reference exists yet),
  i.e. load, every metric at 3 priors with 95% intervals, store; and its ratio to the
  baseline (target ≤ 3x); beside each window's wall times, the CPU time of its baseline and
  of its compute (this process and the PostgreSQL server processes of its connections, from
  ``/proc``: the database must be on this machine) and their ratio, which a shared machine's
  load moves less than the wall ratio;
- backfill: every window computed in order by one scheduler tick, time per window; windows
  from the 8th on carry a trailing reference of 7 windows, whose extra cost is reported
  (per window, and the reference build alone, from a cold cache);
- the same reference built from the predictions table instead of the stored sorted scores
  (what a fixed reference costs once per data version);
- the pooled decision (``decision`` in the record) of the last window made to pool its 5
  windows before (``min_positives`` 5.5 times a window's positives, at most the setting's
  bound of 100,000: past 18,000 positives a window it pools fewer): reading what the
  trailing windows stored and computing the decision, against the window's own computation
  (where a window holds enough positives alone, the decision reuses its split: no cost);
- the label-free estimate (``estimated`` in the record) of the last window against its
  trailing reference, with 0%, 5%, 50% and 90% of its labels removed: what it adds to the
  evaluation of the window's rows (its seed's hash and :func:`estimate_window`; none where
  the labels measure the window's ratio, at least 90% labelled: the estimate is not computed
  there). Targets at 4·10^6 predictions: +10% at least 90% labelled, +25% otherwise;
- the per-window fixed cost on SQLite (``--fixed-rows``, 4,000 by default): a labelled window
  after a 24-hour fixed reference of 192,000 rows (the reference cached, as in the
  scheduler), scan + compute + store + commit, against the engine's evaluation of the same
  rows alone, wall and CPU time (target ≤ 0.2 s on a quiet machine);
- the threshold advice (``advice`` in the record, the model has an objective) and the
  recalibration map of ``GET …/calibration`` for the last window: their time alone and what
  they add to the evaluation of the window's rows (target ≤ 10%).

The scratch database is dropped at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt
import psycopg
from sqlalchemy.orm import Session, sessionmaker

from bench.scratch import Scratch, migrated_scratch
from calmon.arrays import FloatArray
from calmon.db import migrate
from calmon.db.changes import record_changes
from calmon.db.models import Model
from calmon.db.partitions import ensure_days
from calmon.db.session import create_db_engine, create_session_factory
from calmon.metrics.advice import labels_measure_prior, window_advice
from calmon.metrics.label_free import estimate_window
from calmon.metrics.prepared import prepare
from calmon.metrics.recalibration import calibration_map
from calmon.metrics.window_evaluation import all_sorted, segment_seed, window_decision
from calmon.names import ALL_SEGMENTS
from calmon.records import Objective
from calmon.services.ingest import ingest_predictions
from calmon.services.ingest_schemas import PredictionRow
from calmon.services.model_registry import (
    MAX_DECISION_POSITIVES,
    ModelConfig,
    ReferenceConfig,
    put_model,
)
from calmon.services.windows.compute import compute_window, window_config
from calmon.services.windows.decisions import trailing_pool
from calmon.services.windows.planning import due_windows, scan_model
from calmon.services.windows.record import evaluate_segment, pooled_set
from calmon.services.windows.reference_cache import Reference, ReferenceCache
from calmon.services.windows.references import references_for
from calmon.services.windows.rows import load_rows
from calmon.settings import Settings
from harness.processes import cpu_seconds

PRIOR = 0.01
#: seconds a statement may take in the benchmark's database (the change scan of the set-up)
SETUP_STATEMENT_TIMEOUT = 900.0
#: Shares of unlabelled predictions at which the label-free estimate is timed.
UNLABELLED = (0.0, 0.05, 0.5, 0.9)
WINDOW = timedelta(hours=1)
#: Functions printed per profile (``--profile``).
PROFILE_LINES = 40
FIRST = datetime(2026, 1, 5, tzinfo=UTC)
PG_EPOCH_US = 946_684_800 * 1_000_000


def _copy_body(model_id: int, start: datetime, rows: int, segments: int, seed: int) -> bytes:
    """One window of predictions as binary COPY rows (fixed width, so built by NumPy)."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(rows) < PRIOR).astype(np.int16)
    scores = 1.0 / (1.0 + np.exp(-(rng.normal(size=rows) + 2.5 * labels - 3.0)))
    start_us = int(start.timestamp()) * 1_000_000 - PG_EPOCH_US
    offsets = np.sort(rng.integers(0, int(WINDOW.total_seconds()) * 1_000_000, size=rows))
    now_us = int(time.time() * 1_000_000) - PG_EPOCH_US
    fields: list[tuple[str, str]] = [("count", ">i2")]
    columns = [
        ("model", ">i4"),
        ("id", "S17"),
        ("ts", ">i8"),
        ("score", ">f8"),
        ("label", ">i2"),
        ("segment", "S6"),
        ("received", ">i8"),
        ("labelled", ">i8"),
        ("changed", ">i8"),
    ]
    for name, kind in columns:
        fields.append((f"l_{name}", ">i4"))
        if name != "segment" or segments:
            fields.append((name, kind))
    body = np.zeros(rows, dtype=np.dtype(fields))
    body["count"] = len(columns)
    ids = np.char.add(f"w{seed:05d}-".encode(), np.char.zfill(np.arange(rows).astype("S10"), 10))
    values: dict[str, object] = {
        "model": model_id,
        "id": ids,
        "ts": start_us + offsets,
        "score": scores,
        "label": labels,
        "received": now_us,
        "labelled": now_us,
        "changed": now_us,
    }
    if segments:
        values["segment"] = np.char.add(
            b"seg-", np.char.zfill((np.arange(rows) % segments).astype("S2"), 2)
        )
    for name, kind in columns:
        if name in values:
            body[f"l_{name}"] = np.dtype(kind).itemsize
            body[name] = values[name]
        else:
            body[f"l_{name}"] = -1
    return body.tobytes()


def _copy(conn: psycopg.Connection[tuple[object, ...]], data: bytes) -> None:
    header = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
    columns = "model_id, client_id, ts, score, label, segment, received_at, labelled_at, changed_at"
    with conn.cursor().copy(f"COPY predictions ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(header)
        for offset in range(0, len(data), 1 << 24):
            copy.write(data[offset : offset + (1 << 24)])
        copy.write(b"\xff\xff")


def _record_copied(factory: sessionmaker[Session], model_id: int, starts: list[datetime]) -> None:
    """Record the copied windows as changed, as ingestion does (the change scan reads the
    change record, not the predictions)."""
    with factory() as session:
        model = session.get_one(Model, model_id)
        record_changes(session.connection(), model=model, stamps=starts, now=datetime.now(UTC))
        session.commit()


def _baseline(
    conn: psycopg.Connection[tuple[object, ...]], model_id: int, start: datetime
) -> tuple[float, float]:
    """Seconds to read one window's (score, label) the plain way into NumPy, and the CPU
    seconds it took (this process and its PostgreSQL server process): the faster of the
    planner's own plan and the scheduler's access path (the (model_id, ts) index, no JIT). The
    planner alone may scan the whole table once a window is a few percent of it, and the
    scheduler's path is not always the fastest either, so the better of the two is the bar."""
    query = "SELECT score, label FROM predictions WHERE model_id = %s AND ts >= %s AND ts < %s"
    times: list[float] = []
    cpus: list[float] = []
    for index_path in (False, True):
        if index_path:
            conn.execute("SET enable_seqscan = off")
            conn.execute("SET jit = off")
        cpu = _cpu(conn.info.backend_pid)
        began = time.perf_counter()
        rows = conn.execute(query, (model_id, start, start + WINDOW)).fetchall()
        array = np.array(rows, dtype=np.float64)
        times.append(time.perf_counter() - began)
        cpus.append(_cpu(conn.info.backend_pid) - cpu)
        del rows
        assert array.shape[0] > 0
        if index_path:
            conn.execute("RESET enable_seqscan")
            conn.execute("RESET jit")
    return min(times), min(cpus)


def _cpu(*server_pids: int) -> float:
    """CPU seconds so far of this process and of the PostgreSQL server processes
    ``server_pids`` (the database is on this machine)."""
    return time.process_time() + sum(cpu_seconds(pid) for pid in server_pids)


def _servers(conn: psycopg.Connection[tuple[object, ...]]) -> list[int]:
    """The server processes of the connections to ``conn``'s database: those of the session
    pool (the scheduler's connections, kept between windows) besides ``conn``'s own, idle
    meanwhile."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    ).fetchall()
    return [int(row[0]) for row in rows]  # type: ignore[call-overload]


def _evaluate(
    model: Model,
    reference: Reference | None,
    scores: FloatArray,
    labels: npt.NDArray[np.int8],
    start: datetime,
) -> None:
    """The engine's evaluation of segment ``*`` of the window at ``start`` (its rows' scores
    and labels, -1 where unlabelled) against ``reference``, as a window's computation runs it:
    the evaluation every measurement of this file times or profiles."""
    evaluate_segment(
        config=window_config(model),
        segment=ALL_SEGMENTS,
        start=start,
        end=start + WINDOW,
        scores=scores,
        labels=labels,
        reference=reference,
        computed_at=datetime.now(UTC),
    )


def _label_free_share(
    model: Model,
    reference: Reference,
    scores: FloatArray,
    labels: npt.NDArray[np.int8],
    start: datetime,
    *,
    profile: bool = False,
) -> None:
    """Print what the label-free estimate adds to the evaluation of one window's rows with
    0%, 5%, 50% and 90% of them unlabelled (a random share of labels removed): the work
    :func:`evaluate_window` does for it (the hash of its seed, then :func:`estimate_window`
    on every score, merged as the evaluation merges them for its own seed anyway) against
    the evaluation with it, the faster of two runs each; nothing where the window's labels
    measure its ratio (the estimate is not computed). ``profile``: then profile one more
    evaluation at the largest share."""
    rng = np.random.default_rng(0)
    pi0 = [float(p) for p in model.pi0]
    for share in UNLABELLED:
        hidden = labels.copy()
        hidden[rng.random(labels.size) < share] = -1
        labelled = hidden >= 0
        prepared = prepare(scores[labelled], hidden[labelled], score_kind=model.score_kind)
        every = all_sorted(prepared, scores[~labelled])
        n, n_pos = int(prepared.ranking.n_pos + prepared.ranking.n_neg), prepared.ranking.n_pos
        estimated = not labels_measure_prior(n=n, n_pos=n_pos, unlabelled=scores.size - n)
        wholes: list[float] = []
        alones: list[float] = []
        cpus: list[tuple[float, float]] = []
        for _ in range(2):
            c0 = time.process_time()
            t0 = time.perf_counter()
            _evaluate(model, reference, scores, hidden, start)
            wholes.append(time.perf_counter() - t0)
            c1 = time.process_time()
            t0 = time.perf_counter()
            if estimated:
                estimate_window(
                    reference.data.label_shift,
                    every,
                    threshold=model.threshold,
                    pi0=pi0,
                    seed=segment_seed(ALL_SEGMENTS, (every,)),
                )
            alones.append(time.perf_counter() - t0)
            cpus.append((c1 - c0, time.process_time() - c1))
        whole, alone = min(wholes), min(alones)
        whole_cpu, alone_cpu = min(c[0] for c in cpus), min(c[1] for c in cpus)
        what = "" if estimated else " (not computed: the labels measure the ratio)"
        print(
            f"label-free estimate, {share:.0%} of {scores.size:,} predictions unlabelled: "
            f"{alone:.3f} s within an evaluation of {whole:.3f} s: "
            f"+{alone / (whole - alone):.0%} over the evaluation without it; CPU "
            f"{alone_cpu:.3f} s of {whole_cpu:.3f} s: +{alone_cpu / (whole_cpu - alone_cpu):.0%}"
            f"{what}"
        )
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        _evaluate(model, reference, scores, hidden, start)
        profiler.disable()
        _print_profile(profiler, f"evaluation with {UNLABELLED[-1]:.0%} unlabelled")


def _advice_share(
    model: Model,
    reference: Reference,
    scores: FloatArray,
    labels: npt.NDArray[np.int8],
    start: datetime,
) -> None:
    """Print what the advice of a window and its recalibration map add to the evaluation of
    its rows (every prediction labelled): their time alone (:func:`window_advice` with its
    label-shift check, then :func:`calibration_map`) against the evaluation with the advice,
    the faster of two runs each."""
    prepared = prepare(scores, labels, score_kind=model.score_kind)
    n_pos = int(prepared.pos_sorted.size)
    result = {"n": int(scores.size), "n_pos": n_pos, "prior": n_pos / scores.size}
    assert reference.data.label_shift is not None
    wholes: list[float] = []
    alones: list[float] = []
    for _ in range(2):
        t0 = time.perf_counter()
        _evaluate(model, reference, scores, labels, start)
        wholes.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert model.objective is not None
        advice = window_advice(
            objective=model.objective,
            threshold=model.threshold,
            prepared=prepared,
            result=result,
            unlabelled=0,
            reference=reference.data.ranking,
            estimated=None,
        )
        calibration_map(
            reference.data.label_shift, prior=result["prior"], score_kind=model.score_kind
        )
        alones.append(time.perf_counter() - t0)
        assert advice is not None
        assert advice["threshold"] is not None
    whole, alone = min(wholes), min(alones)
    print(
        f"advice and recalibration map, {scores.size:,} predictions: {alone:.4f} s within an "
        f"evaluation of {whole:.3f} s: +{alone / (whole - alone):.1%} over the evaluation "
        "without them"
    )


def _fixed_rows(
    start: datetime, rows: int, tag: str, rng: np.random.Generator
) -> list[PredictionRow]:
    """``rows`` labelled predictions spread over the window at ``start``, as ingestion takes
    them (π = 0.05)."""
    labels = (rng.random(rows) < 0.05).astype(np.int64)
    scores = 1.0 / (1.0 + np.exp(-(rng.normal(size=rows) + 2.5 * labels - 3.0)))
    offsets = np.sort(rng.random(rows)) * WINDOW.total_seconds()
    return [
        (f"{tag}-{i}", start + timedelta(seconds=float(offset)), float(score), int(label), None)
        for i, (offset, score, label) in enumerate(zip(offsets, scores, labels, strict=True))
    ]


def _fixed_cost(rows: int) -> None:
    """Print the per-window fixed cost on SQLite: windows of ``rows`` labelled predictions
    after a 24-hour fixed reference of 192,000 rows, each scanned, computed, stored and
    committed by :func:`compute_window` with the scheduler's cache (the first one builds the
    reference: timed apart), against the engine's evaluation of the same rows alone
    (:func:`evaluate_segment` against the cached reference); the median of three windows."""
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(database_url=f"sqlite:///{folder}/fixed.db", retention_days=0)
        engine = create_db_engine(settings)
        migrate.upgrade(engine)
        factory = create_session_factory(engine)
        day = timedelta(hours=24)
        with factory() as session:
            created, _ = put_model(
                session,
                name="fixed",
                max_models=settings.max_models,
                config=ModelConfig(
                    window="1h",
                    pi0=[0.05, 0.5],
                    grace="0s",
                    reference=ReferenceConfig(kind="fixed", start=FIRST, end=FIRST + day),
                ),
                now=datetime.now(UTC),
            )
            session.commit()
        rng = np.random.default_rng(7)
        for hour in range(24 + 4):
            count = 8_000 if hour < 24 else rows
            batch = _fixed_rows(FIRST + hour * WINDOW, count, f"h{hour}", rng)
            with factory() as session:
                model = session.get_one(Model, created.id)
                for offset in range(0, count, 10_000):
                    chunk = batch[offset : offset + 10_000]
                    ingest_predictions(session, model=model, rows=chunk, now=datetime.now(UTC))
                session.commit()
        model = _model(factory, created.id)
        margin = timedelta(seconds=settings.scheduler_scan_margin)
        with factory() as session:
            scan_model(session, model=model, now=datetime.now(UTC), margin=margin)
            session.commit()
        cache = ReferenceCache()
        computes: list[float] = []
        cpus: list[float] = []
        for hour in range(24, 28):
            start = FIRST + hour * WINDOW
            with factory() as session:
                c0 = time.process_time()
                t0 = time.perf_counter()
                done = compute_window(
                    session,
                    model=model,
                    start=start,
                    now=datetime.now(UTC),
                    instance="bench",
                    cache=cache,
                    margin=margin,
                )
                session.commit()
                computes.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
                assert done is not None
        engines: list[float] = []
        engine_cpus: list[float] = []
        with factory() as session:
            reference = references_for(
                session, model=model, window_start=start, segments={}, cache=cache
            ).get(ALL_SEGMENTS)
            window = load_rows(session, model=model, start=start, end=start + WINDOW)
        for _ in range(3):
            c0 = time.process_time()
            t0 = time.perf_counter()
            _evaluate(model, reference, window.scores, window.labels, start)
            engines.append(time.perf_counter() - t0)
            engine_cpus.append(time.process_time() - c0)
        engine.dispose()
    compute, alone = statistics.median(computes[1:]), min(engines)
    cpu, alone_cpu = statistics.median(cpus[1:]), min(engine_cpus)
    print(
        f"per-window fixed cost (SQLite, {rows:,} labelled predictions, fixed reference of "
        f"192,000 rows cached): {compute:.3f} s = {compute / alone:.2f}x the engine's "
        f"evaluation of its rows alone ({alone:.3f} s); CPU time {cpu:.3f} s = "
        f"{cpu / alone_cpu:.2f}x ({alone_cpu:.3f} s); the first window after the reference "
        f"period, which builds it: {computes[0]:.3f} s (CPU {cpus[0]:.3f} s)"
    )


def _model(factory: sessionmaker[Session], model_id: int) -> Model:
    with factory() as session:
        model = session.get(Model, model_id)
        assert model is not None
        return model


def _time_cold_reference(
    factory: sessionmaker[Session],
    model: Model,
    window_start: datetime,
    what: str,
    *,
    note: str = "",
) -> None:
    """Print how long ``model``'s reference for the window at ``window_start`` takes to build
    with an empty cache, after ``what`` and before ``note``."""
    with factory() as session:
        t0 = time.perf_counter()
        references_for(
            session, model=model, window_start=window_start, segments={}, cache=ReferenceCache()
        )
        print(f"{what}: {time.perf_counter() - t0:.3f} s{note}")


def _decision_cost(
    factory: sessionmaker[Session], model: Model, start: datetime, cache: ReferenceCache
) -> None:
    """Time the pooled decision of the window at ``start`` pooling its 5 windows before: the
    read of their stored scores (and of the reference, cached) and the decision."""
    with factory() as session:
        rows = load_rows(session, model=model, start=start, end=start + WINDOW)
    labelled = rows.labels >= 0
    prepared = prepare(rows.scores[labelled], rows.labels[labelled], score_kind=model.score_kind)
    positives = prepared.ranking.n_pos
    # 5.5 windows' positives, within the setting's bound (past 18,000 positives a window the
    # pool holds fewer than 5 windows before the last)
    wanted = min(int(5.5 * positives), MAX_DECISION_POSITIVES)
    model.decision = {"min_positives": wanted, "max_span_seconds": 7 * 86_400}
    timings: list[tuple[float, float, int]] = []
    for _ in range(2):
        with factory() as session:
            t0 = time.perf_counter()
            trailing = trailing_pool(
                session,
                model=model,
                segment=ALL_SEGMENTS,
                segments={},
                start=start,
                window_positives=positives,
                cache=cache,
            )
            read = time.perf_counter() - t0
            reference = references_for(
                session, model=model, window_start=start, segments={}, cache=cache
            ).get(ALL_SEGMENTS)
        pooled = pooled_set(trailing=trailing, reference=reference)
        t0 = time.perf_counter()
        window_decision(
            prepared=prepared,
            split=None,
            reference=None,
            trailing=pooled,
            config=window_config(model),
            seed=1,
        )
        windows = 1 if trailing is None else trailing.windows + 1
        timings.append((read, time.perf_counter() - t0, windows))
    read, decide_time, windows = min(timings)
    print(
        f"pooled decision of the last window over {windows} windows "
        f"({positives} positives each): read {read:.3f} s, decision {decide_time:.3f} s"
    )


def _print_profile(profiler: cProfile.Profile, what: str) -> None:
    """Print the functions of ``profiler``'s run that took the most time, with what they
    called (cumulative time), under the title ``what``."""
    print(f"profile of the {what} (cProfile, process CPU only, cumulative time):")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(PROFILE_LINES)


def _seed(scratch: Scratch, args: argparse.Namespace) -> int:
    """Make the bench's model and copy its windows' predictions in; its id."""
    settings, factory, libpq_url = scratch.settings, scratch.sessions, scratch.libpq_url
    with factory() as session:
        created, _ = put_model(
            session,
            name="bench",
            max_models=settings.max_models,
            config=ModelConfig(
                window="1h",
                pi0=[0.05, 0.5],
                grace="0s",
                max_segments=max(1, args.segments),
                reference=ReferenceConfig(kind="trailing", windows=7),
                objective=Objective(target_precision=0.5),
            ),
            now=datetime.now(UTC),
        )
        session.commit()
        model_id = created.id
    print(
        f"{args.windows} windows x {args.rows:,} predictions (pi = {PRIOR}, "
        f"{args.segments} named segments), 2 fixed pi0 + the reference prior"
    )
    began = time.perf_counter()
    with factory() as session:
        # PostgreSQL keeps predictions in day partitions: make those of the windows
        ensure_days(
            session.connection(),
            {(FIRST + i * WINDOW).date() for i in range(args.windows + 1)},
        )
        session.commit()
    with psycopg.connect(libpq_url) as conn:
        for i in range(args.windows):
            start = FIRST + i * WINDOW
            _copy(conn, _copy_body(model_id, start, args.rows, args.segments, seed=i))
            conn.commit()
    _record_copied(factory, model_id, [FIRST + i * WINDOW for i in range(args.windows)])
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE predictions")
    print(f"inserted with binary COPY in {time.perf_counter() - began:.1f} s")
    return model_id


def main() -> None:
    """Run the benchmark and print its report."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--rows",
        type=int,
        default=1_000_000,
        help="predictions per window on PostgreSQL (0: skip that part, the fixed cost alone)",
    )
    parser.add_argument("--windows", type=int, default=30, help="windows of the backfill")
    parser.add_argument("--segments", type=int, default=0, help="named segments (0: none)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--fixed-rows",
        type=int,
        default=4_000,
        help="predictions of the per-window fixed cost's windows on SQLite (0: skip it)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        help="profile the compute of this window (1 = the first; 0: none) and the label-free "
        "estimate at 90%% unlabelled",
    )
    args = parser.parse_args()
    if args.fixed_rows:
        _fixed_cost(args.fixed_rows)
    if not args.rows:
        return

    # the set-up's change scan reads every copied row at once: past the service's statement
    # timeout on a shared machine at 4·10^6 rows a window
    with migrated_scratch(
        keep=args.keep, retention_days=0, db_statement_timeout=SETUP_STATEMENT_TIMEOUT
    ) as scratch:
        settings, factory, libpq_url = scratch.settings, scratch.sessions, scratch.libpq_url
        margin = timedelta(seconds=settings.scheduler_scan_margin)
        model_id = _seed(scratch, args)

        model = _model(factory, model_id)
        with factory() as session:
            scan_model(session, model=model, now=datetime.now(UTC), margin=margin)
            session.commit()
            due = due_windows(session, model=model, now=datetime.now(UTC))
        assert len(due) == args.windows
        cache = ReferenceCache()
        baselines: list[float] = []
        loads: list[float] = []
        computes: list[float] = []
        baseline_cpus: list[float] = []
        compute_cpus: list[float] = []
        with psycopg.connect(libpq_url) as conn:
            for window in due:
                baseline, baseline_cpu = _baseline(conn, model_id, window.start)
                baselines.append(baseline)
                baseline_cpus.append(baseline_cpu)
                with factory() as session:
                    t0 = time.perf_counter()
                    rows = load_rows(session, model=model, start=window.start, end=window.end)
                    loads.append(time.perf_counter() - t0)
                    assert rows.scores.size == args.rows
                    del rows
                profiler = cProfile.Profile() if args.profile == len(computes) + 1 else None
                with factory() as session:
                    servers = _servers(conn)
                    c0 = _cpu(*servers)
                    t0 = time.perf_counter()
                    if profiler is not None:
                        profiler.enable()
                    done = compute_window(
                        session,
                        model=model,
                        start=window.start,
                        now=datetime.now(UTC),
                        instance="bench",
                        cache=cache,
                        margin=margin,
                    )
                    session.commit()
                    if profiler is not None:
                        profiler.disable()
                    computes.append(time.perf_counter() - t0)
                    compute_cpus.append(_cpu(*servers) - c0)
                    assert done is not None
                if profiler is not None:
                    _print_profile(profiler, f"compute of window {len(computes)}")
        ratios = [c / b for c, b in zip(computes, baselines, strict=True)]
        cpu_ratios = [c / b for c, b in zip(compute_cpus, baseline_cpus, strict=True)]
        # CPU: this process and its PostgreSQL server process, for the baseline and the compute
        print("window  baseline  load    compute  ratio  | CPU: baseline  compute  ratio")
        for i, (b, ld, c, r) in enumerate(zip(baselines, loads, computes, ratios, strict=True)):
            bc, cc, cr = baseline_cpus[i], compute_cpus[i], cpu_ratios[i]
            print(
                f"{i + 1:>6}  {b:7.3f}  {ld:6.3f}  {c:7.3f}  {r:5.2f}x |"
                f"      {bc:7.3f}  {cc:7.3f}  {cr:5.2f}x"
            )
        print(
            f"one window without a reference (window 1): {computes[0]:.3f} s = "
            f"{ratios[0]:.2f}x its baseline ({baselines[0]:.3f} s)"
        )
        print(
            f"backfill of {len(due)} windows: {sum(computes):.1f} s, median "
            f"{statistics.median(computes):.3f} s per window = "
            f"{statistics.median(ratios):.2f}x baseline (median ratio); "
            f"load {statistics.median(loads):.3f} s vs baseline "
            f"{statistics.median(baselines):.3f} s"
        )
        if len(computes) > 1:
            print(
                f"window 2 (trailing reference of one window): {computes[1]:.3f} s = "
                f"{ratios[1]:.2f}x its baseline ({baselines[1]:.3f} s); CPU "
                f"{compute_cpus[1]:.3f} s = {cpu_ratios[1]:.2f}x its baseline's "
                f"({baseline_cpus[1]:.3f} s)"
            )
        if len(computes) > 8:
            early = statistics.median(computes[1:7])
            late = statistics.median(computes[7:])
            print(
                f"windows 2-7 (reference of 1-6 windows): {early:.3f} s; windows 8+ (7 "
                f"windows): {late:.3f} s"
            )
        last = due[-1].start
        _time_cold_reference(
            factory,
            model,
            last,
            "trailing reference of 7 windows built alone from stored sorted scores (cold cache)",
        )
        with factory() as session:
            reference = references_for(
                session, model=model, window_start=last, segments={}, cache=cache
            ).get(ALL_SEGMENTS)
            rows = load_rows(session, model=model, start=last, end=last + WINDOW)
        if reference is not None:
            _label_free_share(
                model, reference, rows.scores, rows.labels, last, profile=bool(args.profile)
            )
            _advice_share(model, reference, rows.scores, rows.labels, last)
        del rows
        _decision_cost(factory, _model(factory, model_id), last, cache)
        fixed = _model(factory, model_id)
        fixed.reference_kind = "fixed"
        fixed.reference_windows = None
        fixed.reference_start = last - 7 * WINDOW
        fixed.reference_end = last
        _time_cold_reference(
            factory,
            fixed,
            last,
            "the same 7 windows as a fixed reference, read from the predictions",
            note=" (once per data version)",
        )


if __name__ == "__main__":
    main()
