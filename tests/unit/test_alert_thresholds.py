"""The alert rules' thresholds are the verdict module's (:mod:`calmon.verdict`): every number of
the expression of each verdict alert in ``deploy/prometheus/rules/calmon.yml``, in order, is the
constant the web view and the engine judge with, so a threshold changed on one side only fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from calmon.verdict import (
    CHECK_LEVEL,
    DROP_FRACTION,
    ONE_SIDED_99,
    PAGE_MATERIAL,
    PAGE_P,
    SHIFT_FACTOR,
    STALE_LENGTHS,
)

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules" / "calmon.yml"
#: a number of an expression: not part of a name (``pi0``), a duration (``30m``) or a longer number
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
#: the page's level as the rule writes it: three significant digits
PAGE_LEVEL = float(f"{PAGE_P:.3g}")
#: each verdict alert -> the numbers of its expression, in order
THRESHOLDS: dict[str, list[float]] = {
    "CalmonCalibratedMetricDrop": [DROP_FRACTION, ONE_SIDED_99, 0],
    "CalmonDecisionMetricDrop": [PAGE_LEVEL, -PAGE_MATERIAL, 1],
    "CalmonPriorShiftPooled": [SHIFT_FACTOR, SHIFT_FACTOR, 1, SHIFT_FACTOR, SHIFT_FACTOR],
    "CalmonPriorShift": [SHIFT_FACTOR, SHIFT_FACTOR],
    "CalmonPriorShiftEstimated": [SHIFT_FACTOR, SHIFT_FACTOR, CHECK_LEVEL],
    "CalmonScoresChangedUnexplained": [CHECK_LEVEL],
    "CalmonMetricsStale": [STALE_LENGTHS],
}


def alert_rules() -> dict[str, dict[str, Any]]:
    """The shipped alert rules by name."""
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {
        rule["alert"]: rule
        for group in document["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def mismatches(rules: dict[str, dict[str, Any]]) -> list[str]:
    """``alert: numbers [...] but the verdict module's [...]`` for each alert of
    :data:`THRESHOLDS` whose expression's numbers differ from the constants (or that is
    missing)."""
    out: list[str] = []
    for alert, expected in THRESHOLDS.items():
        rule = rules.get(alert)
        if rule is None:
            out.append(f"{alert}: missing")
            continue
        numbers = [float(n) for n in NUMBER.findall(rule["expr"])]
        if numbers != [float(n) for n in expected]:
            out.append(f"{alert}: numbers {numbers} but the verdict module's {expected}")
    return out


def test_each_verdict_alert_uses_the_verdict_modules_thresholds() -> None:
    assert mismatches(alert_rules()) == []


def test_a_threshold_changed_in_the_rules_alone_is_caught() -> None:
    rules = alert_rules()
    for alert, old, new in [
        ("CalmonCalibratedMetricDrop", "0.95 *", "0.9 *"),
        ("CalmonCalibratedMetricDrop", "0.0935 *", "0.1 *"),
        ("CalmonDecisionMetricDrop", "< 0.00135", "< 0.001"),
        ("CalmonDecisionMetricDrop", "-0.05 *", "-0.1 *"),
        ("CalmonPriorShift", "/ 1.5", "/ 2"),
        ("CalmonPriorShiftPooled", "1.5 *", "2 *"),
        ("CalmonPriorShiftEstimated", ">= 0.01", ">= 0.05"),
        ("CalmonScoresChangedUnexplained", "< 0.01", "< 0.05"),
        ("CalmonMetricsStale", "3 *", "2 *"),
    ]:
        rule = rules[alert]
        assert old in rule["expr"], (alert, old)
        changed = {**rules, alert: {**rule, "expr": rule["expr"].replace(old, new, 1)}}
        assert [m.split(":")[0] for m in mismatches(changed)] == [alert], (alert, old)


def test_the_number_pattern_skips_names_and_durations() -> None:
    expr = 'calmon_x{pi0="reference"} offset 30m > 1.5 * y - 0.0935 * (z) < -0.05'
    assert NUMBER.findall(expr) == ["1.5", "0.0935", "-0.05"]
