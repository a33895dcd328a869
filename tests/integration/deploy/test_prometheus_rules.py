"""deploy/prometheus and deploy/alertmanager: promtool/amtool checks, rule unit tests, contract."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from calmon.instruments import NOT_CLIENT_ERRORS, REJECT_OTHER, REJECT_REASONS
from harness.contract import contract_violations
from tests.integration.deploy.tools import DEPLOY
from tests.support.docs import DOCS, anchors

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
    assert '"up" means more positives, or negatives scoring like positives' in description
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


#: a literal number of PromQL (not part of a name, a duration or a label value)
_NUMBER = r"-?\d+(?:\.\d+)?"
_DIRECTION = {
    "<": r"(?:below|under|less than|<)",
    ">": r"(?:above|over|more than|>)",
    ">=": r"(?:at least|≥|>=)",
}
_WORDS = {1: "one", 2: "two", 3: "three"}
#: comparisons with 0 or 1 are structural (any, none, more than one window), not thresholds
_STRUCTURAL = {0.0, 1.0}


def _thresholds(expr: str) -> list[tuple[str, str, float]]:
    """The thresholds of a rule's expression as (comparison, kind, constant): kind "value"
    (``x < c``), "factor" (``x < c * y``), "divisor" (``x < y / c``) or "bound" (the one-sided
    99% margin ``upper + c * (upper - lower)``)."""
    found: list[tuple[str, str, float]] = []
    on = r"(?:on\s*\([^)]*\)\s*)?"
    for op, value, times in re.findall(rf"(>=|<=|==|<|>)\s*{on}({_NUMBER})(\s*\*)?", expr):
        found.append((op, "factor" if times else "value", float(value)))
    series = r"max by \([^)]*\) \([^)]*\)"
    for op, value in re.findall(rf"(<|>)\s*{on}{series}\s*/\s*({_NUMBER})", expr):
        found.append((op, "divisor", float(value)))
    for value in re.findall(rf"\+\s*({_NUMBER})\s*\*", expr):
        found.append(("<", "bound", float(value)))
    return found


def _numbers(expr: str) -> list[float]:
    """Every literal number of an expression, outside label values, ranges and offsets."""
    bare = re.sub(r'"[^"]*"|\[[^\]]*\]|offset \w+', " ", expr)
    return [float(n) for n in re.findall(rf"(?<![\w.]){_NUMBER}(?![\w.])", bare)]


def _percent(fraction: float) -> str:
    return f"{round(fraction * 100, 6):g}%"


def _statements(op: str, kind: str, constant: float) -> list[str]:
    """Patterns, one of which a description must match to state this threshold with its
    direction and sign."""
    number = re.escape(f"{constant:g}") if abs(constant) >= 1e-3 else re.escape(f"{constant}")
    word = _DIRECTION.get(op, "")
    if kind == "bound":
        return [r"one-sided 99%"]
    if kind == "divisor":
        return [rf"÷ {number}\b"]
    if kind == "value":
        return [rf"\b{word} {number}(?![\d.])", rf"\b{word} {re.escape(_percent(constant))}"]
    if constant < 0:  # x < -c * y: a fall of more than c
        fall = re.escape(_percent(-constant))
        return [rf"\bfall\b[^.]*\bmore than {fall}", rf"\bbelow [-\u2212]{fall}"]
    if op == "<" and constant < 1:  # x < c * y: more than 1 - c below y
        return [rf"\bmore than {re.escape(_percent(1 - constant))} below"]
    spoken = "|".join(filter(None, [number, _WORDS.get(int(constant), "")]))
    return [rf"\b{word} (?:a factor )?(?:{spoken})\b"]


def _prose(text: str) -> str:
    """An annotation without its template actions (queries and values), on one line."""
    return " ".join(re.sub(r"\{\{.*?\}\}", "{}", text, flags=re.S).split())


def description_problems(rule: dict[str, Any]) -> list[str]:
    """Thresholds of the rule's expression that its summary and description do not state with
    their direction and sign, numbers of the expression the parse does not account for, and a
    "for N minutes" that is not the rule's ``for``."""
    expr, annotations = rule["expr"], rule["annotations"]
    text = _prose(annotations["summary"] + " " + annotations["description"])
    thresholds = _thresholds(expr)
    problems = [
        f"{rule['alert']}: the description does not state {op} {kind} {constant:g}"
        for op, kind, constant in thresholds
        if constant not in _STRUCTURAL or kind != "value"
        if not any(re.search(p, text) for p in _statements(op, kind, constant))
    ]
    parsed = {constant for _, _, constant in thresholds} | _STRUCTURAL
    problems += [
        f"{rule['alert']}: {n:g} is no threshold the test can read"
        for n in _numbers(expr)
        if n not in parsed
    ]
    for minutes in re.findall(r"\bfor (\d+) minutes\b", text, flags=re.I):
        if int(minutes) * 60 != _seconds(rule["for"]):
            problems.append(f"{rule['alert']}: 'for {minutes} minutes' but for: {rule['for']}")
    return problems


def test_descriptions_state_the_thresholds_of_their_expressions_with_their_signs() -> None:
    assert [p for rule in _rules() if "alert" in rule for p in description_problems(rule)] == []


def test_the_description_check_catches_a_sign_or_a_number_that_disagrees() -> None:
    """The drop alert's former text said "below 5% of the reference AP" for a rule that pages
    below -5% of it (a fall of more than 5%): the check must reject it, and other slips."""
    rule = next(r for r in _rules() if r.get("alert") == "CalmonDecisionMetricDrop")
    former = dict(rule["annotations"])
    former["description"] = (
        "The positives score lower than the reference's positives (p = {{ $value }} below "
        "0.00135), and the likelihood part of the AP change is below 5% of the reference AP."
    )
    assert description_problems({**rule, "annotations": former}) == [
        "CalmonDecisionMetricDrop: the description does not state < factor -0.05"
    ]
    assert description_problems(rule) == []
    wrong_level = {**rule, "expr": rule["expr"].replace("0.00135", "0.001")}
    assert description_problems(wrong_level) == [
        "CalmonDecisionMetricDrop: the description does not state < value 0.001"
    ]
    calibrated = next(r for r in _rules() if r.get("alert") == "CalmonCalibratedMetricDrop")
    lower = {**calibrated, "expr": calibrated["expr"].replace("0.95 *", "0.9 *")}
    assert description_problems(lower) == [
        "CalmonCalibratedMetricDrop: the description does not state < factor 0.9"
    ]
    rejections = next(r for r in _rules() if r.get("alert") == "CalmonIngestRejections")
    assert description_problems({**rejections, "for": "10m"}) == [
        "CalmonIngestRejections: 'for 15 minutes' but for: 10m"
    ]


#: alerts about one model and segment: their links open that model's views
SEGMENT_ALERTS = {
    "CalmonCalibratedMetricDrop",
    "CalmonDecisionMetricDrop",
    "CalmonPriorShift",
    "CalmonPriorShiftEstimated",
    "CalmonPriorShiftPooled",
    "CalmonScoresChangedUnexplained",
}
#: alerts about one model (every segment)
MODEL_ALERTS = {"CalmonMetricsStale", "CalmonMetricsSegmentsOmitted"}


def test_every_alert_links_its_runbook_section_and_its_dashboard() -> None:
    """runbook_url is a section of docs/reference/deployment.md that exists; dashboard_url opens the
    Grafana dashboard by its uid, on the alert's model and segment where it has them; model_url
    the model's page of the web view; the base URLs are the external labels of prometheus.yml."""
    uid = json.loads((DEPLOY / "grafana" / "dashboards" / "calmon.json").read_text())["uid"]
    runbook = anchors((DOCS / "reference" / "deployment.md").read_text(encoding="utf-8"))
    external = _load(PROMETHEUS / "prometheus.yml")["global"]["external_labels"]
    for rule in (r for r in _rules() if "alert" in r):
        name, links = rule["alert"], rule["annotations"]
        docs = "{{ $externalLabels.calmon_docs_url }}/reference/deployment.md#"
        assert links["runbook_url"] == docs + name.lower(), name
        assert name.lower() in runbook, name
        grafana = "{{ $externalLabels.calmon_grafana_url }}" + f"/d/{uid}/"
        model = "?var-model={{ $labels.model | urlquery }}"
        segment = "&var-segment={{ $labels.segment | urlquery }}"
        page = "{{ $externalLabels.calmon_ui_url }}/ui/models/{{ $labels.model | urlquery }}"
        if name in SEGMENT_ALERTS:
            assert links["dashboard_url"] == grafana + model + segment, name
            assert links["model_url"] == page + "?segment={{ $labels.segment | urlquery }}", name
        elif name in MODEL_ALERTS:
            assert links["dashboard_url"] == grafana + model, name
            assert links["model_url"] == page, name
        else:
            assert links["dashboard_url"] == grafana, name
            assert "model_url" not in links, name
        used = set(re.findall(r"\$externalLabels\.(\w+)", " ".join(links.values())))
        assert used <= set(external), name
    assert set(external) == {"calmon_docs_url", "calmon_grafana_url", "calmon_ui_url"}


def test_the_rule_tests_render_the_links_with_the_shipped_external_labels() -> None:
    """The promtool tests' expected links are the ones prometheus.yml's defaults give."""
    external = _load(PROMETHEUS / "prometheus.yml")["global"]["external_labels"]
    for path in (PROMETHEUS / "tests").glob("*.yml"):
        for case in _load(path)["tests"]:
            assert case["external_labels"] == external, case["name"]
