"""`calmon simulate`: send a synthetic stream with a known prior shift and a known likelihood
drift to a running server, then show what the server computed."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, BinaryIO, Final, TextIO

from calmon.commands.common import http_url, positive_int
from calmon.timeline import WINDOW_SECONDS, iso
from calmon.words import plural

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from calmon_client import Api

    from calmon.simulation.sender import SendTotals
    from calmon.simulation.stream import ScoreMap, WindowData, WindowPlan

TOKEN_ENV: Final = "CALMON_TOKEN"  # noqa: S105 (the variable's name, not a token)
THRESHOLD: Final = 0.5
#: seconds to wait for the windows: a loaded 2-core machine took up to 130 s
#: (docs/reference/simulate.md)
DEFAULT_WAIT: Final = 300.0
#: the simulated model's objective: each window's advice is the threshold keeping this
#: precision at its class ratio (docs/reference/acting.md)
OBJECTIVE: Final = {"target_precision": 0.5}
#: seconds for one request, and requests made of each before giving up on a failure that may
#: pass (the client's back-off between them: at most 11.3 s in all)
TIMEOUT: Final = 60.0
ATTEMPTS: Final = 8

EPILOG = """\
The stream (see docs/reference/simulate.md): WINDOWS-PER-PHASE windows per phase, in the order of
--phases, ending at the last window boundary before now, so every window is closed.
  stable      pi = 0.05, ROC AUC 0.90: the model's fixed reference period
  prior       pi = 0.008 with P(score | y) unchanged: a pure prior shift
  likelihood  pi = 0.05, ROC AUC 0.80: the classes overlap more, a pure likelihood drift
--prior P is the rare-positive preset: the stable and likelihood phases at pi = P, the prior
phase moved by the same factor (x0.16); use it with more predictions per window, e.g.
--prior 0.005 --per-window 4000 gives about 20 positives a window, too few for a window's own
AP interval: each window's pooled decision (docs/reference/metrics.md) then decides; the preset's
model pools 100 positives per decision (the default is 400, too many for a short stream).
The model is created with score_kind probability, threshold 0.5, grace 0s, the stable
period as its fixed reference and the objective "precision at least 0.5" (threshold advice,
docs/reference/acting.md), under MODEL-2, MODEL-3, ... when MODEL exists, unless --reuse;
the token needs the admin scope. The output ends with a verdict per phase: whether the class
ratio moved and whether the model got worse, beside the true values.
"""


def _batch_size(text: str) -> int:
    from calmon.services.ingest_schemas import MAX_BATCH

    value = positive_int(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BATCH}: {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number ≥ 0: {text!r}")
    return value


def _phases(text: str) -> list[str]:
    from calmon.simulation.stream import PHASES, REFERENCE_PHASE

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PHASES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown phase {unknown[0]!r}; expected some of {', '.join(PHASES)}"
        )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError("each phase may appear once")
    if REFERENCE_PHASE not in names:
        raise argparse.ArgumentTypeError(
            f"the phases must include {REFERENCE_PHASE} (the reference period)"
        )
    return names


def _prior(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 < value <= 0.2:
        raise argparse.ArgumentTypeError(f"must be in (0, 0.2]: {text!r}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon simulate`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "--url",
        required=True,
        type=http_url,
        help="root URL of the server, e.g. http://127.0.0.1:8000",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="model name to create and feed; when it exists already, the first free name"
        " MODEL-2, MODEL-3, ... is used instead (see --reuse)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="send to MODEL even if it exists (to finish an interrupted run with the same"
        " --seed; another stream's predictions would mix with this one's)",
    )
    parser.add_argument(
        "--window", choices=list(WINDOW_SECONDS), default="5m", help="window length (default 5m)"
    )
    parser.add_argument(
        "--windows-per-phase", type=positive_int, default=4, metavar="N", help="default 4"
    )
    parser.add_argument(
        "--per-window",
        type=positive_int,
        default=20_000,
        metavar="N",
        help="predictions per window (default 20000)",
    )
    parser.add_argument(
        "--phases",
        type=_phases,
        default=None,
        metavar="LIST",
        help="comma-separated phases in time order (default stable,prior,likelihood)",
    )
    parser.add_argument(
        "--prior",
        type=_prior,
        default=None,
        metavar="P",
        help="positive class ratio of the stable and likelihood phases (default 0.05; e.g."
        " 0.005: the rare-positive preset, decided by pooled decisions)",
    )
    parser.add_argument("--seed", type=int, help="random seed (default: a fresh one, printed)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token with the admin scope (default: the {TOKEN_ENV} variable)",
    )
    parser.add_argument("--truth", metavar="FILE", help="write the true values per window (JSON)")
    parser.add_argument(
        "--batch-size",
        type=_batch_size,
        default=1_000,
        metavar="N",
        help="predictions per request, at most 10000 (default 1000)",
    )
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        default=2,
        metavar="N",
        help="requests in flight (default 2)",
    )
    parser.add_argument(
        "--label-delay",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help=(
            "send the labels of the windows after the reference period this many seconds after"
            " their predictions, so the server first shows its label-free estimate (default 0:"
            " labels with their predictions)"
        ),
    )
    parser.add_argument(
        "--wait",
        type=_seconds,
        default=DEFAULT_WAIT,
        metavar="SECONDS",
        help="how long to wait for the server to compute every window"
        f" (default {DEFAULT_WAIT:g}; 0: no wait)",
    )


class _Progress:
    """Sending progress on ``stream``: a bar redrawn in place on a terminal, else a line per
    window. ``batch`` is called from the sending threads."""

    def __init__(self, stream: TextIO, *, total: int, windows: int) -> None:
        self.stream = stream
        self.total = total
        self.windows = windows
        self.sent = 0
        self.tty = stream.isatty()
        self._lock = threading.Lock()

    def batch(self, data: WindowData, rows: int) -> None:
        with self._lock:
            self.sent += rows
            if self.tty:
                width = 30
                done = width * self.sent // self.total
                self.stream.write(
                    f"\r[{'#' * done}{'.' * (width - done)}] {self.sent}/{self.total} predictions,"
                    f" window {data.plan.index + 1}/{self.windows} ({data.plan.phase.name})"
                )
                self.stream.flush()

    def window(self, data: WindowData, totals: SendTotals) -> None:
        plan = data.plan
        line = (
            f"window {plan.index + 1}/{self.windows} {plan.start:%Y-%m-%d %H:%M}Z"
            f" {plan.phase.name:<10} sent {len(data.ids)} (positives {data.n_pos}):"
            f" {totals.new} new, {plural(totals.duplicates, 'repeat')}"
        )
        self.stream.write(("\r\033[K" if self.tty else "") + line + "\n")
        self.stream.flush()


#: the rare-positive preset's decision setting: a demonstration's stream is short, so its
#: decisions pool 100 positives (where the AP parts get intervals), not the default 400, over
#: no minimum span (the default's 20 hours would reach back over most of a short stream)
RARE_DECISION: Final = {"min_positives": 100, "max_span": "7d", "min_span": "0s"}


def _model_config(
    plans: Sequence[WindowPlan], window: str, *, rare: bool = False
) -> dict[str, Any]:
    """The configuration the simulated model is created with: the stable period as its fixed
    reference; grace 0 (late labels, with --label-delay, have their windows recomputed); an
    objective, so that every window carries threshold advice; with ``rare`` (``--prior``),
    RARE_DECISION."""
    from calmon.simulation.stream import REFERENCE_PHASE, phase_bounds

    bounds = phase_bounds(plans, REFERENCE_PHASE)
    assert bounds is not None
    return {
        "score_kind": "probability",
        "window": window,
        "threshold": THRESHOLD,
        "reference": {
            "kind": "fixed",
            "start": iso(bounds[0]),
            "end": iso(bounds[1]),
        },
        "grace": "0s",
        "objective": dict(OBJECTIVE),
        **({"decision": dict(RARE_DECISION)} if rare else {}),
    }


def run(args: argparse.Namespace) -> int:
    """Create the model, send the stream, write the truth file, wait and show the summary."""
    import secrets
    from datetime import UTC, datetime

    from calmon_client import ApiError

    from calmon.commands.common import url_hint
    from calmon.simulation.stream import DEFAULT_PHASES, STABLE_PRIOR, phases_for, plan_windows

    seed: int = args.seed if args.seed is not None else secrets.randbelow(2**31)
    if args.phases is None:
        args.phases = list(DEFAULT_PHASES)
    phases = phases_for(STABLE_PRIOR if getattr(args, "prior", None) is None else args.prior)
    plans = plan_windows(
        phases=[phases[name] for name in args.phases],
        window=args.window,
        windows_per_phase=args.windows_per_phase,
        per_window=args.per_window,
        now=datetime.now(UTC),
    )
    try:
        truth = open(args.truth, "wb") if args.truth else None  # noqa: SIM115
    except OSError as exc:
        print(f"calmon simulate: cannot write {args.truth}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        return _simulate(args, plans=plans, seed=seed, truth=truth)
    except ApiError as exc:
        print(f"calmon simulate: {exc}{url_hint(exc)}", file=sys.stderr)
        return 1
    except NoFreeNameError as exc:
        print(f"calmon simulate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("calmon simulate: interrupted", file=sys.stderr)
        return 130
    finally:
        if truth is not None:
            truth.close()


def _simulate(
    args: argparse.Namespace, *, plans: list[WindowPlan], seed: int, truth: BinaryIO | None
) -> int:
    """The run once the stream is planned: announce it, create the model, send the stream,
    write the truth file, then show the server's results (first its estimates when labels are
    held back, then the verdicts)."""
    from calmon_client import Api

    _announce(args=args, plans=plans, seed=seed)
    stream = _Stream(
        plans=plans, seed=seed, label_delay=args.label_delay, score_map=_score_map(plans)
    )
    token = args.token or os.environ.get(TOKEN_ENV) or None
    with Api(args.url, token=token, timeout=TIMEOUT, attempts=ATTEMPTS) as api:
        args.model = _create_model(api, args=args, plans=plans)
        sent_at = _send_stream(api, args=args, plans=plans, stream=stream)
        document = _write_truth(truth, args=args, plans=plans, seed=seed, stream=stream)
        if stream.delayed:
            status = _send_labels_late(
                api, args=args, plans=plans, truth=document, stream=stream, sent_at=sent_at
            )
            if status:
                return status
        return _wait_and_show(
            api, args=args, plans=plans, truth=document, labelled=bool(stream.delayed)
        )


def _announce(*, args: argparse.Namespace, plans: list[WindowPlan], seed: int) -> None:
    """Say what is about to be sent: model, windows, phases, size and seed."""
    print(
        f"calmon simulate: model {args.model}, {plural(len(plans), 'window')} of {args.window}"
        " from"
        f" {plans[0].start:%Y-%m-%d %H:%M}Z to {plans[-1].end:%Y-%m-%d %H:%M}Z"
        f" ({', '.join(args.phases)}), {plural(args.per_window, 'prediction')} each, seed {seed}",
        file=sys.stderr,
    )


def _score_map(plans: Sequence[WindowPlan]) -> ScoreMap:
    """The stream's score map: the posterior of its stable phase (of :data:`PHASES`' when the
    plans have none)."""
    from calmon.simulation.stream import PHASES, REFERENCE_PHASE, ScoreMap

    stable = next(
        (plan.phase for plan in plans if plan.phase.name == REFERENCE_PHASE),
        PHASES[REFERENCE_PHASE],
    )
    return ScoreMap.posterior_of(stable)


class _Stream:
    """The windows of ``plans`` generated one at a time as they are sent, remembering the
    positives drawn for each and the windows whose labels are held back (``label_delay``)."""

    def __init__(
        self, *, plans: list[WindowPlan], seed: int, label_delay: float, score_map: ScoreMap
    ) -> None:
        self.plans = plans
        self.seed = seed
        self.label_delay = label_delay
        self.score_map = score_map
        self.positives: list[int] = []
        self.delayed: list[WindowData] = []

    def labelled(self, data: WindowData) -> bool:
        """Whether ``data`` is sent with its labels: always without a delay, and the
        reference period always."""
        from calmon.simulation.stream import REFERENCE_PHASE

        return not self.label_delay or data.plan.phase.name == REFERENCE_PHASE

    def __iter__(self) -> Iterator[WindowData]:
        from calmon.simulation.stream import generate_window

        for plan in self.plans:
            data = generate_window(plan, seed=self.seed, score_map=self.score_map)
            self.positives.append(data.n_pos)
            if not self.labelled(data):
                self.delayed.append(data)
            yield data


def _create_model(api: Api, *, args: argparse.Namespace, plans: list[WindowPlan]) -> str:
    """Create (or, with ``--reuse``, reconfigure) the model the stream goes to; its name."""
    err = sys.stderr
    model: str = args.model
    if not args.reuse:
        model = _free_name(api, args.model)
        if model != args.model:
            print(
                f"calmon simulate: model {args.model} exists (its predictions would mix with"
                f" this stream's); sending to model {model} instead (--reuse to send to"
                f" {args.model})",
                file=err,
            )
    config = _model_config(plans, args.window, rare=getattr(args, "prior", None) is not None)
    if not api.put_model(model, config=config).created:
        print(
            f"calmon simulate: model {model} existed; its configuration is replaced"
            " and its earlier predictions stay",
            file=err,
        )
    return model


def _send_stream(
    api: Api, *, args: argparse.Namespace, plans: list[WindowPlan], stream: _Stream
) -> float:
    """Send every window of ``stream`` with a progress display and say how it went; the
    monotonic time the last prediction was sent at."""
    import time

    from calmon.simulation.sender import send_windows

    progress = _Progress(sys.stderr, total=len(plans) * args.per_window, windows=len(plans))
    started = time.monotonic()
    totals = send_windows(
        api,
        model=args.model,
        windows=stream,
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        on_batch=progress.batch,
        on_window=progress.window,
        labelled=stream.labelled,
    )
    sent_at = time.monotonic()
    print(
        f"calmon simulate: sent {plural(sum(p.size for p in plans), 'prediction')} in"
        f" {time.monotonic() - started:.1f} s ({sum(t.new for t in totals)} new,"
        f" {plural(sum(t.duplicates for t in totals), 'repeat')})",
        file=sys.stderr,
    )
    return sent_at


def _write_truth(
    truth: BinaryIO | None,
    *,
    args: argparse.Namespace,
    plans: list[WindowPlan],
    seed: int,
    stream: _Stream,
) -> dict[str, Any]:
    """The true values of the stream sent, written to ``truth`` (when given) as JSON."""
    import orjson

    from calmon.simulation.population import truth_document
    from calmon.simulation.stream import REFERENCE_PHASE

    reference = next((p.phase for p in plans if p.phase.name == REFERENCE_PHASE), None)
    document = truth_document(
        plans=plans,
        positives=stream.positives,
        model=args.model,
        window=args.window,
        seed=seed,
        threshold=THRESHOLD,
        score_map=stream.score_map,
        reference=reference,
    )
    if truth is not None:
        truth.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        truth.flush()
    return document


def _send_labels_late(
    api: Api,
    *,
    args: argparse.Namespace,
    plans: list[WindowPlan],
    truth: dict[str, Any],
    stream: _Stream,
    sent_at: float,
) -> int:
    """Show the server's estimates for the windows sent without labels, then send their
    labels ``--label-delay`` seconds after the predictions; 1 when the wait timed out."""
    import time

    from calmon.simulation.sender import send_labels

    err = sys.stderr
    print(
        f"calmon simulate: the labels of {plural(len(stream.delayed), 'window')} are held back for"
        f" {args.label_delay:g} s; before they land the server shows its estimates",
        file=err,
    )
    status = _wait_and_show(api, args=args, plans=plans, truth=truth, labelled=False)
    if status:
        return status
    time.sleep(max(0.0, args.label_delay - (time.monotonic() - sent_at)))
    count = send_labels(api, model=args.model, windows=stream.delayed, batch_size=args.batch_size)
    print(f"calmon simulate: sent {plural(count, 'label')} late", file=err)
    return 0


class NoFreeNameError(Exception):
    """Every name :func:`_free_name` tries is taken."""


def _free_name(api: Api, model: str) -> str:
    """``model`` when the server has no model of that name, else the first of ``model-2``,
    ``model-3``, … it has not (shortened to stay a valid name)."""
    from calmon_client import ApiError

    from calmon.names import MODEL_NAME_MAX

    for number in range(1, 1000):
        suffix = "" if number == 1 else f"-{number}"
        name = model[: MODEL_NAME_MAX - len(suffix)] + suffix
        try:
            api.get_model(name)
        except ApiError as exc:
            if exc.status == 404:
                return name
            raise
    raise NoFreeNameError(f"models {model} to {model}-999 all exist; choose another --model name")


def _show(plans: list[WindowPlan], records: Any, truth: dict[str, Any] | None) -> None:
    """Print the table of the windows, then after a blank line the verdict of each phase
    (with ``truth``) or that there is none (when not every window was computed)."""
    from calmon.simulation.report import format_decisions, format_summary, format_verdicts

    print(format_summary(plans, records))
    print()
    if truth is None:
        print("no verdict: not every window holds this run's predictions")
    else:
        print("\n".join(format_verdicts(plans, records, truth)))
        print("\n".join(format_decisions(plans, records)))


def _wait_and_show(
    api: Api,
    *,
    args: argparse.Namespace,
    plans: list[WindowPlan],
    truth: dict[str, Any],
    labelled: bool,
) -> int:
    """Wait for the server to compute every window (with ``labelled``, from every label too)
    and print the summary and the verdicts; 1 when the wait timed out."""
    import time

    from calmon.simulation.report import WaitTimeoutError, wait_for_windows

    err = sys.stderr
    if args.wait:
        print(
            f"calmon simulate: waiting up to {args.wait:g} s for the server to compute"
            f" {plural(len(plans), 'window')}",
            file=err,
        )
    started = time.monotonic()
    try:
        records = wait_for_windows(
            api, model=args.model, plans=plans, timeout=args.wait, labelled=labelled
        )
    except WaitTimeoutError as exc:
        print(f"calmon simulate: {exc}", file=err)
        _show(plans, exc.records, None)
        return 1
    if args.wait:
        print(
            f"calmon simulate: every window computed after {time.monotonic() - started:.1f} s",
            file=err,
        )
    _show(plans, records, truth)
    return 0
