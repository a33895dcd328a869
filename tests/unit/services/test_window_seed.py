"""A window's bootstrap seed is a function of its segment and data: the same data gives
the same intervals wherever and whenever it is computed, so a recomputation, a stream sent
again with ``calmon simulate --seed`` and the documented answers agree."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import numpy as np

from calmon.db.models import Model
from calmon.metrics.window_evaluation import segment_seed
from calmon.records import WindowRecord
from calmon.services.windows.compute import window_config
from calmon.services.windows.record import evaluate_segment

START = datetime(2026, 11, 1, 8, tzinfo=UTC)


def _model(name: str = "fraud") -> Model:
    return Model(name=name, score_kind="probability", window="1h", threshold=0.5, pi0=[0.1])


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = (rng.random(3000) < 0.2).astype(np.int8)
    scores = np.clip(rng.normal(0.35 + 0.3 * labels, 0.15), 0.0, 1.0)
    labels[:200] = -1
    return scores, labels


def _record(model: Model, start: datetime, scores: np.ndarray, labels: np.ndarray) -> WindowRecord:
    record, _, _ = evaluate_segment(
        config=window_config(model),
        segment="*",
        start=start,
        end=start + timedelta(hours=1),
        scores=scores,
        labels=labels,
        reference=None,
        computed_at=start,
    )
    return record


def test_the_same_data_gives_the_same_intervals_at_another_start_and_order() -> None:
    scores, labels = _data(1)
    first = _record(_model(), START, scores, labels)
    order = np.random.default_rng(2).permutation(scores.size)
    later = _record(_model(), START + timedelta(days=3), scores[order], labels[order])
    assert first["intervals"]["regular"]["roc_auc"] is not None
    assert later["intervals"] == first["intervals"]


def test_the_same_data_gives_the_same_intervals_in_another_model() -> None:
    scores, labels = _data(1)
    first = _record(_model(), START, scores, labels)
    assert _record(_model("fraud-2"), START, scores, labels)["intervals"] == first["intervals"]


def test_other_data_or_another_segment_draw_anew() -> None:
    scores, labels = _data(1)
    data = (np.sort(scores[labels == 1]), np.sort(scores[labels == 0]))
    base = segment_seed("*", data)
    assert segment_seed("*", data) == base
    assert segment_seed("country=FR", data) != base
    assert segment_seed("*", (data[0], data[1][1:])) != base
    assert segment_seed("*", (data[0], data[1], np.array([0.5]))) != base
    other, other_labels = _data(3)
    first = _record(_model(), START, scores, labels)["intervals"]["regular"]["roc_auc"]
    second = _record(_model(), START, other, other_labels)["intervals"]["regular"]["roc_auc"]
    assert first != second


def test_the_seed_does_not_depend_on_the_process() -> None:
    """Python salts ``hash`` per process; the seed must not."""
    code = (
        "import numpy as np;"
        "from calmon.metrics.window_evaluation import segment_seed;"
        "print(segment_seed('*', (np.array([0.1, 0.5]), np.array([0.2]))))"
    )
    seeds = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    local = segment_seed("*", (np.array([0.1, 0.5]), np.array([0.2])))
    assert seeds == {f"{local}\n"}
