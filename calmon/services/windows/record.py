"""The stored record of a window and segment (the JSON of ``window_results.record``), built
in one place (:func:`evaluate_segment`) from the segment's predictions, the model's settings as a
:class:`~calmon.metrics.window_evaluation.WindowConfig`, its reference and what its decision
pools; the summary of what one computation stored, and the record's alert states as stored
beside it (:func:`record_alerts`).

Nothing here reads the database: the scheduler reads the inputs and writes the record
(:mod:`calmon.services.windows.compute`), and the offline report builds its records with the
same code from a file's rows. The record's fields and when each is null:
``docs/reference/scheduler.md`` ("The record"); its type, which every reader shares:
:class:`calmon.records.WindowRecord`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from calmon.arrays import FloatArray, Int8Array
from calmon.metrics.window_evaluation import (
    TrailingSet,
    WindowConfig,
    WindowEvaluation,
    evaluate_window,
    window_set,
)
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


@dataclass(frozen=True, slots=True)
class TrailingPool:
    """The trailing windows a segment's decision pools besides its window, oldest first: their
    start, count, sorted scores, and the reference the pooled set is compared with.

    Attributes:
        reference_kind: the model's reference kind: under a ``trailing`` reference the pooled
            set is compared with :attr:`reference` (the windows before the oldest pooled one,
            so that no pooled window is part of its own reference), under a ``fixed`` one with
            the window's own reference.
    """

    start: datetime
    windows: int
    positives: list[FloatArray]
    negatives: list[FloatArray]
    reference: Reference | None
    reference_kind: str


def compared_reference(
    *, trailing: TrailingPool | None, reference: Reference | None
) -> Reference | None:
    """The reference a window's decision is compared with: the trailing pool's for a trailing
    reference when the decision pools earlier windows, else the window's own ``reference``."""
    if trailing is not None and trailing.reference_kind == "trailing":
        return trailing.reference
    return reference


def pooled_set(*, trailing: TrailingPool | None, reference: Reference | None) -> TrailingSet | None:
    """What the engine pools with a window (None: the window alone), compared with the
    trailing pool's reference for a trailing reference, else with the window's own."""
    if trailing is None:
        return None
    compared = compared_reference(trailing=trailing, reference=reference)
    return TrailingSet(
        positives=trailing.positives,
        negatives=trailing.negatives,
        reference=None if compared is None else compared.data,
    )


def evaluate_segment(
    *,
    config: WindowConfig,
    segment: str,
    start: datetime,
    end: datetime,
    scores: FloatArray,
    labels: Int8Array,
    reference: Reference | None,
    computed_at: datetime,
    trailing: TrailingPool | None = None,
    overflow: SegmentsOverflow | None = None,
) -> tuple[WindowRecord, FloatArray, FloatArray]:
    """The record of one segment of a window, and its sorted positives and negatives (what
    ``window_scores`` stores of it).

    ``config``: the model's settings (the service builds it from the model's row);
    ``labels`` is -1 for predictions without a label (counted in ``unlabelled`` only);
    ``trailing``: the trailing windows its decision pools (None: the window alone);
    ``overflow``: the window's ``segments_overflow`` (``*`` only).
    """
    evaluation = evaluate_window(
        window_set(scores, labels, name=segment, score_kind=config.score_kind),
        None if reference is None else reference.data,
        config,
        pooled_set(trailing=trailing, reference=reference),
    )
    record = segment_record(
        evaluation,
        segment=segment,
        start=start,
        end=end,
        computed_at=computed_at,
        reference=reference,
        pooled=(1, start) if trailing is None else (trailing.windows + 1, trailing.start),
        compared=compared_reference(trailing=trailing, reference=reference),
        overflow=overflow,
    )
    prepared = evaluation.prepared
    return record, prepared.pos_sorted, prepared.neg_sorted


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
    (:func:`compared_reference`)."""
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
