"""Every model-quality alert's description names what it compares against, read from the
exporter's ``calmon_reference_info`` (the window's reference) and
``calmon_decision_reference_info`` (the pooled decision's) ``against`` label
(docs/reference/references.md); without those series (an exporter from before them) it says "its
reference". promtool renders the real rules' annotations on hand-made series.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.deploy.test_calibrated_drop_alert import run_rule_tests
from tests.integration.deploy.test_prometheus_rules import RULES

SHIFT_TAIL = (
    " (docs/reference/references.md): the positive class ratio of the latest window is 20%,"
    " outside its reference band (moved by more than a factor 1.5 from the reference ratio,"
    " \u00d7/\u00f7 1.5, and its 95% Wilson interval excludes the reference). Regular precision,"
    " F1 and AP move with it; see the calibrated metrics and the prior/likelihood split before"
    " acting."
)


def _series(name: str, value: float, **labels: str) -> dict[str, str]:
    text = ",".join(f'{key}="{label}"' for key, label in labels.items())
    return {"series": f"{name}{{{text}}}", "values": f"{value}x20"}


def _shifted(model: str) -> list[dict[str, str]]:
    """A latest window whose class ratio went from 0.05 to 0.2 (CalmonPriorShift, up)."""
    where = {"model": model, "segment": "*"}
    return [
        _series("calmon_positive_class_ratio", 0.2, **where),
        _series("calmon_positive_class_ratio_lower", 0.15, **where),
        _series("calmon_positive_class_ratio_upper", 0.25, **where),
        _series("calmon_reference_positive_class_ratio", 0.05, **where),
    ]


def _alert(model: str, against: str) -> dict[str, Any]:
    return {
        "exp_labels": {"severity": "info", "model": model, "segment": "*", "direction": "up"},
        "exp_annotations": {
            "summary": f"{model} (*): positive class ratio went up",
            "description": f"Compared against {against}{SHIFT_TAIL}",
            "runbook_url": "/reference/deployment.md#calmonpriorshift",
            "dashboard_url": f"/d/calmon/?var-model={model}&var-segment=%2A",
            "model_url": f"/ui/models/{model}?segment=%2A",
        },
    }


def test_the_prior_shift_description_names_the_reference(promtool: str, tmp_path: Path) -> None:
    fixed = "the fixed reference 1\u20132 Nov 2026"
    series = [
        *_shifted("trailing"),
        _series(
            "calmon_reference_info",
            1,
            model="trailing",
            segment="*",
            kind="trailing",
            against="the previous 2 windows",
        ),
        *_shifted("fixed"),
        _series(
            "calmon_reference_info", 1, model="fixed", segment="*", kind="fixed", against=fixed
        ),
        *_shifted("old"),
    ]
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "name": "each description names its reference",
                "interval": "15s",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "2m",
                        "alertname": "CalmonPriorShift",
                        "exp_alerts": [
                            _alert("fixed", fixed),
                            _alert("old", "its reference"),
                            _alert("trailing", "the previous 2 windows"),
                        ],
                    }
                ],
            }
        ],
    }
    run_rule_tests(promtool, tmp_path / "references_test.yml", tests)


def test_the_decision_descriptions_read_the_decisions_reference() -> None:
    """The pooled alerts compare with the decision's reference, the others with the window's."""
    import yaml

    rules = {
        rule["alert"]: rule["annotations"]["description"]
        for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    pooled = {"CalmonDecisionMetricDrop", "CalmonPriorShiftPooled"}
    window = {
        "CalmonCalibratedMetricDrop",
        "CalmonPriorShift",
        "CalmonPriorShiftEstimated",
        "CalmonScoresChangedUnexplained",
    }
    for name in pooled:
        assert rules[name].startswith(
            'Compared against {{ with printf "calmon_decision_reference_info'
        )
    for name in window:
        assert rules[name].startswith('Compared against {{ with printf "calmon_reference_info')
