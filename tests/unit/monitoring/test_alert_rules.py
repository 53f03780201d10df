"""The alert rules (helm/hami/monitoring/hami-rules.yaml) through Prometheus' own promtool:
`check rules` (syntax, templates) and `test rules` (hami-rules.test.yaml beside this file: each
alert fires on the series that should raise it, after its `for`, and stays quiet otherwise).

promtool is the one tests/e2e/k8sbins/build.sh builds ($HAMI_PROMTOOL overrides it)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.e2e.cluster import built_tool
from tests.unit.monitoring.rules import HERE, RULES, alert_names

# helm (or promtool) is one of the binaries tests/e2e/k8sbins builds: the e2e tier's, so the
# fast tier never starts the Go build (tests/e2e/README.md).
pytestmark = pytest.mark.e2e

UNIT_TESTS = HERE / "hami-rules.test.yaml"


def promtool(*args: str) -> str:
    result = subprocess.run(
        [str(built_tool("promtool", "HAMI_PROMTOOL")), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_promtool_checks_the_rules() -> None:
    assert f"SUCCESS: {len(alert_names())} rules found" in promtool("check", "rules", str(RULES))


def test_every_alert_has_promtool_unit_tests() -> None:
    tested = {
        case["alertname"]
        for group in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in group["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert tested == alert_names()
    assert "SUCCESS" in promtool("test", "rules", str(UNIT_TESTS))
