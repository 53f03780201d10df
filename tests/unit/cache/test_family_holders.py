"""The pods holding each card, as a family reading them sees them (FitPod.holders): MetaX's
sGPU QoS reads the policy and app class of the pods on a card, decided or bound, and forgets
a pod once it is gone. Families that read no holders, and NVIDIA's pods, keep none."""

import asyncio
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.families.hygon import HYGON
from hami.engine.families.metax.config import APP_CLASS, QOS_POLICY
from hami.engine.policy import Defaults
from hami.engine.preempt import Victim, without
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.placement import FilterOutcome, Placement
from tests.builders import FAMILIES, family_node, family_pod, sample_card
from tests.fakes.kubeapi import FakeKube
from tests.unit.service.preemption.test_preempter import preempting

SGPU = FAMILIES.by_type()["Metax-SGPU"]
NODE = "sg"
CARD = "GPU-sg-0"
QOS_MISMATCH = "1/1 CardQosPolicyMismatch"


def sgpu_node(policy: str) -> dict[str, Any]:
    """One sGPU card its device plugin reports under `policy`."""
    card = (
        f'[{{"uuid":"{CARD}","bdf":"0000:40:00.0","model":"MXC500","totalDevCount":16,'
        f'"totalCompute":100,"totalVRam":65536,"healthy":true,"qosPolicy":"{policy}",'
        '"linkZone":1}]'
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "annotations": {SGPU.wire.register_annotation: card}},
        "status": {"allocatable": {"metax-tech.com/sgpu": "16"}},
    }


def sgpu_pod(name: str, **annotations: str) -> dict[str, Any]:
    pod = family_pod(name, SGPU, annotations=dict(annotations))
    pod["spec"]["containers"][0]["resources"]["limits"].update(
        {"metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "10"}
    )
    return pod


def cluster(policy: str = "fixed-share") -> tuple[ClusterCache, Placement]:
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.replace_nodes([sgpu_node(policy)])
    return cache, Placement(cache, Defaults(), ResourceDefaults())


def place(placement: Placement, pod: dict[str, Any]) -> FilterOutcome:
    placement.cache.upsert_pod(pod)
    return placement.filter(pod, [NODE])


def bind(cache: ClusterCache, pod: dict[str, Any], outcome: FilterOutcome) -> None:
    d = outcome.decision
    assert d is not None and d.node is not None and d.devices is not None
    spec = pod["spec"]
    pod["metadata"]["annotations"].update(
        allocation_annotations(
            d.node,
            d.devices,
            0,
            containers=tuple(spec["containers"]),
            cards=cache.family_cards(d.node),
            families=FAMILIES,
        )
    )
    spec["nodeName"] = d.node
    pod["status"] = {"phase": "Running"}
    cache.upsert_pod(pod)


def test_a_decided_pod_puts_its_card_under_its_policy_until_it_is_forgotten() -> None:
    cache, placement = cluster("fixed-share")
    first = place(placement, sgpu_pod("a", **{QOS_POLICY: "best-effort"}))
    assert first.decision is not None and first.decision.node == NODE
    # Not bound yet: the card runs best-effort from this decision on, whatever the plugin says.
    second = place(placement, sgpu_pod("b", **{QOS_POLICY: "fixed-share"}))
    assert second.failed == {NODE: QOS_MISMATCH}
    cache.forget("uid-a")
    assert place(placement, sgpu_pod("b", **{QOS_POLICY: "fixed-share"})).decision.node == NODE  # type: ignore[union-attr]


def test_a_bound_pod_holds_its_card_until_it_is_deleted() -> None:
    cache, placement = cluster("fixed-share")
    pod = sgpu_pod("a", **{QOS_POLICY: "best-effort"})
    bind(cache, pod, place(placement, pod))
    assert cache.reservation("uid-a") is None
    (holder,) = cache.view[NODE].holders[CARD]
    assert holder[0] == "uid-a" and holder[1][QOS_POLICY] == "best-effort"
    assert place(placement, sgpu_pod("b", **{QOS_POLICY: "fixed-share"})).failed == {
        NODE: QOS_MISMATCH
    }
    cache.delete_pod(pod)
    assert cache.view[NODE].holders == {}
    assert place(placement, sgpu_pod("b", **{QOS_POLICY: "fixed-share"})).decision.node == NODE  # type: ignore[union-attr]


def test_an_online_pod_keeps_pods_without_a_class_off_its_card() -> None:
    cache, placement = cluster("best-effort")
    pod = sgpu_pod("a", **{APP_CLASS: "online"})
    bind(cache, pod, place(placement, pod))
    assert place(placement, sgpu_pod("b", **{QOS_POLICY: "best-effort"})).failed == {
        NODE: "1/1 CardAppClassMismatch"
    }


def test_preemption_sees_the_card_without_its_victims() -> None:
    cache, placement = cluster("fixed-share")
    pod = sgpu_pod("a", **{QOS_POLICY: "best-effort"})
    bind(cache, pod, place(placement, pod))
    node = cache.view[NODE]
    victim = Victim("uid-a", "ns", "a", 0, 0.0, {CARD: cache.usage()[NODE][CARD]})
    assert without(node, [victim], families=FAMILIES).holders == {}
    other = Victim("uid-x", "ns", "x", 0, 0.0, {})
    assert without(node, [other], families=FAMILIES).holders == node.holders


def test_families_that_read_no_holders_keep_none() -> None:
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.replace_nodes([family_node("dcu", HYGON, [sample_card(HYGON, 0)])])
    pod = family_pod("p", HYGON, mem=1000)
    out = Placement(cache, Defaults(), ResourceDefaults()).filter(pod, ["dcu"])
    assert out.decision is not None and out.decision.node == "dcu"
    bind(cache, pod, out)
    assert cache.view["dcu"].holders == {}


def test_a_preemptions_hold_shows_the_preemptors_policy_on_its_card() -> None:
    """The cards a preemption holds for a pod list it among their holders, with the policy it
    will put the card under, as a decision's cards do."""
    cache, placement = cluster("fixed-share")
    low = sgpu_pod("low", **{QOS_POLICY: "fixed-share"})
    low["spec"]["priority"] = 1
    low["spec"]["containers"][0]["resources"]["limits"]["metax-tech.com/vmemory"] = "60"
    bind(cache, low, place(placement, low))
    low["status"]["startTime"] = "2026-01-01T00:00:01Z"
    high = sgpu_pod("high", **{QOS_POLICY: "best-effort"})
    high["spec"]["priority"] = 1000
    kube = FakeKube()
    for p in (low, high):
        kube.add("pods", p)
    preempter = preempting(kube, cache, [low], lambda: 0.0)

    async def run() -> None:
        assert preempter.filter(high, [NODE]).node_names is None
        await asyncio.gather(*preempter.preempter._tasks)

    asyncio.run(run())
    assert cache.reservation("uid-high") is not None
    policies = {uid: a.get(QOS_POLICY) for uid, a in cache.view[NODE].holders[CARD]}
    assert policies == {"uid-low": "fixed-share", "uid-high": "best-effort"}
