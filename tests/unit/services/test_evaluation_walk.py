"""The walk from a window's rows to its record goes down to the metric engine once and comes
back once: while :func:`calmon.services.windows.record.evaluate_segment` runs, the service calls
the engine only to build its inputs (settings, what is pooled, the window's arrays) and to
evaluate them once (the pooled decision included), and no engine code calls back into the
service layer."""

from __future__ import annotations

import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

import numpy as np

from calmon.db.models import Model
from calmon.services.windows.compute import window_config
from calmon.services.windows.record import TrailingPool, evaluate_segment

START = datetime(2026, 11, 1, 8, tzinfo=UTC)


def _module(frame: FrameType | None) -> str:
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


def _walk() -> tuple[Counter[str], Counter[str]]:
    """(engine functions the services call, service functions the engine calls), counted
    over one evaluation of a window with trailing windows pooled."""
    rng = np.random.default_rng(3)
    labels = (rng.random(2000) < 0.1).astype(np.int8)
    scores = np.clip(rng.normal(0.3 + 0.3 * labels, 0.15), 0.0, 1.0)
    trailing = TrailingPool(
        start=START - timedelta(hours=2),
        windows=2,
        positives=[np.sort(scores[labels == 1])] * 2,
        negatives=[np.sort(scores[labels == 0])] * 2,
        reference=None,
        reference_kind="trailing",
    )
    model = Model(
        name="walk",
        score_kind="probability",
        window="1h",
        threshold=0.5,
        pi0=[0.1],
        reference_kind="trailing",
        objective={"target_precision": 0.5},
    )
    down: Counter[str] = Counter()
    up: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee, caller = _module(frame), _module(frame.f_back)
        if callee.startswith("calmon.metrics") and caller.startswith("calmon.services"):
            name = frame.f_code.co_name
            if name == "__init__":
                name = f"{type(frame.f_locals['self']).__name__}()"
            down[name] += 1
        if callee.startswith("calmon.services") and caller.startswith("calmon.metrics"):
            up[frame.f_code.co_name] += 1

    sys.setprofile(profile)
    try:
        record, _, _ = evaluate_segment(
            config=window_config(model),
            segment="*",
            start=START,
            end=START + timedelta(hours=1),
            scores=scores,
            labels=labels,
            reference=None,
            computed_at=START,
            trailing=trailing,
        )
    finally:
        sys.setprofile(None)
    decision = record.get("decision")
    assert decision is not None
    assert decision["windows"] == 3
    return down, up


def test_the_service_calls_the_engine_once_to_evaluate_and_is_never_called_back() -> None:
    down, up = _walk()
    # the engine's inputs (its settings, what is pooled), then the window and its evaluation
    assert down == Counter(
        {"WindowConfig()": 1, "TrailingSet()": 1, "window_set": 1, "evaluate_window": 1}
    )
    assert up == Counter()
