"""The Grafana dashboard (helm/hami/monitoring/hami-dashboard.json) as the tests read it: every
panel's queries, with the dashboard's variables replaced as Grafana would replace them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = (
    Path(__file__).resolve().parents[3] / "helm" / "hami" / "monitoring" / "hami-dashboard.json"
)


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str
    instant: bool

    def promql(
        self,
        rate_interval: str = "5m",
        node: str = ".*",
        namespace: str = ".*",
        device_type: str = ".*",
    ) -> str:
        """The query Grafana sends for these variable values (".*" is "All")."""
        return (
            self.expr.replace("$__rate_interval", rate_interval)
            .replace("$node", node)
            .replace("$namespace", namespace)
            .replace("$device_type", device_type)
        )


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel but the rows, including panels folded into a collapsed row."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def queries(dashboard: dict[str, Any]) -> list[Query]:
    return [
        Query(p["title"], t["refId"], t["expr"], bool(t.get("instant")))
        for p in panels(dashboard)
        for t in p["targets"]
    ]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bhami_[a-z_]+\b", expr))
