"""`hami status`, `hami explain` and the metrics see the other families' cards."""

from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.families.hygon import HYGON
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.runtime.exposition import ClusterExposition
from hami.service.annotations import allocation_annotations
from hami.service.explain import explain
from hami.service.placement import Placement
from hami.service.status import render_json, render_text, status
from tests.builders import FAMILIES, family_node, family_pod, sample_card

WIRE = HYGON.wire


def cluster() -> tuple[ClusterCache, dict[str, Any]]:
    """One node with two DCUs; pod `held` bound to DCU-1 with 1000 MiB."""
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([family_node("n", HYGON, [sample_card(HYGON, i) for i in range(2)])])
    pod = family_pod("held", HYGON, mem=1000)
    decision = Placement(cache, Defaults(), ResourceDefaults()).filter(pod, ["n"]).decision
    assert decision is not None and decision.node == "n" and decision.devices is not None
    pod["metadata"]["annotations"].update(
        allocation_annotations("n", decision.devices, 0, families=FAMILIES)
    )
    pod["spec"]["nodeName"] = "n"
    pod["status"]["phase"] = "Running"
    cache.upsert_pod(pod)
    return cache, pod


def test_status_lists_the_dcus_and_who_holds_them() -> None:
    cache, pod = cluster()
    s = status(cache, [pod], ResourceDefaults())
    text = "\n".join(render_text(s))
    assert "DCU-Z100L" in text and "ns/held" in text
    cards = render_json(s)["nodes"][0]["cards"]
    assert [c["uuid"] for c in cards] == ["DCU-0", "DCU-1"]
    assert cards[1]["memory_mib"] == {"allocated": 1000, "total": 32768}
    assert cards[1]["pods"][0]["pod"] == "held"
    assert s.unregistered == 0


def test_explain_a_pending_dcu_pod_in_hamis_words() -> None:
    cache, _ = cluster()
    lines = explain(cache, family_pod("big", HYGON, count=3), Defaults(), ResourceDefaults())
    assert any("NodeInsufficientDevice" in line for line in lines), lines


def test_explain_a_bound_dcu_pod_shows_its_allocation() -> None:
    cache, pod = cluster()
    lines = explain(cache, pod, Defaults(), ResourceDefaults())
    assert any(
        f"DCU {pod['metadata']['annotations'][WIRE.allocated_annotation]}" in line for line in lines
    ), lines


def test_the_per_card_series_carry_the_dcus() -> None:
    cache, _ = cluster()
    metrics = ClusterExposition(cache)
    written = b"".join(metrics.render(metrics.snapshot())).decode()
    allocated = [
        line
        for line in written.splitlines()
        if line.startswith("hami_gpu_memory_allocated_bytes{") and 'device_uuid="DCU-1"' in line
    ]
    assert len(allocated) == 1 and 'device_type="DCU-Z100L"' in allocated[0]
    assert allocated[0].endswith(" 1.048576e+09")


def test_status_shows_a_dcu_pods_allocation() -> None:
    cache, pod = cluster()
    (shown,) = status(cache, [pod], ResourceDefaults()).pods
    assert shown.allocated == f"DCU {pod['metadata']['annotations'][WIRE.allocated_annotation]}"
