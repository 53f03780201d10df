"""The chart's Prometheus rules file and the alerts it defines."""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent

RULES = HERE.parents[2] / "helm" / "hami" / "monitoring" / "hami-rules.yaml"


def alert_names() -> set[str]:
    return {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
