"""A real Prometheus runs the repository's config and rules against a contract-shaped exporter.

The config is copied with only each job's DNS discovery replaced by a static target, no
Alertmanager, and the intervals shortened to one second (``harness.stack.prometheus_config``);
both jobs scrape the same exporter, as with `calmon serve`. The exporter serves fixed series of
two models: "drift" (calibrated AP far below its reference) and "shift" (more positives, the
calibrated AP at its reference). Checks: both targets up, every rule evaluates without error,
the drop alert is active for "drift" only, the prior-shift alert for "shift" only, once each.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.contract import SERIES
from harness.processes import free_port, wait_for
from harness.stack import (
    localised,
    prometheus_config,
    running_prometheus,
    wait_for_rule_evaluations,
)
from tests.integration.deploy.tools import DEPLOY
from tests.support.servers import QuietHandler, http_server

W = {"segment": "*"}
#: (series name, labels, value) served by the fake exporter
SAMPLES: list[tuple[str, dict[str, str], float]] = [
    *[
        (name, {"model": model, **W, **labels}, value)
        for model, observed, calibrated, upper, change_lower, change_upper in (
            ("drift", 0.60, 0.61, 0.65, -0.25, -0.13),
            ("shift", 0.35, 0.79, 0.83, -0.05, 0.03),
        )
        for name, labels, value in (
            ("calmon_average_precision", {"pi0": "observed"}, observed),
            ("calmon_average_precision", {"pi0": "reference"}, calibrated),
            ("calmon_average_precision", {"pi0": "0.5"}, calibrated + 0.05),
            ("calmon_average_precision_upper", {"pi0": "reference"}, upper),
            ("calmon_average_precision_reference", {}, 0.80),
            ("calmon_average_precision_change", {"component": "total"}, observed - 0.80),
            (
                "calmon_average_precision_change",
                {"component": "prior"},
                observed - calibrated,
            ),
            (
                "calmon_average_precision_change",
                {"component": "likelihood"},
                calibrated - 0.80,
            ),
            (
                "calmon_average_precision_change_lower",
                {"component": "likelihood"},
                change_lower,
            ),
            (
                "calmon_average_precision_change_upper",
                {"component": "likelihood"},
                change_upper,
            ),
        )
    ],
    *[
        (name, {"model": model, **W}, value)
        for model, ratio, lower, upper in (
            ("drift", 0.021, 0.019, 0.023),
            ("shift", 0.05, 0.046, 0.054),
        )
        for name, value in (
            ("calmon_positive_class_ratio", ratio),
            ("calmon_positive_class_ratio_lower", lower),
            ("calmon_positive_class_ratio_upper", upper),
            ("calmon_reference_positive_class_ratio", 0.02),
        )
    ],
    ("calmon_scheduler_leader", {}, 1.0),
    ("calmon_build_info", {"version": "0.1.0"}, 1.0),
]


def _exposition() -> bytes:
    lines: list[str] = []
    for name in dict.fromkeys(name for name, _, _ in SAMPLES):
        lines.append(f"# TYPE {name} gauge")
        for sample_name, labels, value in SAMPLES:
            if sample_name == name:
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"{name}{{{text}}} {value!r}")
    now = time.time()
    for model in ("drift", "shift"):
        lines.append(
            f'calmon_window_computed_timestamp_seconds{{model="{model}",segment="*"}} {now}'
        )
    return ("\n".join(lines) + "\n").encode()


class _Exporter(QuietHandler):
    def do_GET(self) -> None:
        body = _exposition()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def exporter() -> Iterator[str]:
    with http_server(_Exporter) as port:
        yield f"127.0.0.1:{port}"


def _get(base: str, path: str) -> Any:
    with urllib.request.urlopen(f"{base}{path}", timeout=5) as response:
        return json.loads(response.read())["data"]


def _wait(what: str, check: Callable[[], Any]) -> Any:
    return wait_for(what, check, timeout=45.0, interval=0.5, errors=(OSError,))


@pytest.fixture
def prometheus(prometheus_binary: str, exporter: str, tmp_path: Path) -> Iterator[str]:
    config_path = prometheus_config(
        tmp_path / "prometheus", {"calmon-api": [exporter], "calmon-scheduler": [exporter]}
    )
    port = free_port()
    with running_prometheus(prometheus_binary, config_path, port=port, directory=tmp_path):
        yield f"http://127.0.0.1:{port}"


def test_the_local_copy_changes_only_discovery_and_intervals() -> None:
    production = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    local = localised(production, {"calmon-api": ["a:1"], "calmon-scheduler": ["b:2"]})
    jobs = {job["job_name"]: job for job in local["scrape_configs"]}
    assert jobs["calmon-api"]["static_configs"] == [{"targets": ["a:1"]}]
    assert jobs["calmon-scheduler"]["static_configs"] == [{"targets": ["b:2"]}]
    for job, original in zip(local["scrape_configs"], production["scrape_configs"], strict=True):
        assert "dns_sd_configs" not in job
        rest = {k: v for k, v in job.items() if k != "static_configs"}
        assert rest == {k: v for k, v in original.items() if k != "dns_sd_configs"}
    assert {k: v for k, v in local.items() if k not in {"global", "scrape_configs"}} == {
        k: v for k, v in production.items() if k not in {"global", "scrape_configs"}
    }
    assert set(local["global"]) == set(production["global"])
    assert "dns_sd_configs" in production["scrape_configs"][0]
    with pytest.raises(AssertionError):
        localised(production, {"calmon-api": ["a:1"]})


def test_served_series_are_contract_series() -> None:
    assert {name for name, _, _ in SAMPLES} <= set(SERIES)
    for name, labels, _ in SAMPLES:
        assert set(labels) <= SERIES[name], name


def test_config_and_rules_run_in_a_real_prometheus(prometheus: str) -> None:
    def targets_up() -> bool:
        active = _get(prometheus, "/api/v1/targets")["activeTargets"]
        jobs = {t["labels"]["job"] for t in active if t["health"] == "up"}
        return jobs == {"calmon-api", "calmon-scheduler"}

    _wait("both jobs to scrape the exporter", targets_up)

    def rules_evaluated() -> list[dict[str, Any]]:
        groups = _get(prometheus, "/api/v1/rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        fresh = all(rule["lastEvaluation"] > "2000" for rule in rules)
        return rules if fresh and targets_up() else []

    wait_for_rule_evaluations(prometheus, 1)  # one after the first scrapes
    rules = _wait("every rule to be evaluated after the first scrapes", rules_evaluated)
    assert {rule["name"] for rule in rules} >= {
        "CalmonCalibratedMetricDrop",
        "CalmonPriorShift",
        "CalmonMetricsStale",
        "CalmonIngestRejections",
        "CalmonSchedulerDown",
    }
    assert [(r["name"], r["lastError"]) for r in rules if r["health"] != "ok"] == []

    def active_alerts() -> list[tuple[str, str]]:
        alerts = _get(prometheus, "/api/v1/alerts")["alerts"]
        return sorted((a["labels"]["alertname"], a["labels"].get("model", "")) for a in alerts)

    expected = [("CalmonCalibratedMetricDrop", "drift"), ("CalmonPriorShift", "shift")]
    _wait("the drop and prior-shift alerts", lambda: active_alerts() == expected)
    wait_for_rule_evaluations(prometheus, 3)
    assert active_alerts() == expected
