"""After the upload: have the server compute every simulated window, wait for it, and show it.

A window counts as computed when its record (segment ``*`` of ``GET
/v1/models/{model}/windows``) holds all of the window's predictions and its reference holds
all of the stable period's: only then does it describe the whole stream. That test needs no
clock shared with the server. Windows computed while the upload was still going on (a window
of the reference period, compared with a reference that was not complete yet) are brought up
to date by asking for a recompute of the whole stream once, then again for the windows still
behind when ``REREQUEST_SECONDS`` went by without one more window completing, and twice as
long each further time: a request marks its windows anew, so a computation in progress is
discarded and starts over; asking at a fixed pace kept a loaded machine (one window taking
longer than the pace) from ever finishing one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, cast

from calmon.catalogue import DECISION_METRIC
from calmon.names import ALL_SEGMENTS
from calmon.records import (
    Interval,
    ReferenceSummary,
    SplitParts,
    WindowRecord,
    metric_value,
    split_parts,
)
from calmon.simulation.stream import REFERENCE_PHASE, WindowPlan
from calmon.timeline import iso
from calmon.verdict import VERDICT_WORDS, stored_verdict
from calmon.words import plural

if TYPE_CHECKING:
    from calmon_client import Api

POLL_SECONDS: Final = 1.0
REREQUEST_SECONDS: Final = 10.0

Records = dict[datetime, WindowRecord]


class WaitTimeoutError(Exception):
    """Some windows were still not computed when the wait ended; ``records`` is what was."""

    def __init__(self, message: str, records: Records) -> None:
        super().__init__(message)
        self.records = records


class MixedWindowsError(WaitTimeoutError):
    """Some windows hold more predictions than were sent to them: the model holds another
    stream's predictions there, so they will never match the plan (no use waiting)."""


def fetch_records(api: Api, *, model: str, start: datetime, end: datetime) -> Records:
    """Every stored record of segment ``*`` of the windows overlapping [start, end), by start."""
    return {
        datetime.fromisoformat(record["start"]): cast(WindowRecord, record)
        for record in api.windows(model, segment=ALL_SEGMENTS, start=iso(start), end=iso(end))
    }


def is_complete(
    record: WindowRecord | None,
    plan: WindowPlan,
    reference_size: int,
    *,
    labelled: bool = False,
) -> bool:
    """True when ``record`` was computed from every prediction of ``plan`` and of the
    reference period (``reference_size`` predictions); with ``labelled``, also from every
    label of ``plan`` (none of its predictions still unlabelled)."""
    if record is None or record["n"] + record["unlabelled"] != plan.size:
        return False
    if labelled and record["unlabelled"]:
        return False
    reference = record["reference"]
    return reference is not None and reference["n"] == reference_size


def _mixed(record: WindowRecord, plan: WindowPlan, reference_size: int) -> bool:
    """True when ``record`` holds more predictions than ``plan``, or its reference more than
    the reference period's ``reference_size``: predictions of another stream are there."""
    reference = record["reference"]
    return record["n"] + record["unlabelled"] > plan.size or (
        reference is not None and reference["n"] > reference_size
    )


def reference_size(plans: Sequence[WindowPlan]) -> int:
    """Predictions in the reference (stable) period of ``plans``."""
    return sum(plan.size for plan in plans if plan.phase.name == REFERENCE_PHASE)


def wait_for_windows(
    api: Api,
    *,
    model: str,
    plans: Sequence[WindowPlan],
    timeout: float,
    poll: float = POLL_SECONDS,
    rerequest: float = REREQUEST_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    labelled: bool = False,
) -> Records:
    """Request a recompute of ``plans`` and wait up to ``timeout`` seconds until every window
    is complete (:func:`is_complete`, with ``labelled``); returns the records. The windows
    still behind are asked for again after ``rerequest`` seconds without progress, then after
    twice as long each time: every request marks them anew, which discards a computation in
    progress, so on a machine that takes longer than ``rerequest`` per window, asking at a
    fixed pace would never let one finish.

    With ``timeout`` 0 the records are read once, without waiting. Raises
    :class:`WaitTimeoutError` when windows are still incomplete at the deadline, and
    :class:`MixedWindowsError` at once when a window holds more predictions than planned.
    """
    size = reference_size(plans)
    first, last = plans[0].start, plans[-1].end
    api.recompute(model, start=iso(first), end=iso(last))
    requested = clock()
    deadline = requested + timeout
    remaining = len(plans)
    pause = rerequest
    while True:
        records = fetch_records(api, model=model, start=first, end=last)
        behind = [
            p for p in plans if not is_complete(records.get(p.start), p, size, labelled=labelled)
        ]
        mixed = [p for p in plans if p.start in records and _mixed(records[p.start], p, size)]
        if mixed:
            raise MixedWindowsError(
                f"{len(mixed)} of {plural(len(plans), 'window')}"
                f" {'holds' if len(mixed) == 1 else 'hold'} more predictions than this run sent:"
                f" model {model} has predictions of an earlier run in them; run again with a"
                " new --model name",
                records,
            )
        if not behind or timeout == 0:
            return records
        now = clock()
        if len(behind) < remaining:
            remaining, requested = len(behind), now
        if now >= deadline:
            raise WaitTimeoutError(
                f"{len(plans) - len(behind)} of {plural(len(plans), 'window')} computed after"
                f" waiting {timeout:g} s; is a scheduler running against this server's database?",
                records,
            )
        if now - requested >= pause:
            api.recompute(model, start=iso(behind[0].start), end=iso(behind[-1].end))
            requested, pause = now, 2 * pause
        sleep(max(0.0, min(poll, deadline - now)))


def _number(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value: Any) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _part(value: float | None, bounds: Interval) -> str:
    """A part of the split and its 95% interval: "+0.012 [-0.004, +0.027]", "[-]" without one."""
    interval = f"[{_signed(bounds[0])}, {_signed(bounds[1])}]" if bounds else "[-]"
    return f"{_signed(value):>6} {interval}"


def _estimate(record: WindowRecord) -> str:
    """The label-free prior, its 95% interval and its verdict (one word:
    ``more_positives_or_higher_scores``, ``fewer_positives_or_lower_scores``,
    ``scores_changed``, ``no_change``, ``not_enough_data``), or ``-``."""
    estimated = record["estimated"]
    if estimated is None:
        return "-"
    lower, upper = estimated["positive_class_ratio_interval"]
    return (
        f"{_number(estimated['positive_class_ratio'], 4)} [{_number(lower, 4)},{_number(upper, 4)}]"
        f" {estimated['verdict'] or '-'}"
    )


def format_summary(plans: Sequence[WindowPlan], records: Records) -> str:
    """A table of the computed windows: start, phase, n, prior, regular AP, AP calibrated at
    the reference prior, the prior and likelihood parts of the AP change
    (``docs/reference/metrics.md``), each with its 95% interval, the predictions without a
    label, and the prior estimated without labels (``estimated``, from every prediction,
    labelled or not) with its 95% interval and verdict."""
    header = (
        f"{'window start (UTC)':<17}  {'phase':<10}  {'n':>7}  {'prior':>6}  {'AP':>5}"
        f"  {'AP@ref':>6}  prior part of the AP change [95%]  likelihood part [95%]"
        "  unlabelled  estimated prior [95%] and what it says"
    )
    lines = [header]
    reference: ReferenceSummary | None = None
    for plan in plans:
        record = records.get(plan.start)
        start = f"{plan.start:%Y-%m-%d %H:%M}"
        if record is None:
            lines.append(f"{start:<17}  {plan.phase.name:<10}  not computed")
            continue
        reference = record["reference"] or reference
        at_ref = record["calibrated"]["reference"]
        split = record["split"]
        parts = None if split is None else split_parts(split, DECISION_METRIC)
        prior = (
            _part(None, None) if parts is None else _part(parts["prior"], parts["prior_interval"])
        )
        likelihood = (
            _part(None, None)
            if parts is None
            else _part(parts["likelihood"], parts["likelihood_interval"])
        )
        lines.append(
            f"{start:<17}  {plan.phase.name:<10}  {record['n']:>7}"
            f"  {_number(record['prior'], 4):>6}"
            f"  {_number(metric_value(record['regular'], DECISION_METRIC), 3):>5}"
            f"  {_number(None if at_ref is None else metric_value(at_ref, DECISION_METRIC), 3):>6}"
            f"  {prior}"
            f"  {likelihood}"
            f"  {record['unlabelled']:>10}  {_estimate(record)}"
        )
    if reference is not None:
        lines.append(
            f"reference {reference['start']} to {reference['end']}: n {reference['n']},"
            f" prior {_number(reference['prior'], 4)},"
            f" AP {_number(metric_value(reference['regular'], DECISION_METRIC), 3)}"
        )
    return "\n".join(lines)


#: a phase's class ratio "moved" when it differs from the reference's by more than this many
#: standard errors of the difference (two-proportion z over the phase's pooled windows)
RATIO_Z: Final = 3.0


def _ratio_moved(n_pos: int, n: int, ref_pos: int, ref_n: int) -> bool:
    """Whether n_pos / n differs from ref_pos / ref_n by more than :data:`RATIO_Z` standard
    errors of the difference (pooled proportion); False when either set is empty."""
    if n == 0 or ref_n == 0:
        return False
    pooled = (n_pos + ref_pos) / (n + ref_n)
    if pooled in (0.0, 1.0):
        return n_pos / n != ref_pos / ref_n
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n + 1.0 / ref_n))
    return abs(n_pos / n - ref_pos / ref_n) > RATIO_Z * se


def _model_change(parts: Sequence[SplitParts]) -> str | None:
    """What the likelihood parts of a phase's windows say, by majority of the windows with an
    interval: "got worse" (interval below 0), "got better" (above 0), "did not change" (holds
    0); None when no window has an interval."""
    votes = {"got worse": 0, "got better": 0, "did not change": 0}
    for part in parts:
        bounds = part["likelihood_interval"]
        if bounds is None:
            continue
        if bounds[1] < 0.0:
            votes["got worse"] += 1
        elif bounds[0] > 0.0:
            votes["got better"] += 1
        else:
            votes["did not change"] += 1
    counted = sum(votes.values())
    if counted == 0:
        return None
    word, count = max(votes.items(), key=lambda item: item[1])
    return word if 2 * count > counted else "did not change"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _conclusion(moved: bool, change: str | None) -> str:
    if change is None:
        model = "no interval of the likelihood part to tell whether the model changed"
        return f"the class ratio {'moved' if moved else 'did not move'}; {model}"
    if change == "did not change":
        return (
            "the class ratio moved; the model did not change"
            if moved
            else "neither the class ratio nor the model changed"
        )
    if moved:
        return f"both: the class ratio moved and the model {change}"
    return f"the model {change}; the class ratio did not move"


def _estimate_verdict(found: Sequence[WindowRecord], ref_prior: Any, true_ratio: str) -> str:
    """What the label-free estimates of a phase's unlabelled windows say: the scores changed
    in a way a class-ratio change does not explain when the label-shift check rejects in any
    of them (their estimate does not hold), else the estimated class ratio."""
    estimated = [e for r in found if (e := r["estimated"])]
    rejected = sum(
        (check := e["label_shift"]) is not None and check["holds"] is False for e in estimated
    )
    if rejected:
        return (
            f"scores changed in a way a class-ratio change does not explain (label-shift check"
            f" rejects in {rejected} of {plural(len(estimated), 'window')}): the model or its"
            f" inputs changed, labels needed ({true_ratio})"
        )
    estimate = _mean([e["positive_class_ratio"] for e in estimated])
    if estimate is None or not ref_prior:
        return "no estimate; the likelihood part needs labels"
    fell = (
        "; a fall may also be positives scoring lower, which scores alone cannot tell"
        if estimate < ref_prior
        else "; a rise may also be negatives scoring like positives, which scores alone cannot tell"
        if estimate > ref_prior
        else ""
    )
    return (
        f"estimated class ratio x{estimate / ref_prior:.2f}"
        f" ({ref_prior:.4f} -> {estimate:.4f}, {true_ratio}); scores consistent with a"
        f" class-ratio change{fell}; the likelihood part needs labels"
    )


def format_verdicts(
    plans: Sequence[WindowPlan], records: Records, truth: Mapping[str, Any]
) -> list[str]:
    """A verdict per phase after the reference, in plain words, beside the true values.

    For each phase: the class ratio of its labelled predictions pooled against the
    reference's (a factor, measured and true), the likelihood part of the average precision's
    change (mean over its windows, with the mean bounds of their 95% intervals, and the true
    part), and what that says: whether the class ratio moved (:data:`RATIO_Z`), and whether
    the model got worse, better or did not change (by majority of the windows' likelihood
    intervals). ``truth`` is the truth document (``population.truth_document``). A phase
    whose windows are not computed, or hold no label yet, says so.
    """
    true_rows = {row["start"]: row for row in truth["windows"]}
    true_ref_prior = truth["phases"][REFERENCE_PHASE]["prior"]
    lines: list[str] = []
    for name in dict.fromkeys(plan.phase.name for plan in plans):
        if name == REFERENCE_PHASE:
            continue
        chosen = [plan for plan in plans if plan.phase.name == name]
        lines.append(_phase_verdict(name, chosen, records, truth, true_rows, true_ref_prior))
    return lines


def _phase_verdict(
    name: str,
    chosen: Sequence[WindowPlan],
    records: Records,
    truth: Mapping[str, Any],
    true_rows: Mapping[str, Any],
    true_ref_prior: float,
) -> str:
    """The verdict line of the phase ``name`` over its windows ``chosen``: not computed, no
    labels yet (then what the label-free estimates say), or the measured class ratio and
    likelihood part against the true ones (``truth``, its ``true_rows`` by window start and
    the true reference class ratio ``true_ref_prior``) with what they mean."""
    found = [records[plan.start] for plan in chosen if plan.start in records]
    reference = next((r["reference"] for r in found if r["reference"]), None)
    if not found or reference is None:
        return f"{name}: not computed, no verdict"
    true_prior = truth["phases"][name]["prior"]
    true_ratio = f"true {true_ref_prior:.3f} -> {true_prior:.3f}"
    n, n_pos = sum(r["n"] for r in found), sum(r["n_pos"] for r in found)
    ref_prior = reference["prior"]
    if n == 0 or not ref_prior:
        return f"{name}: no labels yet; {_estimate_verdict(found, ref_prior, true_ratio)}"
    ratio = n_pos / n
    moved = _ratio_moved(n_pos, n, reference["n_pos"], reference["n"])
    parts, likelihood, interval = _likelihood_parts(found)
    true_part = _true_likelihood(chosen, true_rows)
    return (
        f"{name}: class ratio x{ratio / ref_prior:.2f} ({ref_prior:.4f} -> {ratio:.4f},"
        f" {true_ratio}); likelihood part of AP {_signed(likelihood)}{interval}"
        f" (true {_signed(true_part)}): {_conclusion(moved, _model_change(parts))}"
    )


def _likelihood_parts(
    found: Sequence[WindowRecord],
) -> tuple[list[SplitParts], float | None, str]:
    """The average precision splits of the windows ``found`` that have a likelihood part,
    the mean of those parts, and the mean bounds of their 95% intervals as text (`` [-]``
    when no window has one), as the verdict line shows them."""
    splits = [
        window_parts
        for r in found
        if (split := r["split"]) is not None
        and (window_parts := split_parts(split, DECISION_METRIC)) is not None
    ]
    parts = [s for s in splits if s["likelihood"] is not None]
    likelihood = _mean([value for s in parts if (value := s["likelihood"]) is not None])
    bounded = [bounds for s in parts if (bounds := s["likelihood_interval"])]
    low, high = _mean([b[0] for b in bounded]), _mean([b[1] for b in bounded])
    interval = f" [{_signed(low)}, {_signed(high)}]" if bounded else " [-]"
    return parts, likelihood, interval


def _true_likelihood(chosen: Sequence[WindowPlan], true_rows: Mapping[str, Any]) -> float | None:
    """The mean true likelihood part of the average precision's change over the windows
    ``chosen`` that the truth document lists, to print beside the measured one."""
    return _mean(
        [
            true_rows[iso(plan.start)]["average_precision_change"]["likelihood"]
            for plan in chosen
            if iso(plan.start) in true_rows
        ]
    )


def format_decisions(plans: Sequence[WindowPlan], records: Records) -> list[str]:
    """A line per phase after the reference on the windows' pooled decisions (the verdict the
    web view, ``calmon windows`` and the alerts read, ``docs/reference/metrics.md``): the
    verdict of its last window in the web view's words (:data:`calmon.verdict.VERDICT_WORDS`),
    what that decision pooled, and how many windows into the phase a decision first said so.
    Windows without a record are skipped."""
    lines: list[str] = []
    for name in dict.fromkeys(plan.phase.name for plan in plans):
        if name == REFERENCE_PHASE:
            continue
        decisions = [
            None if (record := records.get(plan.start)) is None else record["decision"]
            for plan in plans
            if plan.phase.name == name
        ]
        found = [d for d in decisions if d is not None]
        if not found:
            continue
        last = found[-1]
        verdict = stored_verdict(last["verdict"])
        first = next(
            i for i, d in enumerate(decisions, 1) if d and stored_verdict(d["verdict"]) is verdict
        )
        lines.append(
            f"{name}: decision {VERDICT_WORDS[verdict]} (last window:"
            f" {plural(last['windows'], 'window')} pooled, {plural(last['n_pos'], 'positive')},"
            " likelihood part of AP"
            f" {_part(last['likelihood_part'], last['likelihood_interval'])});"
            f" first said at window {first} of the phase"
        )
    return lines
