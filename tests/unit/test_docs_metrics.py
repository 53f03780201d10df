"""docs/metrics.md's reference tables are the series `hami serve` exposes: every name, its type
and its labels, under HAMi's v2.9+ names and under --legacy-metrics."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami.kube.limiter import WriteLimiter
from hami.runtime.metrics import Metrics, Probes
from tests.builders.chart import REPO_ROOT
from tests.draobjects import allocated_claim, gpu_device, mib, resource_slice
from tests.unit.runtime.scrapes import mig_cluster, outside_pod

PAGE = (REPO_ROOT / "docs" / "metrics.md").read_text()
ROW = re.compile(r"^\| `(\w+)` \| (counter|gauge|histogram) \| (.*?) \| .+ \|$", re.M)


def scrape(legacy: bool) -> str:
    """A scrape in which every series has a value: an A100 in MIG mode with instances, which a
    DRA driver publishes too, a pod placed outside the scheduler, a quota, a card only a DRA
    driver publishes with a claim on it, one of every observation."""
    cache = mig_cluster()
    cache.dra.upsert_slice(resource_slice("dra", [gpu_device("gpu-0", "GPU-d", memory_mib=1024)]))
    cache.dra.upsert_claim(allocated_claim("c", "ns", "dra", [("gpu-0", {"memory": mib(512)})]))
    # The A100 published by a DRA driver too: a card in both worlds.
    (a100,) = [c.info.id for c in cache.view["a100"].all_cards()]
    cache.dra.upsert_slice(resource_slice("a100", [gpu_device("gpu-0", a100, memory_mib=40960)]))
    cache.upsert_pod(outside_pod("other", "a100", 1))
    cache.quotas.replace([{"metadata": {"uid": "q", "namespace": "ns", "name": "gpu"},
                           "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}}}])  # fmt: skip
    m = Metrics(cache, lambda: 0.0, lambda: 0, legacy, writes=WriteLimiter(1))
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
    m.reservations_expired.inc()
    m.preemptions.labels("attempted", "").inc()
    m.bind_failures.labels("lock-contention").inc()
    m.write_observer()("patch", "nodes", "200", 0.01)
    return b"".join(m.render(m.snapshot())).decode()


def exposed(legacy: bool) -> dict[str, tuple[str, str]]:
    """name as a query names it (a counter with its _total) -> (type, its labels)."""
    out = {}
    families = list(text_string_to_metric_families(scrape(legacy)))
    counted = {f.name for f in families if f.type in ("counter", "histogram")}
    for family in families:
        if family.name.endswith("_created") and family.name[: -len("_created")] in counted:
            continue  # prometheus_client's start time of a counter or histogram
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = sorted({k for s in family.samples for k in s.labels} - {"le"})
        out[name] = (family.type, ", ".join(f"`{k}`" for k in labels) or "none")
    return out


def documented(section: str) -> dict[str, tuple[str, str]]:
    start = PAGE.index(section)
    end = PAGE.find("\n## ", start + 1)
    text = PAGE[start : end if end > 0 else None]
    rows = ROW.findall(text)
    assert len(rows) == len({name for name, _, _ in rows}), "a series listed twice"
    return {name: (kind, labels) for name, kind, labels in rows}


@pytest.mark.parametrize(
    ("legacy", "section"), [(False, "## Reference"), (True, "## Under --legacy-metrics")]
)
def test_the_reference_table_is_every_series_with_its_type_and_labels(
    legacy: bool, section: str
) -> None:
    series = exposed(legacy)
    if legacy:  # the legacy table lists what --legacy-metrics changes
        current = exposed(False)
        series = {k: v for k, v in series.items() if current.get(k) != v}
    assert documented(section) == series
