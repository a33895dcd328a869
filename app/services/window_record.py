"""The stored record of a window and segment (the JSON of ``window_results.record``), its
bootstrap seed, and the summary of what one computation stored.

The record's fields and when each is null: ``docs/scheduler.md`` ("The record").
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from app.arrays import FloatArray
from app.db.models import Model
from app.metrics.prepared import pi0_key
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


def segment_seed(segment: str, data: Sequence[FloatArray]) -> int:
    """The bootstrap seed of a window's segment: a stable hash (not Python's salted ``hash``)
    of the segment's name and the window's data (``data``: its sorted score arrays, which
    stand for the data's version: the labelled classes and every score for the bootstrap of
    the measured metrics, every score alone for the label-free estimate, which labels landing
    later must not move).

    A recomputation of the same data, in any process, gives the same intervals, and changed
    data new draws. The window's start and the model's name are left out on purpose: a stream
    sent again at another time or to another model (``calmon simulate --seed``, whose windows
    end at the present and which picks a fresh model name) holds the same data and must show
    the same intervals.
    """
    digest = hashlib.blake2b(segment.encode(), digest_size=8)
    for array in data:
        digest.update(array.size.to_bytes(8, "little"))
        digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    return int.from_bytes(digest.digest(), "little") >> 1


def keyed(values: dict[str, Any], model: Model, reference_key: str | None) -> dict[str, Any]:
    """Calibrated values (or intervals) keyed "reference" and pi0_key(π0) per configured π0."""
    out: dict[str, Any] = {"reference": None if reference_key is None else values[reference_key]}
    for p in model.pi0:
        out[pi0_key(p)] = values[pi0_key(p)]
    return out


def segment_record(
    *,
    model: Model,
    segment: str,
    start: datetime,
    end: datetime,
    computed_at: datetime,
    result: dict[str, Any],
    intervals: dict[str, Any],
    reference_key: str | None,
    prior_interval: Any,
    unlabelled: int,
    split: dict[str, Any] | None,
    reference: Reference | None,
    estimated: dict[str, Any] | None,
    advice: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON-safe record of one segment of a window from its evaluation (``result``,
    ``intervals``: calibrated values keyed by repr(π0), the reference prior's under
    ``reference_key``); ``segments_overflow`` is None (the caller sets it on ``*``)."""
    record: dict[str, Any] = {
        "start": iso(start),
        "end": iso(end),
        "segment": segment,
        "computed_at": iso(computed_at),
        "n": result["n"],
        "n_pos": result["n_pos"],
        "unlabelled": unlabelled,
        "prior": result["prior"],
        "prior_interval": prior_interval,
        "regular": result["regular"],
        "calibrated": keyed(result["calibrated"], model, reference_key),
        "intervals": {
            "regular": intervals["regular"],
            "calibrated": keyed(intervals["calibrated"], model, reference_key),
        },
        "split": split,
        "reference": reference.summary() if reference is not None else None,
        "estimated": estimated,
        "advice": advice,
    }
    if "reliability" in result:
        record["reliability"] = result["reliability"]
    record["segments_overflow"] = None
    out: dict[str, Any] = clean(record)
    return out
