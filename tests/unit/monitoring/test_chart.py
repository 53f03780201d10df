"""The chart's opt-in monitoring objects, rendered by the real helm: the PrometheusRule carries
exactly the plain rules file, the dashboard ConfigMap exactly the dashboard, labelled for
Grafana's sidecar; the defaults render neither (test_helm_render's default rendering lists
every object)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.builders.chart import NAMESPACE, find, kinds, render
from tests.unit.monitoring.rules import RULES

from .dashboard import DASHBOARD

# helm (or promtool) is one of the binaries tests/e2e/k8sbins builds: the e2e tier's, so the
# fast tier never starts the Go build (tests/e2e/README.md).
pytestmark = pytest.mark.e2e


def test_neither_is_installed_unless_asked() -> None:
    names = {kind for kind, _ in kinds(render("metrics.serviceMonitor.enabled=true"))}
    assert "PrometheusRule" not in names
    assert ("ConfigMap", "hami-py-dashboard") not in kinds(render())


def test_prometheus_rule_is_the_rules_file() -> None:
    docs = render(
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.labels.release=kube-prometheus-stack",
    )
    rule = find(docs, "PrometheusRule", "hami-py-scheduler")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_dashboard_config_map_for_grafanas_sidecar() -> None:
    default = find(
        render("metrics.grafanaDashboard.enabled=true"), "ConfigMap", "hami-py-dashboard"
    )
    assert default["metadata"]["namespace"] == NAMESPACE
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "annotations" not in default["metadata"]
    assert json.loads(default["data"]["hami-py.json"]) == json.loads(DASHBOARD.read_text())

    moved = find(
        render(
            "metrics.grafanaDashboard.enabled=true",
            "metrics.grafanaDashboard.namespace=monitoring",
            "metrics.grafanaDashboard.annotations.grafana_folder=GPUs",
        ),
        "ConfigMap",
        "hami-py-dashboard",
    )
    assert moved["metadata"]["namespace"] == "monitoring"
    assert moved["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
