"""CalmonCalibratedMetricDrop on windows that calmon itself computes: quiet under pure prior
shifts, firing on real likelihood drops.

Each model has a fixed reference of one 20,000-prediction window at π = 0.01 (about 200
positives) and a latest window of 20,000 predictions. Scores are Beta-distributed per class
with parameters drawn per model (not binormal), rounded to 4 decimals (ties, as real scores
have). In the "shift" models only the class ratio moves (π times 3 or 5, same P(score | y)); in
the "drop" models the ratio moves the same way and the positives' scores also fall. The window
records come from the scheduler's own code (:func:`calmon.services.windows.record.evaluate_segment`:
metric engine, bootstrap intervals, likelihood split) and their series from the exporter's
(:func:`calmon.exporter.snapshot.build_snapshot`); promtool evaluates the real rule on them and
counts the firing alerts through ``ALERTS``.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from calmon.db.models import Model
from calmon.exporter.snapshot import LatestWindow, build_snapshot
from calmon.metrics.evaluation import evaluate_ranked, set_sums
from calmon.metrics.prepared import prepare
from calmon.metrics.window_evaluation import ReferenceSet
from calmon.services.windows.compute import window_config
from calmon.services.windows.record import evaluate_segment
from calmon.services.windows.reference_cache import Reference
from harness.promql import selectors
from tests.integration.deploy.test_prometheus_rules import RULES, _rules

pytestmark = pytest.mark.slow

ALERT = "CalmonCalibratedMetricDrop"
SIZE = 20_000
REFERENCE_PRIOR = 0.01
SHIFT_MODELS = 200
DROP_MODELS = 20
#: the alert may fire for at most this share of pure prior shifts
MAX_FALSE_ALARMS = 0.025
#: and must fire for at least this share of the real drops
MIN_DETECTED = 0.9
THRESHOLD = 0.5
REFERENCE_START = datetime(2024, 1, 1, tzinfo=UTC)
WINDOW_START = datetime(2024, 2, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _draw(
    rng: np.random.Generator,
    prior: float,
    negatives: tuple[float, float],
    positives: tuple[float, float],
) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.int8]]]:
    labels = (rng.random(SIZE) < prior).astype(np.int8)
    scores = np.where(labels == 1, rng.beta(*positives, SIZE), rng.beta(*negatives, SIZE))
    return np.round(scores, 4).astype(np.float64), labels


def _reference(scores: np.ndarray[Any, Any], labels: np.ndarray[Any, Any]) -> Reference:
    prepared = prepare(scores, labels, score_kind="probability")
    sums = set_sums(
        prepared.pos_sorted, prepared.neg_sorted, threshold=THRESHOLD, score_kind="probability"
    )
    evaluation = evaluate_ranked(
        prepared.ranking, sums, threshold=THRESHOLD, pi0=(), score_kind="probability"
    )
    return Reference(
        kind="fixed",
        start=REFERENCE_START,
        end=REFERENCE_START + HOUR,
        windows=None,
        data=ReferenceSet(
            ranking=prepared.ranking,
            sums=sums,
            evaluation=evaluation,
        ),
    )


def _latest_window(name: str, seed: int, *, factor: int, drop: float) -> LatestWindow:
    """The latest window of model ``name``: the prior times ``factor``; with ``drop`` > 0 the
    positives' Beta(a, b) becomes Beta(a·(1 - drop), b·(1 + drop)), lower scores."""
    rng = np.random.default_rng(seed)
    negatives = (rng.uniform(1.5, 3.0), rng.uniform(4.0, 8.0))
    positives = (rng.uniform(3.0, 6.0), rng.uniform(1.5, 3.0))
    reference = _reference(*_draw(rng, REFERENCE_PRIOR, negatives, positives))
    shifted = (positives[0] * (1 - drop), positives[1] * (1 + drop))
    scores, labels = _draw(rng, REFERENCE_PRIOR * factor, negatives, shifted)
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
    )
    return LatestWindow(
        model=name,
        segment="*",
        start=WINDOW_START,
        end=WINDOW_START + HOUR,
        computed_at=WINDOW_START + HOUR,
        record=record,
    )


def _input_series(windows: list[LatestWindow], names: set[str]) -> list[dict[str, str]]:
    """The exported samples of the series named ``names``, as constant promtool input series
    scraped by one target."""
    series = []
    for family in build_snapshot(windows).families:
        if family.name not in names:
            continue
        for sample in family.samples:
            labels = {**sample.labels, "job": "calmon-api", "instance": "api:8000"}
            text = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
            series.append({"series": f"{family.name}{{{text}}}", "values": f"{sample.value!r}x20"})
    return series


def run_rule_tests(promtool: str, path: Path, tests: dict[str, Any]) -> None:
    """Write promtool's unit-test file ``tests`` to ``path`` and assert that it passes."""
    path.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    result = subprocess.run(
        [promtool, "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _count_check(prefix: str, comparison: str) -> dict[str, Any]:
    firing = f'ALERTS{{alertname="{ALERT}",alertstate="firing",model=~"{prefix}-.*"}}'
    return {
        "expr": f"(count({firing}) or vector(0)) {comparison}",
        "eval_time": "3m",
        "exp_samples": [{"labels": "{}", "value": 1}],
    }


def test_drop_alert_ignores_prior_shifts_and_fires_on_likelihood_drops(
    promtool: str, tmp_path: Path
) -> None:
    [rule] = [rule for rule in _rules() if rule.get("alert") == ALERT]
    names = {selector.name for selector in selectors(rule["expr"]) if selector.name}
    windows = [
        _latest_window(f"shift-{i}", i, factor=3 if i % 2 else 5, drop=0.0)
        for i in range(SHIFT_MODELS)
    ] + [
        _latest_window(f"drop-{i}", 10_000 + i, factor=3 if i % 2 else 5, drop=0.3)
        for i in range(DROP_MODELS)
    ]
    series = _input_series(windows, names)
    assert {s["series"].split("{")[0] for s in series} == names
    max_false = int(MAX_FALSE_ALARMS * SHIFT_MODELS)
    min_detected = int(np.ceil(MIN_DETECTED * DROP_MODELS))
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "name": "prior shifts stay quiet, likelihood drops page",
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    _count_check("shift", f"<= bool {max_false}"),
                    _count_check("drop", f">= bool {min_detected}"),
                ],
            }
        ],
    }
    run_rule_tests(promtool, tmp_path / "drop_test.yml", tests)
