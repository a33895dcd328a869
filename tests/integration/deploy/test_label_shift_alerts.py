"""CalmonScoresChangedUnexplained and CalmonPriorShiftEstimated on windows calmon computes.

Each model has a fixed labelled reference of 20,000 predictions at π = 0.05 and a latest
window of 20,000 predictions without labels. Scores are Beta-distributed per class with
parameters drawn per model, rounded to 3 decimals (ties). "shift" models: only the class ratio
moves (x1/3 or x3); "drift" models: the class ratio stays and the negatives' scores rise (a
covariate change inside a class); "labelled" models: a x3 shift whose window has its labels
(the measured ratio decides); "tiny": four unlabelled predictions. Records come from the
scheduler's own code (:func:`calmon.services.windows.record.evaluate_segment`) and series from
the exporter's (:func:`calmon.exporter.snapshot.build_snapshot`); promtool evaluates the real
rules and counts the firing alerts through ``ALERTS``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calmon.db.models import Model
from calmon.exporter.snapshot import LatestWindow
from calmon.metrics.label_free import CHECK_METHOD
from calmon.services.windows.compute import window_config
from calmon.services.windows.record import evaluate_segment
from harness.promql import selectors
from tests.integration.deploy.test_calibrated_drop_alert import (
    THRESHOLD,
    WINDOW_START,
    _input_series,
    _reference,
    run_rule_tests,
)
from tests.integration.deploy.test_prometheus_rules import RULES, _rules

pytestmark = pytest.mark.slow

CHANGED = "CalmonScoresChangedUnexplained"
ESTIMATED = "CalmonPriorShiftEstimated"
SIZE = 20_000
REFERENCE_PRIOR = 0.05
SHIFT_MODELS = 40
DRIFT_MODELS = 20
HOUR = timedelta(hours=1)

Scores = np.ndarray[Any, np.dtype[np.float64]]
Labels = np.ndarray[Any, np.dtype[np.int8]]


def _draw(
    rng: np.random.Generator,
    size: int,
    prior: float,
    negatives: tuple[float, float],
    positives: tuple[float, float],
) -> tuple[Scores, Labels]:
    labels = (rng.random(size) < prior).astype(np.int8)
    scores = np.where(labels == 1, rng.beta(*positives, size), rng.beta(*negatives, size))
    return np.round(scores, 3).astype(np.float64), labels


def _latest_window(
    name: str,
    seed: int,
    *,
    factor: float,
    drift: bool = False,
    size: int = SIZE,
    labelled: bool = False,
) -> LatestWindow:
    """The latest window of model ``name``: the prior times ``factor``; with ``drift`` the
    negatives' Beta(a, b) becomes Beta(1.4·a, b) (higher scores)."""
    rng = np.random.default_rng(seed)
    negatives = (rng.uniform(1.5, 3.0), rng.uniform(4.0, 8.0))
    positives = (rng.uniform(3.0, 6.0), rng.uniform(1.5, 3.0))
    reference = _reference(*_draw(rng, SIZE, REFERENCE_PRIOR, negatives, positives))
    window_negatives = (negatives[0] * 1.4, negatives[1]) if drift else negatives
    scores, labels = _draw(rng, size, REFERENCE_PRIOR * factor, window_negatives, positives)
    if not labelled:
        labels = np.full_like(labels, -1)
    record, _, _ = evaluate_segment(
        config=window_config(
            Model(name=name, score_kind="probability", threshold=THRESHOLD, pi0=[])
        ),
        segment="*",
        start=WINDOW_START,
        end=WINDOW_START + HOUR,
        scores=scores,
        labels=labels,
        reference=reference,
        computed_at=WINDOW_START + HOUR,
    )
    return LatestWindow(
        model=name,
        segment="*",
        start=WINDOW_START,
        end=WINDOW_START + HOUR,
        computed_at=WINDOW_START + HOUR,
        record=record,
    )


def _count_check(alert: str, models: str, comparison: str) -> dict[str, Any]:
    firing = f'ALERTS{{alertname="{alert}",alertstate="firing",model=~"{models}"}}'
    return {
        "expr": f"(count({firing}) or vector(0)) {comparison}",
        "eval_time": "3m",
        "exp_samples": [{"labels": "{}", "value": 1}],
    }


def test_scores_changed_fires_on_drift_and_the_estimated_shift_only_where_it_holds(
    promtool: str, tmp_path: Path
) -> None:
    rules = {rule["alert"]: rule for rule in _rules() if rule.get("alert") in {CHANGED, ESTIMATED}}
    names = {s.name for rule in rules.values() for s in selectors(rule["expr"]) if s.name}
    windows = (
        [
            _latest_window(f"shift-{i}", i, factor=3.0 if i % 2 else 1 / 3)
            for i in range(SHIFT_MODELS)
        ]
        + [
            _latest_window(f"drift-{i}", 10_000 + i, factor=1.0, drift=True)
            for i in range(DRIFT_MODELS)
        ]
        + [_latest_window("labelled-0", 20_000, factor=3.0, labelled=True)]
        + [_latest_window("tiny-0", 30_000, factor=1.0, size=4)]
    )
    records: dict[str, Any] = {w.model: w.record["estimated"] for w in windows}
    assert records["tiny-0"]["label_shift"] == {
        "p_value": None,
        "holds": None,
        "method": CHECK_METHOD,
    }
    assert records["tiny-0"]["verdict"] == "not_enough_data"
    lower, upper = records["tiny-0"]["positive_class_ratio_interval"]
    assert upper > lower
    shift_holds = sum(records[f"shift-{i}"]["label_shift"]["holds"] for i in range(SHIFT_MODELS))
    # at most 6% of pure shifts rejected, at least 90% of drifts
    assert shift_holds >= SHIFT_MODELS - int(0.06 * SHIFT_MODELS)
    drift_rejected = sum(
        records[f"drift-{i}"]["label_shift"]["holds"] is False for i in range(DRIFT_MODELS)
    )
    assert drift_rejected >= int(np.ceil(0.9 * DRIFT_MODELS))
    series = _input_series(windows, names)
    assert {s["series"].split("{")[0] for s in series} == names
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "name": "drifts warn, shifts inform, labels and tiny windows stay quiet",
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    _count_check(CHANGED, "shift-.*", f"== bool {SHIFT_MODELS - shift_holds}"),
                    _count_check(CHANGED, "drift-.*", f"== bool {drift_rejected}"),
                    _count_check(ESTIMATED, "shift-.*", f">= bool {int(0.9 * shift_holds)}"),
                    # never both for one window: the estimated shift needs the check to hold
                    _count_check(ESTIMATED, "drift-.*", f"<= bool {DRIFT_MODELS - drift_rejected}"),
                    _count_check(CHANGED, "labelled-.*|tiny-.*", "== bool 0"),
                    _count_check(ESTIMATED, "labelled-.*|tiny-.*", "== bool 0"),
                ],
            }
        ],
    }
    run_rule_tests(promtool, tmp_path / "label_shift_test.yml", tests)
