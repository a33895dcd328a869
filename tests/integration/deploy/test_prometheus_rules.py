"""deploy/prometheus and deploy/alertmanager: promtool/amtool checks, rule unit tests, contract."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.instruments import NOT_CLIENT_ERRORS, REJECT_OTHER, REJECT_REASONS
from tests.integration.deploy.conftest import DEPLOY
from tests.integration.deploy.contract import contract_violations

PROMETHEUS = DEPLOY / "prometheus"
RULES = PROMETHEUS / "rules" / "calmon.yml"
REQUIRED_ALERTS = {
    "CalmonCalibratedMetricDrop",
    "CalmonPriorShift",
    "CalmonPriorShiftEstimated",
    "CalmonScoresChangedUnexplained",
    "CalmonDecisionMetricDrop",
    "CalmonPriorShiftPooled",
    "CalmonMetricsStale",
    "CalmonIngestRejections",
    "CalmonSchedulerDown",
    "CalmonSchedulerReplicaDown",
    "CalmonSchedulerLeaders",
    "CalmonWindowsBacklogGrowing",
    "CalmonMetricsSegmentsOmitted",
}
#: series Prometheus itself provides, allowed in rules beside the contract
PROMETHEUS_SERIES = {"up": frozenset[str]()}


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _load(RULES)["groups"] for rule in group["rules"]]


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", duration))


def test_promtool_check_config_and_rules(promtool: str) -> None:
    config = _run([promtool, "check", "config", "prometheus.yml"], PROMETHEUS)
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout + config.stderr
    rules = _run([promtool, "check", "rules", str(RULES)], PROMETHEUS)
    assert rules.returncode == 0, rules.stdout + rules.stderr


# slow: promtool's rule tests take seconds
@pytest.mark.slow
def test_promtool_rule_unit_tests(promtool: str) -> None:
    tests = sorted((PROMETHEUS / "tests").glob("*.yml"))
    assert tests
    result = _run([promtool, "test", "rules", *map(str, tests)], PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_cover_firing_and_quiet_cases_of_every_alert() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in (PROMETHEUS / "tests").glob("*.yml"):
        for case in _load(path)["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    assert firing >= alerts, f"no firing case for {sorted(alerts - firing)}"
    assert quiet >= alerts, f"no quiet case for {sorted(alerts - quiet)}"


def test_amtool_check_config(amtool: str) -> None:
    result = _run([amtool, "check-config", "alertmanager.yml"], DEPLOY / "alertmanager")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_estimated_shift_names_what_scores_cannot_see() -> None:
    """A fall of the label-free ratio may be positives scoring like negatives: the alert's
    texts must not present it as a settled class-ratio change."""
    rule = next(r for r in _rules() if r.get("alert") == "CalmonPriorShiftEstimated")
    description = " ".join(rule["annotations"]["description"].split())
    assert "positives scoring like negatives read as fewer positives" in description
    assert "positives scoring lower" in description
    assert "labels will tell" in rule["annotations"]["summary"]


def test_alerts_present_with_severity_and_short_enough_for() -> None:
    rules = {rule["alert"]: rule for rule in _rules() if "alert" in rule}
    assert set(rules) >= REQUIRED_ALERTS
    assert rules["CalmonCalibratedMetricDrop"]["labels"]["severity"] == "critical"
    assert rules["CalmonPriorShift"]["labels"]["severity"] == "info"
    assert rules["CalmonPriorShiftEstimated"]["labels"]["severity"] == "info"
    assert rules["CalmonScoresChangedUnexplained"]["labels"]["severity"] == "warning"
    assert rules["CalmonDecisionMetricDrop"]["labels"]["severity"] == "critical"
    assert rules["CalmonPriorShiftPooled"]["labels"]["severity"] == "info"
    model_alerts = (
        "CalmonCalibratedMetricDrop",
        "CalmonPriorShift",
        "CalmonPriorShiftEstimated",
        "CalmonDecisionMetricDrop",
        "CalmonPriorShiftPooled",
    )
    for name in model_alerts:
        assert 0 < _seconds(rules[name]["for"]) <= 120, name
    assert _seconds(rules["CalmonIngestRejections"]["for"]) == 15 * 60
    for rule in rules.values():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert {"summary", "description"} <= set(rule["annotations"])


def test_rules_only_use_contract_series() -> None:
    problems = [
        f"{rule.get('alert', rule.get('record'))}: {problem}"
        for rule in _rules()
        for problem in contract_violations(rule["expr"], PROMETHEUS_SERIES)
    ]
    assert problems == []


def test_contract_check_rejects_unknown_series_labels_and_values() -> None:
    assert contract_violations('max(calmon_average_precision{pi0="reference"})') == []
    assert contract_violations('calmon_average_precision{pi0="0.01"}') == []
    assert contract_violations("calmon_auc") == ["calmon_auc is not in the series contract"]
    assert contract_violations('calmon_roc_auc{pi0="reference"}') == [
        "calmon_roc_auc has no label 'pi0'"
    ]
    assert contract_violations('calmon_f1_change{component="drift"}') == [
        "calmon_f1_change: unknown component 'drift'"
    ]
    assert contract_violations('calmon_f1_change_upper{component="prior"}') == []
    assert contract_violations('calmon_f1_change_upper{component="total"}') == [
        "calmon_f1_change_upper only exists for component=prior and =likelihood"
    ]
    assert contract_violations('calmon_f1{pi0="calibrated"}') == [
        "calmon_f1: unknown pi0 'calibrated'"
    ]
    assert contract_violations('{__name__="calmon_f1"}') == [
        "selector without a metric name in '{__name__=\"calmon_f1\"}'"
    ]
    assert contract_violations("up") == ["up is not in the series contract"]
    assert contract_violations("calmon_best_f1_threshold_change") == [
        "calmon_best_f1_threshold_change is not in the series contract"
    ]


def test_config_jobs_discover_by_dns_and_alertmanager_uses_file_sd() -> None:
    """Scrape jobs resolve the compose services (every replica; the names and ports are checked
    against docker-compose.yml in test_container.py); the Alertmanager list is a target file."""
    config = _load(PROMETHEUS / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"calmon-api", "calmon-scheduler"}
    for job in jobs.values():
        assert "file_sd_configs" not in job
        assert "static_configs" not in job
        assert [sd["type"] for sd in job["dns_sd_configs"]] == ["A"]
    files = [
        PROMETHEUS / name
        for am in config["alerting"]["alertmanagers"]
        for sd in am["file_sd_configs"]
        for name in sd["files"]
    ]
    assert files
    for path in files:
        assert path.parent == PROMETHEUS / "targets"
        groups = _load(path)
        assert groups, path
        assert all(group["targets"] for group in groups), path
    assert sorted(p.name for p in (PROMETHEUS / "targets").iterdir()) == ["alertmanager.yml"]
    assert any(RULES.match(pattern) for pattern in config["rule_files"])
    evaluation = _seconds(config["global"]["evaluation_interval"])
    assert 0 < evaluation <= 60


def test_ingest_rejections_leave_out_exactly_the_reasons_that_are_no_client_fault() -> None:
    """The rule's excluded reasons are the service's NOT_CLIENT_ERRORS, and real reasons."""
    [rule] = [rule for rule in _rules() if rule.get("alert") == "CalmonIngestRejections"]
    excluded = set(re.findall(r'reason!~"([^"]*)"', rule["expr"]))
    assert excluded == {"|".join(sorted(NOT_CLIENT_ERRORS))}
    assert {*REJECT_REASONS.values(), REJECT_OTHER} >= NOT_CLIENT_ERRORS
    assert "calmon_ingest_rejected_total[" not in rule["expr"]
