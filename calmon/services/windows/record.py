"""The stored record of a window and segment (the JSON of ``window_results.record``), built
in one place from its evaluation (:func:`calmon.metrics.window_evaluation.evaluate_window`), and
the summary of what one computation stored, and the record's alert states as stored beside it
(:func:`record_alerts`).

The record's fields and when each is null: ``docs/reference/scheduler.md`` ("The record"); its type,
which every reader shares: :class:`calmon.records.WindowRecord`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from calmon.metrics.window_evaluation import WindowEvaluation
from calmon.records import SegmentsOverflow, WindowRecord
from calmon.services.windows.reference_cache import Reference
from calmon.timeline import iso
from calmon.ui.verdict import alerts


@dataclass(frozen=True, slots=True)
class ComputedWindow:
    """What one computation stored."""

    start: datetime
    end: datetime
    version: int
    predictions: int
    segments: list[str]
    overflow_segments: int
    overflow_predictions: int
    #: overflow predictions beyond those of the window's previous computation (what a
    #: counter of predictions in untracked segments should add)
    overflow_added: int


def clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None, NumPy scalars plain numbers."""
    if isinstance(value, dict):
        return {key: clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean(item) for item in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    return value


def segment_record(
    evaluation: WindowEvaluation,
    *,
    segment: str,
    start: datetime,
    end: datetime,
    computed_at: datetime,
    reference: Reference | None,
    pooled: tuple[int, datetime],
    compared: Reference | None,
    overflow: SegmentsOverflow | None = None,
) -> WindowRecord:
    """The JSON-safe record of one segment of a window from its ``evaluation``, with the
    window's period, the segment, when it was computed, the summary of its ``reference``,
    ``overflow`` (the ``segments_overflow`` of ``*``; None for a segment) and, framing the
    engine's decision, ``pooled``: how many windows it pools and the oldest one's start, and
    ``compared``: the reference its verdict is compared with
    (:func:`calmon.services.windows.decisions.compared_reference`)."""
    record: dict[str, Any] = {
        "start": iso(start),
        "end": iso(end),
        "segment": segment,
        "computed_at": iso(computed_at),
        "n": evaluation.n,
        "n_pos": evaluation.n_pos,
        "unlabelled": evaluation.unlabelled,
        "prior": evaluation.prior,
        "prior_interval": evaluation.prior_interval,
        "regular": evaluation.regular,
        "calibrated": evaluation.calibrated,
        "intervals": evaluation.intervals,
        "split": evaluation.split,
        "reference": reference.summary() if reference is not None else None,
        "estimated": evaluation.estimated,
        "advice": evaluation.advice,
    }
    if evaluation.reliability is not None:
        record["reliability"] = evaluation.reliability
    windows, since = pooled
    record["segments_overflow"] = overflow
    record["decision"] = {
        "windows": windows,
        "start": iso(since),
        **evaluation.decision,
        "reference": compared.period() if compared is not None else None,
    }
    out: WindowRecord = clean(record)
    return out


def record_alerts(record: WindowRecord) -> str:
    """``window_results.alerts`` of ``record``: its alert states in words
    (:func:`calmon.ui.verdict.alerts`) as a JSON array, ``[]`` when quiet. Judged once, when
    the record is written, so that the model list reads them with the latest windows
    (``docs/reference/storage.md``, "The latest windows") instead of judging every record at each
    load."""
    return json.dumps(alerts(record))
