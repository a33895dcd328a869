"""CalmonDecisionMetricDrop on decisions that calmon itself computes, at 20 positives a window:
quiet under pure prior shifts, firing on real likelihood drops.

Each model has a fixed reference of a day of hourly windows at π = 0.005 (24 x 4,000
predictions, about 480 positives) and a latest window of 4,000 predictions (about 20
positives: too few for its own AP split's intervals) whose decision pools the 7 windows before
it (about 160 positives). Scores are Beta-distributed per class with parameters drawn per model,
rounded to 4 decimals. In the "shift" models only the class ratio moves (times 1/3 or 3, same
P(score | y), in all 8 windows); in the "drop" models the ratio stays and the positives' scores
fall in all 8. The records come from the scheduler's own code
(:func:`calmon.services.windows.record.evaluate_segment` with the pooled windows as
:class:`calmon.services.windows.record.TrailingPool`), their series from the exporter's, and
promtool evaluates the real rule on them, counting the firing alerts through ``ALERTS``. One
decision per model: a week of hourly decisions is the study's (``docs/measurements/decisions.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calmon.db.models import Model
from calmon.exporter.snapshot import LatestWindow
from calmon.services.windows.compute import window_config
from calmon.services.windows.record import TrailingPool, evaluate_segment
from harness.promql import selectors
from tests.integration.deploy.test_calibrated_drop_alert import (
    HOUR,
    REFERENCE_START,
    THRESHOLD,
    WINDOW_START,
    _input_series,
    _reference,
    run_rule_tests,
)
from tests.integration.deploy.test_prometheus_rules import RULES, _rules

pytestmark = pytest.mark.slow

ALERT = "CalmonDecisionMetricDrop"
SIZE = 4_000
REFERENCE_PRIOR = 0.005
POOLED = 7
SHIFT_MODELS = 80
DROP_MODELS = 20
MAX_FALSE_ALARMS = 0.025
MIN_DETECTED = 0.9


def _draw(
    rng: np.random.Generator,
    size: int,
    prior: float,
    negatives: tuple[float, float],
    positives: tuple[float, float],
) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.int8]]]:
    labels = (rng.random(size) < prior).astype(np.int8)
    scores = np.where(labels == 1, rng.beta(*positives, size), rng.beta(*negatives, size))
    return np.round(scores, 4).astype(np.float64), labels


def _latest_window(name: str, seed: int, *, factor: float, drop: float) -> LatestWindow:
    rng = np.random.default_rng(seed)
    negatives = (rng.uniform(1.0, 1.5), rng.uniform(5.0, 8.0))
    positives = (rng.uniform(3.0, 6.0), rng.uniform(1.5, 3.0))
    reference = _reference(*_draw(rng, 24 * SIZE, REFERENCE_PRIOR, negatives, positives))
    shifted = (positives[0] * (1 - drop), positives[1] * (1 + drop))
    prior = REFERENCE_PRIOR * factor
    pooled = [_draw(rng, SIZE, prior, negatives, shifted) for _ in range(POOLED)]
    scores, labels = _draw(rng, SIZE, prior, negatives, shifted)
    trailing = TrailingPool(
        start=WINDOW_START - POOLED * HOUR,
        windows=POOLED,
        positives=[np.sort(s[y == 1]) for s, y in pooled],
        negatives=[np.sort(s[y == 0]) for s, y in pooled],
        reference=None,
        reference_kind="fixed",
    )
    model = Model(name=name, score_kind="probability", threshold=THRESHOLD, pi0=[])
    record, _, _ = evaluate_segment(
        config=window_config(model),
        segment="*",
        start=WINDOW_START,
        end=WINDOW_START + HOUR,
        scores=scores,
        labels=labels,
        reference=reference,
        computed_at=WINDOW_START + HOUR,
        trailing=trailing,
    )
    assert record["split"] is not None
    assert record["split"]["average_precision"]["likelihood_interval"] is None
    assert record["decision"] is not None
    assert record["decision"]["windows"] == POOLED + 1
    return LatestWindow(
        model=name,
        segment="*",
        start=WINDOW_START,
        end=WINDOW_START + HOUR,
        computed_at=WINDOW_START + HOUR,
        record=record,
    )


def _count_check(prefix: str, comparison: str) -> dict[str, Any]:
    firing = f'ALERTS{{alertname="{ALERT}",alertstate="firing",model=~"{prefix}-.*"}}'
    return {
        "expr": f"(count({firing}) or vector(0)) {comparison}",
        "eval_time": "3m",
        "exp_samples": [{"labels": "{}", "value": 1}],
    }


def test_decision_alert_ignores_prior_shifts_and_fires_on_likelihood_drops(
    promtool: str, tmp_path: Path
) -> None:
    [rule] = [rule for rule in _rules() if rule.get("alert") == ALERT]
    names = {selector.name for selector in selectors(rule["expr"]) if selector.name}
    windows = [
        _latest_window(f"shift-{i}", i, factor=3.0 if i % 2 else 1 / 3, drop=0.0)
        for i in range(SHIFT_MODELS)
    ] + [_latest_window(f"drop-{i}", 10_000 + i, factor=1.0, drop=0.4) for i in range(DROP_MODELS)]
    assert REFERENCE_START < WINDOW_START
    series = _input_series(windows, names)
    # every series the rule reads, but the window's own AP part bound: at 20 positives a
    # window has none, which is what lets the pooled alert speak (its `unless`)
    own = "calmon_average_precision_change_upper"
    assert own in names
    assert {s["series"].split("{")[0] for s in series} == names - {own}
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "name": "prior shifts stay quiet, likelihood drops page, at 20 positives",
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    _count_check("shift", f"<= bool {int(MAX_FALSE_ALARMS * SHIFT_MODELS)}"),
                    _count_check("drop", f">= bool {int(np.ceil(MIN_DETECTED * DROP_MODELS))}"),
                ],
            }
        ],
    }
    run_rule_tests(promtool, tmp_path / "decision_test.yml", tests)
