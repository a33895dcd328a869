"""The stored record of a window and segment (the JSON of ``window_results.record``), built
from its evaluation (:func:`app.metrics.window_evaluation.evaluate_window`), and the summary
of what one computation stored; the bootstrap seed of a segment is the engine's
(:func:`app.metrics.window_evaluation.segment_seed`).

The record's fields and when each is null: ``docs/scheduler.md`` ("The record"); its type,
which every reader shares: :class:`app.records.WindowRecord`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from app.metrics.window_evaluation import WindowEvaluation
from app.metrics.window_evaluation import segment_seed as segment_seed
from app.records import WindowRecord
from app.services.reference_cache import Reference
from app.timeline import iso


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
) -> WindowRecord:
    """The JSON-safe record of one segment of a window from its ``evaluation``, with the
    window's period, the segment, when it was computed and the summary of its ``reference``;
    ``segments_overflow`` is None (the caller sets it on ``*``) and the decision is the
    caller's to add."""
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
    record["segments_overflow"] = None
    out: WindowRecord = clean(record)
    return out
