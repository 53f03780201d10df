"""The Grafana dashboard, checked without Grafana: against Grafana's own dashboard and panel
schemas (grafana-foundation-sdk, Grafana 11.6), for a data source chosen by variable only, and
for series that `hami serve` really exposes. tests/e2e/test_node_chart.py evaluates every query
against a live Prometheus."""

from __future__ import annotations

import json
import re
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.cog.runtime import Runtime
from grafana_foundation_sdk.models.dashboard import Dashboard
from prometheus_client.parser import text_string_to_metric_families

from hami.runtime.metrics import Metrics, Probes
from tests.draobjects import allocated_claim, gpu_device, mib, resource_slice
from tests.unit.runtime.scrapes import metrics_of_one_pod

from .dashboard import load, metric_names, panels, queries

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def lost(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """What the schema's decoding dropped or changed (it may add its defaults)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [
            problem
            for key, value in ours.items()
            for problem in (
                lost(value, theirs[key], f"{path}/{key}")
                if key in theirs
                else [f"{path}/{key}: not in Grafana's schema"]
            )
        ]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [
            p
            for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
            for p in lost(a, b, f"{path}[{i}]")
        ]
    return [] if ours == theirs else [f"{path}: {ours!r} read as {theirs!r}"]


def test_every_key_is_in_grafanas_dashboard_and_panel_schemas() -> None:
    register_default_plugins()
    raw = load()
    decoded = json.loads(JSONEncoder().encode(Dashboard.from_json(raw)))
    assert lost(raw, decoded) == []
    # Panel options and field config are decoded by their plugin's schema: only known plugins.
    known = Runtime().panelcfg_variants
    assert [p["type"] for p in panels(raw) if p["type"] not in known] == []


def test_the_schema_check_finds_what_grafana_would_ignore() -> None:
    register_default_plugins()
    raw = load()
    first = next(iter(panels(raw)))
    first["targets"][0]["exp"] = first["targets"][0].pop("expr")
    first["options"]["colourMode"] = "value"
    decoded = json.loads(JSONEncoder().encode(Dashboard.from_json(raw)))
    assert sorted(lost(raw, decoded)) == [
        "/panels[1]/options/colourMode: not in Grafana's schema",
        "/panels[1]/targets[0]/exp: not in Grafana's schema",
    ]


def test_no_panel_depends_on_a_data_source_uid() -> None:
    dashboard = load()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {variables["node"]["type"], variables["namespace"]["type"]} == {"query"}
    for v in (variables["node"], variables["namespace"]):
        assert v["datasource"] == DATASOURCE and v["includeAll"] and v["allValue"] == ".*"
    for panel in panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert [t["datasource"] for t in panel["targets"]] == [DATASOURCE] * len(panel["targets"])
    # No other uid anywhere: nothing ties the dashboard to one Grafana's data sources.
    text = json.dumps(dashboard)
    assert text.count('"uid"') == 1 + text.count('"uid": "${datasource}"')


def test_panels_have_unique_titles_and_say_what_they_show() -> None:
    titles = [p["title"] for p in panels(load())]
    assert len(titles) == len(set(titles))
    assert all(p.get("description") for p in panels(load()))


def exposed_labels() -> dict[str, set[str]]:
    """Every sample name of a scrape in which each of our series has a value, with the label
    names its samples carry: the one-pod cluster's card also published by a DRA driver, a
    second card published only by it, and a claim on the first."""
    m: Metrics = metrics_of_one_pod()
    devices = [gpu_device(f"gpu-{i}", u, memory_mib=15360, index=i) for i, u in enumerate("ab")]
    devices[0]["attributes"]["uuid"] = {"string": "GPU-a"}
    m.cluster.cache.dra.upsert_slice(resource_slice("n", devices))
    m.cluster.cache.dra.upsert_claim(
        allocated_claim("c", "ns", "n", [("gpu-0", {"memory": mib(1000), "cores": "10"})])
    )
    m.add_probes(
        Probes(
            lambda: True,
            lambda: True,
            lambda: 0,
            lambda: (0, 0.0),
            lambda: 0.0,
            lambda: False,
            lambda: 0.0,
            lambda: 0.0,
            lambda: 0,
        )
    )
    for histogram in (m.filter_seconds, m.bind_seconds, m.admission_seconds):
        histogram.labels("ok").observe(0.01)
    m.loop_lag.observe(0.001)
    m.preemptions.labels("attempted", "").inc()
    m.bind_failures.labels("lock-contention").inc()
    text = b"".join(m.render(m.snapshot())).decode()
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return out


def test_every_series_a_query_names_is_one_hami_serve_exposes() -> None:
    exposed = exposed_labels().keys()
    unknown = {(q.panel, name) for q in queries(load()) for name in metric_names(q.expr) - exposed}
    assert unknown == set()


# Grafana's unit ids (its valueFormats registry) the dashboard uses: counts, bytes, percent of
# 100 and of 1, seconds, a rate, yes/no.
UNITS = {"short", "bytes", "percent", "percentunit", "s", "reqps", "bool_yes_no"}


def test_every_panel_and_column_says_its_unit() -> None:
    missing, unknown = [], []
    for panel in panels(load()):
        field = panel.get("fieldConfig") or {}
        unit = (field.get("defaults") or {}).get("unit")
        if not unit:
            missing.append(panel["title"])
        overrides = [
            prop["value"]
            for o in field.get("overrides") or ()
            for prop in o["properties"]
            if prop["id"] == "unit"
        ]
        unknown += [(panel["title"], u) for u in [unit, *overrides] if u and u not in UNITS]
    assert missing == []
    assert unknown == []


SELECTOR = re.compile(r"\b(hami_[a-z_]+)\{([^}]*)\}")
MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
CLAUSE = re.compile(r"\b(?:by|on|ignoring|without|group_left|group_right)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# What Prometheus adds to every series it scrapes.
TARGET_LABELS = {"instance", "job"}
LABEL_VALUES = re.compile(r"label_values\((\w+)(?:\{([^}]*)\})?,\s*(\w+)\)")


def unknown_labels(dashboard: dict[str, Any], exposed: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(where, label) for each label a query, its legend or a variable names that the series it
    reads do not carry: a matcher's on that very series, a `by`/`on` clause's or a legend's on
    one of the query's series."""
    out = set()
    for panel in panels(dashboard):
        for t in panel["targets"]:
            expr = t["expr"]
            carried = TARGET_LABELS.union(*(exposed.get(n, set()) for n in metric_names(expr)))
            for metric, body in SELECTOR.findall(expr):
                out |= {
                    (panel["title"], f"{metric}:{lab}")
                    for lab in MATCHER.findall(body)
                    if lab not in exposed.get(metric, set())
                }
            named = {lab.strip() for clause in CLAUSE.findall(expr) for lab in clause.split(",")}
            named |= set(LEGEND.findall(t.get("legendFormat") or ""))
            out |= {(panel["title"], lab) for lab in named - {""} if lab not in carried}
    for v in dashboard["templating"]["list"]:
        if v["type"] != "query":
            continue
        metric, body, label = LABEL_VALUES.fullmatch(v["query"]["query"]).groups()  # type: ignore[union-attr]
        labels = {label, *MATCHER.findall(body or "")}
        out |= {(f"${v['name']}", lab) for lab in labels if lab not in exposed.get(metric, set())}
    return out


def test_every_label_a_query_names_is_one_its_series_carry() -> None:
    assert unknown_labels(load(), exposed_labels()) == set()


def test_the_label_check_finds_a_label_no_series_carries() -> None:
    dashboard = load()
    first = next(iter(panels(dashboard)))
    first["targets"][0]["expr"] = first["targets"][0]["expr"].replace("device_type", "vendor")
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    variables["device_type"]["query"]["query"] = (
        "label_values(hami_vgpu_memory_allocated_bytes, device_type)"
    )
    assert unknown_labels(dashboard, exposed_labels()) == {
        ("GPU cards", "hami_gpu_memory_limit_bytes:vendor"),
        ("$device_type", "device_type"),
    }


def test_every_card_and_container_query_follows_the_device_type_variable() -> None:
    """Every family's cards are in the same series, told apart by device_type: each query on
    cards or container slices keeps to the device types chosen (containers through their card),
    and the choices are the device types the cards carry."""
    dashboard = load()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    chosen = variables["device_type"]
    assert (
        chosen["query"]["query"]
        == 'label_values(hami_gpu_memory_limit_bytes{node=~"$node"}, device_type)'
    )
    assert chosen["includeAll"] and chosen["allValue"] == ".*" and chosen["multi"]
    exposed = exposed_labels()
    on_cards = {n for n, labels in exposed.items() if {"node", "device_uuid"} <= labels}
    loose = [
        (q.panel, q.ref)
        for q in queries(dashboard)
        if metric_names(q.expr) & on_cards and 'device_type=~"$device_type"' not in q.expr
    ]
    assert loose == []


def test_device_types_have_their_own_panels() -> None:
    by_title = {p["title"]: p for p in panels(load())}
    for title in (
        "Device types",
        "Memory allocated by device type",
        "Cores allocated by device type",
    ):
        assert all("by (device_type)" in t["expr"] for t in by_title[title]["targets"]), title


def test_a_panel_says_which_world_each_card_is_in_and_what_dra_claims_hold() -> None:
    by_title = {p["title"]: p for p in panels(load())}
    (worlds,) = by_title["Cards by world"]["targets"]
    assert "by (source)" in worlds["expr"] and "hami_gpu_source_info" in worlds["expr"]
    dra = {name for t in by_title["DRA cards"]["targets"] for name in metric_names(t["expr"])}
    assert dra == {
        "hami_gpu_source_info",
        "hami_dra_gpu_memory_allocated_bytes",
        "hami_dra_gpu_memory_limit_bytes",
        "hami_dra_gpu_core_allocated_ratio",
        "hami_dra_gpu_claims",
    }
    exposed = exposed_labels()
    assert "source" in exposed["hami_gpu_source_info"]
    assert {"node", "device_uuid"} <= exposed["hami_dra_gpu_claims"]
