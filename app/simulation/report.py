"""After the upload: have the server compute every simulated window, wait for it, and show it.

A window counts as computed when its record (segment ``*`` of ``GET
/v1/models/{model}/windows``) holds all of the window's predictions and its reference holds
all of the stable period's: only then does it describe the whole stream. That test needs no
clock shared with the server. Windows computed while the upload was still going on (a window
of the reference period, compared with a reference that was not complete yet) are brought up
to date by asking for a recompute of the whole stream once, then again every
``REREQUEST_SECONDS`` for the windows still behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import httpx

from app.simulation.sender import request_json
from app.simulation.stream import REFERENCE_PHASE, WindowPlan
from app.windows import iso

SEGMENT: Final = "*"
PAGE: Final = 1000
POLL_SECONDS: Final = 1.0
REREQUEST_SECONDS: Final = 10.0

Records = dict[datetime, dict[str, Any]]


class WaitTimeoutError(Exception):
    """Some windows were still not computed when the wait ended; ``records`` is what was."""

    def __init__(self, message: str, records: Records) -> None:
        super().__init__(message)
        self.records = records


def fetch_records(client: httpx.Client, *, model: str, start: datetime, end: datetime) -> Records:
    """Every stored record of segment ``*`` of the windows overlapping [start, end), by start."""
    records: Records = {}
    cursor: str | None = None
    while True:
        params = {"start": iso(start), "end": iso(end), "segment": SEGMENT, "limit": str(PAGE)}
        if cursor is not None:
            params["cursor"] = cursor
        _, page = request_json(client, "GET", f"/v1/models/{model}/windows", params=params)
        for record in page["windows"]:
            records[datetime.fromisoformat(record["start"])] = record
        cursor = page["next_cursor"]
        if cursor is None:
            return records


def request_recompute(client: httpx.Client, *, model: str, start: datetime, end: datetime) -> None:
    """Ask the server to recompute the windows overlapping [start, end) at its next tick."""
    request_json(
        client,
        "POST",
        f"/v1/models/{model}/recompute",
        params={"start": iso(start), "end": iso(end)},
    )


def is_complete(
    record: Mapping[str, Any] | None,
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
    reference = record.get("reference")
    return reference is not None and reference["n"] == reference_size


def reference_size(plans: Sequence[WindowPlan]) -> int:
    """Predictions in the reference (stable) period of ``plans``."""
    return sum(plan.size for plan in plans if plan.phase.name == REFERENCE_PHASE)


def wait_for_windows(
    client: httpx.Client,
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
    is complete (:func:`is_complete`, with ``labelled``); returns the records.

    With ``timeout`` 0 the records are read once, without waiting. Raises
    :class:`WaitTimeoutError` when windows are still incomplete at the deadline.
    """
    size = reference_size(plans)
    first, last = plans[0].start, plans[-1].end
    request_recompute(client, model=model, start=first, end=last)
    requested = clock()
    deadline = requested + timeout
    while True:
        records = fetch_records(client, model=model, start=first, end=last)
        behind = [
            p for p in plans if not is_complete(records.get(p.start), p, size, labelled=labelled)
        ]
        if not behind or timeout == 0:
            return records
        now = clock()
        if now >= deadline:
            raise WaitTimeoutError(
                f"{len(plans) - len(behind)} of {len(plans)} windows computed after waiting"
                f" {timeout:g} s; is a scheduler running against this server's database?",
                records,
            )
        if now - requested >= rerequest:
            request_recompute(client, model=model, start=behind[0].start, end=behind[-1].end)
            requested = now
        sleep(max(0.0, min(poll, deadline - now)))


def _number(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value: Any) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _part(value: Any, bounds: Any) -> str:
    """A part of the split and its 95% interval: "+0.012 [-0.004, +0.027]", "[-]" without one."""
    interval = f"[{_signed(bounds[0])}, {_signed(bounds[1])}]" if bounds else "[-]"
    return f"{_signed(value):>6} {interval}"


def format_summary(plans: Sequence[WindowPlan], records: Records) -> str:
    """A table of the computed windows: start, phase, n, prior, regular AP, AP calibrated at
    the reference prior, the prior and likelihood parts of the AP change
    (``docs/metrics.md``), each with its 95% interval, and the prior estimated without labels
    (``estimated``, from every prediction, labelled or not)."""
    header = (
        f"{'window start (UTC)':<17}  {'phase':<10}  {'n':>7}  {'prior':>6}  {'AP':>5}"
        f"  {'AP@ref':>6}  prior part of the AP change [95%]  likelihood part [95%]"
        "  estimated prior"
    )
    lines = [header]
    reference: dict[str, Any] | None = None
    for plan in plans:
        record = records.get(plan.start)
        start = f"{plan.start:%Y-%m-%d %H:%M}"
        if record is None:
            lines.append(f"{start:<17}  {plan.phase.name:<10}  not computed")
            continue
        reference = record.get("reference") or reference
        at_ref = (record.get("calibrated") or {}).get("reference") or {}
        split = (record.get("split") or {}).get("average_precision") or {}
        lines.append(
            f"{start:<17}  {plan.phase.name:<10}  {record['n']:>7}"
            f"  {_number(record['prior'], 4):>6}"
            f"  {_number(record['regular'].get('average_precision'), 3):>5}"
            f"  {_number(at_ref.get('average_precision'), 3):>6}"
            f"  {_part(split.get('prior'), split.get('prior_interval'))}"
            f"  {_part(split.get('likelihood'), split.get('likelihood_interval'))}"
            f"  {_number((record.get('estimated') or {}).get('positive_class_ratio'), 4)}"
        )
    if reference is not None:
        lines.append(
            f"reference {reference['start']} to {reference['end']}: n {reference['n']},"
            f" prior {_number(reference['prior'], 4)},"
            f" AP {_number(reference['regular'].get('average_precision'), 3)}"
        )
    return "\n".join(lines)
