"""deploy/prometheus alert rules and deploy/grafana dashboard:
promtool checks the rules and runs their unit tests; every metric they name is
one the mesh exports (or the blackbox exporter's probe_success)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import app.platform.metrics  # noqa: F401 - registers the metrics

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "agent-mesh.json"
EXTERNAL = {"probe_success"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing in CI (apt-get install prometheus; .ci/run does)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def test_promtool_checks_the_rules() -> None:
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_alert_unit_tests_pass() -> None:
    result = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True,
                            text=True, timeout=120, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def exported_names() -> set[str]:
    names: set[str] = set()
    for collector in REGISTRY.collect():
        for sample in collector.samples:
            names.add(sample.name)
        names.add(collector.name)
        if collector.type == "counter":  # a labelled counter has no samples yet
            names.add(collector.name + "_total")
    return names


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b((?:agent_mesh|probe)_[a-z0-9_]+)", expr))


def test_every_alert_is_tested_and_names_real_metrics() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = {t["alertname"] for group in tests for t in group.get("alert_rule_test", [])
              if t.get("exp_alerts")}
    exported = exported_names() | EXTERNAL
    for rule in rules:
        assert rule["alert"] in tested, f"{rule['alert']} has no firing unit test"
        unknown = {n for n in metric_names(rule["expr"]) if n not in exported
                   and re.sub(r"_(bucket|count|sum)$", "", n) not in exported}
        assert not unknown, f"{rule['alert']} names metrics nobody exports: {unknown}"


def test_dashboard_uses_a_datasource_variable_and_real_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    [var] = [v for v in dash["templating"]["list"] if v["type"] == "datasource"]
    assert var["query"] == "prometheus"
    exported = exported_names() | EXTERNAL
    seen: set[str] = set()
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${" + var["name"] + "}", panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            seen |= names
            assert all(n in exported or re.sub(r"_(bucket|count|sum)$", "", n) in exported
                       for n in names), target["expr"]
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    alerted = set().union(*(metric_names(r["expr"]) for r in rules))
    assert alerted <= seen, f"alerted on but not on the dashboard: {alerted - seen}"
