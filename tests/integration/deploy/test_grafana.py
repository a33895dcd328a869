"""deploy/grafana: the dashboard only queries contract series, is current, and is provisioned."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from harness.contract import contract_violations
from harness.promql import selectors
from tests.integration.deploy.tools import DEPLOY, REPO

GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "calmon.json"
LABEL_VALUES = re.compile(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)")


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def _panels() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for panel in _dashboard()["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def _exprs() -> list[str]:
    return [target["expr"] for panel in _panels() for target in panel.get("targets", [])]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_dashboard", GRAFANA / "generate_dashboard.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _series(expr: str) -> set[str]:
    return {s.name for s in selectors(expr) if s.name is not None}


def test_committed_dashboard_is_the_generator_output() -> None:
    assert _generator().render() == DASHBOARD.read_text(encoding="utf-8")


def test_every_query_uses_only_contract_series_and_labels() -> None:
    exprs = _exprs()
    assert len(exprs) > 30
    problems = [problem for expr in exprs for problem in contract_violations(expr)]
    assert problems == []


def test_every_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    """promtool parses each query once Grafana's variables are substituted."""
    substitutes = {"$model": "fraud", "$segment": "*", "$__rate_interval": "1m"}
    rules = []
    for index, expr in enumerate(_exprs()):
        for variable, value in substitutes.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        rules.append({"record": f"dashboard:query_{index}", "expr": expr})
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_template_variables_model_and_segment() -> None:
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert set(variables) == {"model", "segment"}
    for name, variable in variables.items():
        match = LABEL_VALUES.fullmatch(variable["query"]["query"])
        assert match is not None, variable["query"]
        assert match["label"] == name
        assert contract_violations(match["selector"]) == []
    assert "$model" in variables["segment"]["query"]["query"]
    assert variables["segment"]["current"]["value"] == "*"
    for expr in _exprs():
        for selector in selectors(expr):
            labels = {m.label: m.value for m in selector.matchers}
            if selector.name is not None and "model" in labels:
                assert labels["model"] == "$model", expr
            if "segment" in labels:
                assert labels["segment"] == "$segment", expr


def test_required_panels_are_there() -> None:
    used: dict[str, set[str]] = {}
    for panel in _panels():
        for target in panel.get("targets", []):
            used.setdefault(panel["title"], set()).update(_series(target["expr"]))
    all_series = set().union(*used.values())

    def panel_with(*names: str) -> str:
        matching = [title for title, series in used.items() if set(names) <= series]
        assert matching, f"no panel shows {names} together"
        return matching[0]

    panel_with(
        "calmon_positive_class_ratio",
        "calmon_positive_class_ratio_lower",
        "calmon_positive_class_ratio_upper",
        "calmon_reference_positive_class_ratio",
    )
    for metric in ("average_precision", "f1"):
        panel_with(
            f"calmon_{metric}",
            f"calmon_{metric}_lower",
            f"calmon_{metric}_upper",
            f"calmon_{metric}_reference",
        )
        panel_with(
            f"calmon_{metric}_change",
            f"calmon_{metric}_change_lower",
            f"calmon_{metric}_change_upper",
        )
    panel_with(
        "calmon_estimated_positive_class_ratio",
        "calmon_estimated_positive_class_ratio_lower",
        "calmon_estimated_positive_class_ratio_upper",
        "calmon_positive_class_ratio",
    )
    for metric in ("precision", "f1", "average_precision"):
        panel_with(f"calmon_estimated_{metric}", f"calmon_{metric}")
    panel_with("calmon_roc_auc", "calmon_ks")
    panel_with("calmon_brier", "calmon_ece")
    panel_with("calmon_window_predictions", "calmon_window_positives")
    panel_with("calmon_window_unlabelled", "calmon_window_predictions")
    panel_with("calmon_window_computed_timestamp_seconds", "calmon_window_end_timestamp_seconds")
    assert "calmon_predictions_ingested_total" in all_series


def test_calibrated_and_regular_variants_are_both_drawn() -> None:
    for metric in ("average_precision", "f1"):
        exprs = [e for e in _exprs() if f"calmon_{metric}{{" in e]
        grouped = [e for e in exprs if "by (pi0)" in e]
        assert grouped, f"no query shows every pi0 variant of {metric}"
        for pi0 in ("observed", "reference"):
            for bound in ("lower", "upper"):
                assert any(
                    f"calmon_{metric}_{bound}{{" in e and f'pi0="{pi0}"' in e for e in _exprs()
                ), (metric, pi0, bound)


def test_panels_use_the_provisioned_datasource() -> None:
    provisioned = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"]
    assert [(d["uid"], d["type"], d["url"]) for d in provisioned] == [
        ("prometheus", "prometheus", "http://prometheus:9090")
    ]
    for panel in _panels():
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "prometheus"


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in _dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]
    ids = [panel["id"] for panel in _panels()]
    assert len(ids) == len(set(ids))


def test_dashboard_provider_path_is_where_compose_mounts_the_dashboards() -> None:
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "calmon.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    mounts = dict(volume.split(":")[:2] for volume in compose["services"]["grafana"]["volumes"])
    assert mounts["./deploy/grafana/dashboards"] == path
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    env = compose["services"]["grafana"]["environment"]
    assert env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == f"{path}/{DASHBOARD.name}"
