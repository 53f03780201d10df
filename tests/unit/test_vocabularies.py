"""Each closed vocabulary is one enum, and what users read about it names exactly its values:
the bind-failure reasons in the metric's help, docs/metrics.md and the dashboard; the Event
reasons, node policies and card policy keys and filters in the docs and the chart's schema. An
unknown value is an error wherever one is turned into the enum."""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami.cache.store import ClusterCache
from hami.engine.decide import node_order
from hami.engine.fit import _sort_key
from hami.engine.policy import (
    CardFilter,
    CardKey,
    GpuPolicy,
    NodePolicy,
    PolicyError,
    parse_gpu_policy,
    parse_node_policy,
)
from hami.engine.requests import ResourceDefaults
from hami.kube.events import EventReason
from hami.kube.limiter import WriteLimiter
from hami.runtime.metrics import Metrics
from hami.service.binderrors import BindError, BindFailure
from tests.builders import FAMILIES
from tests.unit.monitoring.dashboard import load, panels

REPO = Path(__file__).resolve().parents[2]
DOCS = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])


def values(vocabulary: type[StrEnum]) -> set[str]:
    return {str(v) for v in vocabulary}


def quoted(text: str) -> set[str]:
    """What the text sets in code type (fenced blocks left out)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return set(re.findall(r"`([^`\n]+)`", prose))


def listed(text: str) -> set[str]:
    """The words of a prose list: `a, b, c or d` (with any parenthesised remarks left out)."""
    bare = re.sub(r"\([^)]*\)", "", text)
    return {w.strip(" .`") for w in re.split(r",|\bor\b", bare) if w.strip(" .`")}


def test_the_bind_failure_metrics_help_names_every_reason() -> None:
    m = Metrics(
        ClusterCache(lambda: 0.0, families=FAMILIES, resources=ResourceDefaults()),
        lambda: 0.0,
        lambda: 0,
        writes=WriteLimiter(1),
    )
    m.bind_failures.labels(BindFailure.API_ERROR).inc()
    text = b"".join(m.render(m.snapshot())).decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "hami_bind_failures"]
    _, _, reasons = family.documentation.partition("by reason: ")
    assert listed(reasons) == values(BindFailure), family.documentation


def test_the_metrics_reference_names_every_bind_failure_reason() -> None:
    page = (REPO / "docs" / "metrics.md").read_text()
    (row,) = [line for line in page.splitlines() if line.startswith("| `hami_bind_failures_total`")]
    assert quoted(row.partition(" by reason: ")[2]) - {"Binding"} == values(BindFailure), row


def test_the_dashboard_names_every_bind_failure_reason() -> None:
    (panel,) = [
        p
        for p in panels(load())
        if any("hami_bind_failures_total" in t.get("expr", "") for t in p.get("targets", ()))
    ]
    description = panel["description"].partition("by reason: ")[2].partition(". ")[0]
    assert listed(description) == values(BindFailure), description


def test_an_unknown_bind_failure_reason_is_an_error() -> None:
    with pytest.raises(ValueError, match="timeout"):
        BindError("?", "timeout")  # type: ignore[arg-type]


def test_the_docs_name_every_event_reason() -> None:
    assert values(EventReason) <= quoted(DOCS)


def test_the_docs_and_the_chart_name_every_policy() -> None:
    assert values(NodePolicy) | values(CardKey) | values(CardFilter) <= quoted(DOCS)
    schema = json.loads((REPO / "helm" / "hami" / "values.schema.json").read_text())
    text = json.dumps(schema)
    node_enums = [e for e in re.findall(r'"enum": (\[[^\]]*\])', text) if "binpack" in e]
    assert [set(json.loads(e)) for e in node_enums] == [values(NodePolicy)]
    for name in values(CardKey) | values(CardFilter):
        assert name in text


@pytest.mark.parametrize("policy", ["pack", "Binpack", "spread,binpack", ""])
def test_an_unknown_node_policy_is_an_error(policy: str) -> None:
    with pytest.raises(PolicyError, match="valid names: binpack, spread"):
        parse_node_policy(policy)
    with pytest.raises(ValueError, match=repr(policy)):
        node_order([], policy)  # type: ignore[arg-type]


def test_a_card_key_outside_the_vocabulary_is_an_error_not_numa() -> None:
    good = parse_gpu_policy("mutex,binpack")
    assert good.keys == (CardKey.BINPACK,)
    forged = GpuPolicy("x,y", True, False, False, ("topology",), "")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="topology"):
        _sort_key(forged, False)
